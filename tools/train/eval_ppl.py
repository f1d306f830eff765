#!/usr/bin/env python3
"""tools/train/eval_ppl.py — held-out perplexity of a DS4-layout GGUF with the reference.

Role: loads any DS4 GGUF (float or q2/q4: weights dequantized to float32 by gguf_io) and
reports per-channel held-out perplexity on the same windows train.py uses (consecutive
non-overlapping windows of --seq-len tokens; token 0 of each window is context only), plus
the unigram baseline. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "reference"))
sys.path.insert(0, str(REPO / "tools" / "train"))
from gguf_io import load_model  # noqa: E402
from train import CHANNELS, heldout_nll, unigram_nll  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=200_000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--channels", default=",".join(CHANNELS))
    args = ap.parse_args()
    data = dict(np.load(args.tokens))
    model, _ = load_model(args.model, args.device)
    res = {}
    for ch in args.channels.split(","):
        nll, n = heldout_nll(model, data[f"{ch}.heldout"], args.seq_len, args.device,
                             args.max_tokens)
        res[ch] = {"nll": nll, "ppl": math.exp(nll), "tokens": n,
                   "unigram_ppl": math.exp(unigram_nll(data[f"{ch}.train"],
                                                       data[f"{ch}.heldout"],
                                                       model.cfg.n_vocab))}
        print(f"{ch:10s} ppl {res[ch]['ppl']:9.3f} unigram {res[ch]['unigram_ppl']:9.2f} "
              f"({n} tokens)", file=sys.stderr, flush=True)
    print(json.dumps({"model": args.model, "seq_len": args.seq_len, "heldout": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
