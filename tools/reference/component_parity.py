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

Caveat (measured 2026-12, see --ties): the simulation is not bit-faithful (torch summation
orders differ from the engine's source-order dots by ~1 ulp), so an activation that sits on
an EXACT Q8_0 rounding tie (x·(1/d) = k + 0.5, round-half-to-even) can round the other way in
the engine and move logits by ~0.01-0.02. Such ties are structural, not rare: at position 0
a layer's attention output is a scalar multiple of its single FP8/f16-rounded KV row, and in
the one-component variants the layer input is a scalar multiple of an f16 embedding row. A
flipped tie in a KV row then shows at every later position that attends to that row. With
--ties the reference lists the positions whose Q8_0/Q8_K inputs lie within TIE_EPS of a
tie; a difference that starts at such a position is a tie flip, not a component bug (the
ratio-4 layer matched to 2e-5 over 264 positions, indexer included, once the engine's tie
decisions were substituted; tools/reference/README.md).

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


class TieRecorder:
    """Wraps ds4_ref.q8_0_act / q8_k_act during one reference forward and records, per
    (sublayer, call index), the positions where some element's scaled value x·iscale lies
    within eps of k + 0.5 (where the engine's round-half-to-even may pick the other side)."""

    def __init__(self, model, eps: float):
        import ds4_ref
        self.mod, self.eps, self.where, self.hits = ds4_ref, eps, "head", {}
        self.orig = (ds4_ref.q8_0_act, ds4_ref.q8_k_act)
        self.calls = 0
        rec = self

        def wrap(fn, block, kind):
            def f(x):
                rec._check(x, block, kind)
                return fn(x)
            return f
        ds4_ref.q8_0_act = wrap(self.orig[0], 32, "q8_0")
        ds4_ref.q8_k_act = wrap(self.orig[1], 256, "q8_k")
        for sub in ("attention", "ffn"):
            fn = getattr(model, sub)

            def hook(il, X, tokens, _fn=fn, _sub=sub):
                rec.where, rec.calls = f"{'attn' if _sub == 'attention' else 'ffn'}{il}", 0
                out = _fn(il, X, tokens)
                rec.where, rec.calls = "head", 0
                return out
            setattr(model, sub, hook)

    def _check(self, x, block, kind):
        xb = x.detach().float().reshape(x.shape[0], x.shape[1], -1, block)
        if kind == "q8_0":
            d = xb.abs().amax(-1, keepdim=True) / 127.0
            s = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        else:
            mx = xb.gather(-1, xb.abs().argmax(-1, keepdim=True))
            s = torch.where(mx != 0, -127.0 / mx, torch.zeros_like(mx))
        v = xb * s
        near = ((v - torch.floor(v) - 0.5).abs() < self.eps).flatten(2).any(-1)[0]
        pos = torch.nonzero(near).flatten().tolist()
        if pos:
            self.hits.setdefault(f"{self.where}.{kind}#{self.calls}", []).extend(pos)
        self.calls += 1

    def close(self):
        self.mod.q8_0_act, self.mod.q8_k_act = self.orig

    def report(self, variant: str) -> str:
        # only the active component (and the shared output head) can move the logits
        keep = [k for k in self.hits
                if variant in ("all", "head") or k.startswith((variant + ".", "head."))]
        return "; ".join(f"{k}@{sorted(set(self.hits[k]))[:12]}" for k in keep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ds4-gguf", required=True)
    ap.add_argument("--engine-nll", required=True)
    ap.add_argument("--model", default="", help="DS4 GGUF (default: generate tiny q2 seed 1)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--ties", action="store_true",
                    help="list the (layer, activation, position) whose Q8_0/Q8_K input is "
                         "within --tie-eps of a rounding tie")
    ap.add_argument("--tie-eps", type=float, default=2e-5)
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
            ties = TieRecorder(m, args.tie_eps) if args.ties else None
            with torch.no_grad():
                ref = m(torch.from_numpy(toks.astype(np.int64))[None])[0, :-1].numpy()
            if ties is not None:
                ties.close()
            d = np.abs(ref - eng).max(-1)
            bad = np.nonzero(d > 1e-4)[0]
            print(f"{v:8s} max|d| {d.max():.5f}  positions with |d|>1e-4: {len(bad)}/{len(d)} "
                  f"first {bad[:8].tolist()}  d[0..4] {np.round(d[:5], 5).tolist()}", flush=True)
            if os.environ.get("CP_VERBOSE"):
                print("   ", np.round(d, 4).tolist())
            if ties is not None:
                print("    Q8 ties:", ties.report(v) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
