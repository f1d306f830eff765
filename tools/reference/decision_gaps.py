#!/usr/bin/env python3
"""tools/reference/decision_gaps.py — how close the reference's discrete decisions are to flipping.

Role: debugging aid for engine-vs-reference differences that remain with
EngineOptions::f32_activations (tests/reference/parity_test.cpp). Runs the float32 reference
over the first POS+1 tokens of a golden and prints, at position POS, for every call in
forward order: expert routing (relative gap between the n_used-th and next expert score),
indexer top-k (relative gap between the k-th and next score) and the FP8-E4M3 rounding of
the raw KV row (smallest relative distance of a scaled value to a rounding midpoint). A
decision whose gap is comparable to the engine-vs-reference difference of its input (~1e-6
relative at the first positions, growing after earlier flips) can legitimately go the
other way in an independent implementation.

Usage: python3 tools/reference/decision_gaps.py --model M.gguf --golden shipped --pos 77
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ds4_ref  # noqa: E402
from gguf_io import load_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--golden", required=True, help="stem under tests/reference/goldens/")
    ap.add_argument("--pos", type=int, required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    g = json.loads((REPO / "tests" / "reference" / "goldens" / f"{args.golden}.json").read_text())
    toks = torch.tensor([g["tokens"][:args.pos + 1]])
    model, _ = load_model(args.model)
    n_expert, n_used, top_k = model.cfg.n_expert, model.cfg.n_expert_used, model.cfg.indexer_top_k
    rows: list[tuple[str, float]] = []
    orig_sort, orig_fp8 = torch.sort, ds4_ref.fp8_e4m3_roundtrip

    def sort(x, dim=-1, descending=False, stable=False):
        r = orig_sort(x, dim=dim, descending=descending, stable=stable)
        n = x.shape[-1]
        k = n_used if n == n_expert else top_k
        v = r.values[0, args.pos].float()
        if n > k and bool(torch.isfinite(v[k])):
            rows.append(("route" if n == n_expert else f"indexer top-{k} of {n}",
                         float((v[k - 1] - v[k]).abs() / v[k - 1].abs().clamp_min(1e-30))))
        return r

    def fp8(x, n_dims, block=64):
        if x.shape[1] == toks.shape[1]:  # raw KV rows (compressed rows have fewer)
            xb = x[0, args.pos, :n_dims].float().reshape(-1, block)
            amax = xb.abs().amax(-1, keepdim=True).clamp_min(1e-4)
            v = (xb / torch.exp2(torch.ceil(torch.log2(amax / 448.0)))).clamp(-448, 448).abs()
            sp = torch.exp2(torch.floor(torch.log2(v.clamp_min(2.0 ** -6))) - 3)
            frac = v / sp - torch.floor(v / sp)
            rows.append(("fp8 raw KV", float(((frac - 0.5).abs() * sp / v.clamp_min(1e-30)).min())))
        return orig_fp8(x, n_dims, block)

    torch.sort, ds4_ref.fp8_e4m3_roundtrip = sort, fp8
    try:
        with torch.no_grad():
            model(toks)
    finally:
        torch.sort, ds4_ref.fp8_e4m3_roundtrip = orig_sort, orig_fp8
    for i, (name, gap) in enumerate(rows):
        print(f"call {i:2d} {name:24s} relative gap at position {args.pos}: {gap:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
