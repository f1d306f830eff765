#!/usr/bin/env python3
"""tools/train/tokenize_corpus.py — tokenizes the corpus splits into token-id arrays.

Role: reads build-corpus/<channel>.{train,heldout}.jsonl (tools/corpus/build_corpus.py) and
the tokenizer GGUF (tools/tokenizer/train_tokenizer.py), encodes each document with the DS4
pre-tokenizer + BPE (tools/tokenizer/ds4_bpe.py, the oracle the C++ tokenizer is checked
against) and writes one uint16 stream per channel and split to OUT/tokens.npz:
  <channel>.<split> = BOS doc0 BOS doc1 ...   (BOS = id of <｜begin▁of▁sentence｜>)
Deterministic: documents in file order, no randomness.
"""
from __future__ import annotations

import argparse
import json
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "tokenizer"))
sys.path.insert(0, str(REPO / "tools" / "reference"))
CHANNELS = ("structured", "code", "english", "italian")
BOS_TEXT = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"

_bpe = None


def load_bpe(tok_path: str):
    import gguf
    import ds4_bpe
    from gguf_io import read_metadata
    md = read_metadata(gguf.GGUFReader(tok_path))
    tokens = list(md["tokenizer.ggml.tokens"])
    merges = list(md["tokenizer.ggml.merges"])
    return ds4_bpe.Bpe(tokens, merges), tokens.index(BOS_TEXT)


def _init(tok_path: str) -> None:
    global _bpe
    _bpe, _ = load_bpe(tok_path)


def _encode(text: str) -> np.ndarray:
    return np.asarray(_bpe.encode(text.encode("utf-8")), dtype=np.uint16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(REPO / "build-corpus"))
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    _, bos = load_bpe(args.tokenizer)
    arrays = {}
    with Pool(args.jobs, initializer=_init, initargs=(args.tokenizer,)) as pool:
        for ch in CHANNELS:
            for split in ("train", "heldout"):
                path = Path(args.corpus) / f"{ch}.{split}.jsonl"
                texts = [json.loads(line)["text"] for line in path.open(encoding="utf-8")]
                parts = []
                for ids in pool.imap(_encode, texts, chunksize=8):
                    parts.append(np.asarray([bos], dtype=np.uint16))
                    parts.append(ids)
                arr = np.concatenate(parts) if parts else np.zeros(0, np.uint16)
                arrays[f"{ch}.{split}"] = arr
                chars = sum(len(t) for t in texts)
                print(f"{ch:10s} {split:7s} {len(texts):5d} docs {arr.size:9d} tokens "
                      f"({chars / max(arr.size, 1):.2f} chars/token)", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
