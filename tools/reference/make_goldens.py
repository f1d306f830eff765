#!/usr/bin/env python3
"""tools/reference/make_goldens.py — reference logits goldens for the C++ parity test.

Role: for each seed, generates the random-weight tiny model with the project's generator
(`ds4-gguf generate --profile tiny --quant q2 --seed S`), runs the float32 reference
(ds4_ref.py, weights dequantized from the q2 file) over a fixed 480-token prompt and writes
  tests/reference/goldens/seed<S>.json   per position: argmax, top-1 − top-2 margin, top-5
                                         ids and logits; plus file size / FNV-1a-64 of the
                                         generated model so a generator change is detected
  tests/reference/goldens/seed<S>.f32    full logits (little-endian f32, [n_full, n_vocab])
                                         at the positions listed in the JSON
  tests/reference/goldens/shipped.*      the same for the trained models/ds4-tiny.gguf on a
                                         480-token prompt made of the benchmark prompts
tests/reference/parity_test.cpp regenerates the same files and compares the C++ engine.

Usage: python3 tools/reference/make_goldens.py --ds4-gguf BUILD/tools/ds4-gguf/ds4-gguf
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_io import load_model  # noqa: E402

SEEDS = (1, 2, 3)
N_TOKENS = 480                 # > 4·top_k·... : 120 ratio-4 rows (indexer selects 16), 3 ratio-128 rows
FULL_POSITIONS = (31, 479)     # end of the first raw window, last position


def prompt_tokens(n: int, n_vocab: int) -> list[int]:
    """Fixed prompt: SHA-256 counter stream, with a repeated span so attention has something
    to find (tokens 300..363 repeat 100..163)."""
    out = []
    i = 0
    while len(out) < n:
        d = hashlib.sha256(f"ds4-parity-{i}".encode()).digest()
        out += [int.from_bytes(d[j:j + 4], "little") % n_vocab for j in range(0, 32, 4)]
        i += 1
    out = out[:n]
    out[300:364] = out[100:164]
    return out


def shipped_prompt(model_path: str, n: int) -> list[int]:
    """BOS + the first benchmark prompt of each channel (data/prompts), encoded with the
    model's own tokenizer (tools/tokenizer/ds4_bpe.py), cut to n tokens."""
    sys.path.insert(0, str(REPO / "tools" / "train"))
    from tokenize_corpus import load_bpe
    bpe, bos = load_bpe(model_path)
    out = [bos]
    for ch in ("italian", "english", "code", "structured"):
        first = json.loads((REPO / "data" / "prompts" / f"{ch}.jsonl").open().readline())
        out += bpe.encode(first["text"].encode("utf-8"))
    if len(out) < n:
        raise ValueError(f"shipped prompt has only {len(out)} tokens")
    return out[:n]


def write_golden(out: Path, stem: str, meta: dict, logits: np.ndarray, toks: list[int]) -> None:
    order = np.argsort(-logits, axis=-1, kind="stable")[:, :5]
    top = np.take_along_axis(logits, order, -1)
    gold = dict(meta)
    gold.update({
        "tokens": toks,
        "argmax": order[:, 0].tolist(),
        "margin": [round(float(m), 6) for m in (top[:, 0] - top[:, 1])],
        "top5": order.tolist(),
        "top5_logits": [[round(float(v), 6) for v in row] for row in top],
        "full_positions": list(FULL_POSITIONS),
    })
    (out / f"{stem}.json").write_text(json.dumps(gold, separators=(",", ":")) + "\n")
    logits[list(FULL_POSITIONS)].astype("<f4").tofile(out / f"{stem}.f32")
    m = np.array(gold["margin"])
    print(f"{stem}: margin min {m.min():.2e}, <0.05 at {(m < 0.05).sum()} of {len(m)} positions",
          flush=True)


def fnv1a64(path: Path) -> str:
    h = 0xcbf29ce484222325
    data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
    prime = 0x100000001b3
    mask = (1 << 64) - 1
    for b in data.tobytes():
        h = ((h ^ b) * prime) & mask
    return f"{h:016x}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ds4-gguf", required=True, help="path of the ds4-gguf binary")
    ap.add_argument("--out", default=str(REPO / "tests" / "reference" / "goldens"))
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="'' = none")
    ap.add_argument("--shipped", default=str(REPO / "models" / "ds4-tiny.gguf"),
                    help="also write goldens/shipped.* for this trained model ('' = skip)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        with tempfile.TemporaryDirectory() as td:
            path = Path(td) / f"tiny_q2_seed{seed}.gguf"
            subprocess.run([args.ds4_gguf, "generate", "--profile", "tiny", "--quant", "q2",
                            "--seed", str(seed), "-o", str(path)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            size = path.stat().st_size
            fnv = fnv1a64(path)
            model, _ = load_model(str(path))
        toks = prompt_tokens(N_TOKENS, model.cfg.n_vocab)
        with torch.no_grad():
            logits = model(torch.tensor([toks]))[0].float().numpy()       # [T, V]
        write_golden(out, f"seed{seed}", {
            "seed": seed,
            "generator": f"ds4-gguf generate --profile tiny --quant q2 --seed {seed}",
            "model_bytes": size, "model_fnv1a64": fnv, "n_vocab": model.cfg.n_vocab}, logits, toks)
    if args.shipped:
        path = Path(args.shipped)
        model, _ = load_model(str(path))
        toks = shipped_prompt(str(path), N_TOKENS)
        with torch.no_grad():
            logits = model(torch.tensor([toks]))[0].float().numpy()
        write_golden(out, "shipped", {
            "model": "models/ds4-tiny.gguf", "model_bytes": path.stat().st_size,
            "model_fnv1a64": fnv1a64(path), "n_vocab": model.cfg.n_vocab}, logits, toks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
