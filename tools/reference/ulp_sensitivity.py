#!/usr/bin/env python3
"""tools/reference/ulp_sensitivity.py — how far the reference moves from ITSELF under 1-ulp noise.

Role: calibration of the f32-activation limits of tests/reference/parity_test.cpp. For one
golden (tests/reference/goldens/<stem>.json), reruns the float32 reference K times with every
float weight multiplied by (1 + r·2^-23), r uniform in {-1, 0, 1} (a 0/1-ulp perturbation:
the same math with different last-bit rounding, like a different summation order), and
prints, per run, what the parity test measures against the golden: argmax agreement, max and
mean |Δlogit| over the golden's top-5 ids, max |Δ| over the full vocab at the full positions,
and the largest reference margin (top1 − top2) at which the argmax flipped. With
--engine-dump (DS4_PARITY_DUMP output of the parity test) it prints the same for the engine.

The model's own discrete roundings (FP8-E4M3 and f16 KV rows, FP4 indexer rows, expert and
indexer top-k) turn last-bit differences into O(0.01–1) logit moves at the positions after a
flipped decision; these numbers are the floor any independent float32 implementation hits.

Usage: python3 tools/reference/ulp_sensitivity.py --model M.gguf --golden seed1 [-k 4]
       [--engine-dump DIR/engine_seed1_f32.f32]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_io import load_model  # noqa: E402


def stats(label: str, lg: np.ndarray, g: dict, full: np.ndarray) -> None:
    t5, l5 = np.array(g["top5"]), np.array(g["top5_logits"])
    d5 = np.abs(np.take_along_axis(lg, t5, 1) - l5)
    am, margin = np.array(g["argmax"]), np.array(g["margin"])
    flips = np.nonzero(lg.argmax(1) != am)[0]
    dfull = np.abs(lg[g["full_positions"]] - full).max()
    print(f"{label}: argmax agrees {len(am) - len(flips)}/{len(am)}, top-5 max {d5.max():.4f} "
          f"mean {d5.mean():.4f}, full-vocab max {dfull:.4f}, largest flipped margin "
          f"{margin[flips].max() if len(flips) else 0.0:.3f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the GGUF the golden was made from")
    ap.add_argument("--golden", required=True, help="stem under tests/reference/goldens/")
    ap.add_argument("-k", type=int, default=4, help="perturbed runs")
    ap.add_argument("--engine-dump", default="", help="engine logits [n_tokens, n_vocab] f32")
    args = ap.parse_args()
    torch.set_num_threads(2)
    gdir = REPO / "tests" / "reference" / "goldens"
    g = json.loads((gdir / f"{args.golden}.json").read_text())
    V = g["n_vocab"]
    full = np.fromfile(gdir / f"{args.golden}.f32", dtype="<f4").reshape(-1, V)
    toks = torch.tensor([g["tokens"]])
    for k in range(args.k):
        model, _ = load_model(args.model)
        gen = torch.Generator().manual_seed(100 + k)
        with torch.no_grad():
            for _, p in model.named_parameters():
                if p.dtype == torch.float32 and p.numel() > 16:
                    r = torch.randint(-1, 2, p.shape, generator=gen).float()
                    p.mul_(1 + r * 2.0 ** -23)
            lg = model(toks)[0].float().numpy()
        stats(f"{args.golden} reference, 1-ulp perturbation {k}", lg, g, full)
    if args.engine_dump:
        lg = np.fromfile(args.engine_dump, dtype="<f4").reshape(-1, V)
        stats(f"{args.golden} engine", lg, g, full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
