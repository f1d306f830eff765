#!/usr/bin/env python3
"""tools/reference/engine_vs_reference_ppl.py — held-out perplexity: C++ engine vs reference.

Role: takes a DS4 GGUF (e.g. models/ds4-tiny.gguf) and the held-out token streams
(tokens.npz from tools/train/tokenize_corpus.py), cuts the first --windows windows of
--window tokens per channel, and computes the next-token NLL of exactly the same windows
  * with the C++ engine (tests/reference/engine_nll.cpp, binary `ds4-engine-nll`, decode
    token by token) in its production numerics (Q8_0/Q8_K activations) and, with
    --f32-activations, also with EngineOptions::f32_activations (reference numerics), and
  * with the float32 reference on the file's dequantized weights (ds4_ref.py).
Prints a table and one JSON object with both perplexities per channel.

Usage:
  python3 tools/reference/engine_vs_reference_ppl.py --model models/ds4-tiny.gguf \
      --tokens build-reference/tokens.npz --engine-nll BUILD/tests/ds4-engine-nll
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_io import load_model  # noqa: E402

CHANNELS = ("structured", "code", "english", "italian")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--engine-nll", required=True, help="path of the ds4-engine-nll binary")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--windows", type=int, default=4, help="windows per channel")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--f32-activations", action="store_true",
                    help="also run the engine with f32 activations (slower)")
    args = ap.parse_args()
    data = dict(np.load(args.tokens))
    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model)
    res = {}
    for ch in CHANNELS:
        s = data[f"{ch}.heldout"]
        n = min(args.windows, len(s) // args.window)
        wins = s[:n * args.window].astype(np.int32).reshape(n, args.window)
        eng_f32 = None
        with tempfile.NamedTemporaryFile(suffix=".i32") as tf:
            wins.astype("<i4").tofile(tf.name)
            cmd = [args.engine_nll, args.model, tf.name, str(args.window), str(args.threads)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True)
            if args.f32_activations:
                o32 = subprocess.run(cmd + ["f32"], check=True, capture_output=True, text=True)
                eng_f32 = json.loads(o32.stdout.strip().splitlines()[-1])
        eng = json.loads(out.stdout.strip().splitlines()[-1])
        tot, cnt = 0.0, 0
        with torch.no_grad():
            for w in wins:
                x = torch.from_numpy(w.astype(np.int64))[None]
                lg = model(x)[0].double()
                tot += float(F.cross_entropy(lg[:-1], x[0, 1:], reduction="sum"))
                cnt += args.window - 1
        res[ch] = {"tokens": cnt, "engine_ppl": math.exp(eng["nll"]),
                   "reference_ppl": math.exp(tot / cnt),
                   "engine_nll": eng["nll"], "reference_nll": tot / cnt}
        f32_txt = ""
        if eng_f32 is not None:
            res[ch]["engine_f32_ppl"] = math.exp(eng_f32["nll"])
            res[ch]["engine_f32_nll"] = eng_f32["nll"]
            f32_txt = f"  engine f32-act ppl {res[ch]['engine_f32_ppl']:9.4f}"
        print(f"{ch:10s} engine ppl {res[ch]['engine_ppl']:9.4f}{f32_txt}  reference ppl "
              f"{res[ch]['reference_ppl']:9.4f}  ({cnt} tokens)", file=sys.stderr, flush=True)
    print(json.dumps({"model": args.model, "window": args.window, "heldout": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
