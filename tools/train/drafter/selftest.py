#!/usr/bin/env python3
"""tools/train/drafter/selftest.py — fast CPU checks of the PyTorch DSpark drafter and exporter.

Role: asserts the properties of dspark-drafter.md that training relies on, on a small random
target config (seconds on one core): layout size (24·S + 9 tensors), context visibility
(exactly the ring rows of positions P−W..P−1), the bidirectional block, the capture helper
(same logits as Ds4Model.forward, capture = HC mean after the block), the greedy Markov chain,
the accepted-length rule, and the support-GGUF export/load round trip (needs the row
quantizer, built on demand from build-dtrain / $DS4_BUILD; reported as SKIP when those
libraries are missing). Exit code 0 = all checks passed.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspark_ref import (Ds4Config, DSparkConfig, DSparkDrafter, accepted_lengths,  # noqa: E402
                        target_forward_capture)
from ds4_ref import Ds4Model  # noqa: E402

FAILS = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tcfg = Ds4Config(n_layer=4, n_embd=256, n_vocab=512, n_expert=8, n_expert_used=2, n_swa=8)
    target = Ds4Model(tcfg)
    target.init_weights(3)
    target.eval()
    dr = DSparkDrafter(tcfg, DSparkConfig(n_stages=2, block_size=4, markov_rank=32))
    dr.init_weights(4)
    with torch.no_grad():  # make the zero-initialised heads non-trivial
        for name, p, _ in dr.named_gguf_tensors():
            if "markov_w2" in name or "confidence" in name:
                p.normal_(0.0, 0.1)
    dr.eval()
    d = dr.dcfg
    check(len(dr.specs) == 24 * d.n_stages + 9, f"layout has 24*S+9 = {24 * d.n_stages + 9} tensors")
    check(d.window == tcfg.n_swa and d.target_layers == [1, 2, 3] and d.noise_token_id == 510,
          "defaults: window = target n_swa, last 3 layers, noise = n_vocab-2")

    T = 24
    x = torch.randint(0, tcfg.n_vocab - 2, (2, T))
    with torch.no_grad():
        cap, logits = target_forward_capture(target, x, d.target_layers)
        check(torch.equal(logits, target(x)), "capture helper gives Ds4Model.forward's logits")
        check(cap.shape == (2, T, 3 * tcfg.n_embd), "capture width = n_capture * n_embd")

        emb, outw = target.t("token_embd.weight"), target.t("output.weight")
        rows = dr.context_rows(cap)
        P = 15
        pos = torch.tensor([P, 3])
        bidx = torch.tensor([0, 1])

        def run(rows_, emb_=emb):
            ctx, mask = dr.gather_context(rows_, bidx, pos)
            return dr.forward_blocks(x[bidx, pos], pos, ctx, mask, emb_, outw)

        y0, U0 = run(rows)
        W = d.window
        out_rows = [r.clone() for r in rows]
        for r in out_rows:
            r[0, :P - W] += 5.0      # before the window
            r[0, P:] += 5.0          # the anchor's own row and later
            r[1, 3:] += 5.0
        y1, U1 = run(out_rows)
        check(torch.equal(U0, U1), "rows outside positions P-W..P-1 are invisible")
        in_rows = [r.clone() for r in rows]
        in_rows[1][0, P - W] += 1.0
        _, U2 = run(in_rows)
        check(not torch.equal(U0[0], U2[0]) and torch.equal(U0[1], U2[1]),
              "row P-W of the last stage's ring is visible, only to its own sequence")
        emb2 = emb.clone()
        emb2[d.noise_token_id] += 0.5
        _, U3 = run(rows, emb2)
        check(not torch.allclose(U0[:, 0], U3[:, 0]), "slot 0 sees the MASK slots (bidirectional block)")

        drafts, conf = dr.greedy_chain(y0, U0, x[bidx, pos])
        prev = torch.cat([x[bidx, pos][:, None], drafts[:, :-1]], 1)
        e = dr.markov_embed(prev)
        Z = U0 + dr.markov_bias(e)
        check(torch.equal(Z.argmax(-1), drafts), "greedy chain: d_k = argmax(U_k + W2 W1[d_{k-1}])")
        check(torch.allclose(dr.conf_logit(y0, e), conf), "confidence uses y_k and W1[prev_k]")

    dd = torch.tensor([[1, 2, 3, 4], [1, 9, 3, 4], [7, 2, 3, 4]])
    lab = torch.tensor([[1, 2, 3, 5], [1, 2, 3, 4], [1, 2, 3, 4]])
    cl = torch.tensor([[5.0, 5.0, -5.0, 5.0], [5.0] * 4, [5.0] * 4])
    nd, na = accepted_lengths(dd, lab, cl, 0.5)
    check(nd.tolist() == [2, 4, 4] and na.tolist() == [2, 1, 0], "accepted length = min(match prefix, confident prefix)")

    try:
        from export_gguf import ensure_quant_tool, export_support_gguf, load_support_gguf
        tool = ensure_quant_tool()
    except (FileNotFoundError, OSError, ImportError) as ex:
        print(f"SKIP export round trip: {ex}")
        tool = None
    if tool:
        with tempfile.TemporaryDirectory() as td:
            path = os.path.join(td, "d.gguf")
            export_support_gguf(dr, path, quant_tool=tool)
            back = load_support_gguf(path, tcfg)
            check(back.dcfg.__dict__ == d.__dict__, "metadata round trip")
            worst = {}
            for name, p, qt in dr.named_gguf_tensors():
                with torch.no_grad():
                    err = float((p - back.t(name)).abs().max() / p.abs().max().clamp_min(1e-12))
                worst[qt] = max(worst.get(qt, 0.0), err)
            check(worst["F32"] == 0.0 and worst["F16"] < 1e-3 and worst["Q8_0"] < 1e-2
                  and worst["IQ2_XXS"] < 1.0 and worst["Q2_K"] < 1.0,
                  "export types: F32 exact, F16/Q8_0 close, experts 2-bit: "
                  + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
    print("selftest:", "FAILED " + "; ".join(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
