#!/usr/bin/env python3
"""tools/reference/component_parity.py — locate engine-vs-reference differences by component.

Role: debugging aid for the C++ forward pass. Starting from a DS4 GGUF (default: a generated
tiny model), writes variants in which only one component is active (the others' output
projections zeroed: attention `attn_output_b`, FFN `ffn_down_exps` + `ffn_down_shexp`),
re-quantizes each with `ds4-gguf quantize --quant q2`, runs the C++ engine over a prompt
(`ds4-engine-nll` with DS4_DUMP_LOGITS) and the reference with the engine's activation
quantization simulated (Ds4Model.sim_act_quant), and prints the max |Δlogit| per position.
With the simulation on, a correct component matches to 0.0 at nearly every position; a
systematic difference shows up at every position (or at a fixed one, e.g. position 0).

Variants: head (no attention, no FFN: embedding + HC + output head), attnL (attention of
layer L only), ffnL (FFN of layer L only), all (unchanged model).
Usage:
  python3 tools/reference/component_parity.py --ds4-gguf B/tools/ds4-gguf/ds4-gguf \
      --engine-nll B/tests/ds4-engine-nll [--model M.gguf] head attn0 attn2 attn3 ffn0 ffn4
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_io import export_model, load_model  # noqa: E402
from make_goldens import prompt_tokens  # noqa: E402


def neutralize(model, variant: str) -> None:
    cfg = model.cfg
    keep_attn = keep_ffn = None
    if variant.startswith("attn"):
        keep_attn = int(variant[4:])
    elif variant.startswith("ffn"):
        keep_ffn = int(variant[3:])
    elif variant not in ("head",):
        raise ValueError(f"unknown variant '{variant}'")
    with torch.no_grad():
        for il in range(cfg.n_layer):
            if il != keep_attn:
                model.t(f"blk.{il}.attn_output_b.weight").zero_()
            if il != keep_ffn:
                model.t(f"blk.{il}.ffn_down_exps.weight").zero_()
                model.t(f"blk.{il}.ffn_down_shexp.weight").zero_()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ds4-gguf", required=True)
    ap.add_argument("--engine-nll", required=True)
    ap.add_argument("--model", default="", help="DS4 GGUF (default: generate tiny q2 seed 1)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as td:
        base = args.model
        if not base:
            base = os.path.join(td, "gen.gguf")
            subprocess.run([args.ds4_gguf, "generate", "--profile", "tiny", "--quant", "q2",
                            "--seed", "1", "-o", base], check=True, capture_output=True)
        toks = np.array(prompt_tokens(args.tokens, load_model(base)[0].cfg.n_vocab), np.int32)
        tok_path = os.path.join(td, "toks.i32")
        toks.astype("<i4").tofile(tok_path)
        for v in args.variants:
            path = base
            if v != "all":
                m, _ = load_model(base)
                neutralize(m, v)
                fpath = os.path.join(td, f"{v}_f.gguf")
                export_model(m, fpath, tokenizer_gguf=base)
                path = os.path.join(td, f"{v}.gguf")
                subprocess.run([args.ds4_gguf, "quantize", fpath, "-o", path, "--quant", "q2"],
                               check=True, capture_output=True)
            dump = os.path.join(td, f"{v}.f32")
            subprocess.run([args.engine_nll, path, tok_path, str(len(toks)), "2"], check=True,
                           capture_output=True, env={**os.environ, "DS4_DUMP_LOGITS": dump})
            eng = np.fromfile(dump, dtype=np.float32).reshape(len(toks) - 1, -1)
            m, _ = load_model(path)
            m.sim_act_quant = True
            with torch.no_grad():
                ref = m(torch.from_numpy(toks.astype(np.int64))[None])[0, :-1].numpy()
            d = np.abs(ref - eng).max(-1)
            bad = np.nonzero(d > 1e-4)[0]
            print(f"{v:8s} max|d| {d.max():.5f}  positions with |d|>1e-4: {len(bad)}/{len(d)} "
                  f"first {bad[:8].tolist()}  d[0..4] {np.round(d[:5], 5).tolist()}", flush=True)
            if os.environ.get("CP_VERBOSE"):
                print("   ", np.round(d, 4).tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
