#!/usr/bin/env python3
"""tools/reference/decision_replay.py — decision-replay parity of the C++ engine and the reference.

Role: the reference (ds4_ref.py) replays the discrete decisions the C++ engine took while
decoding a golden prompt in f32-activation numerics (traced by ds4-decision-trace, built from
tests/reference/decision_trace.cpp), after VERIFYING that each is a legitimate outcome for the
reference's own pre-decision values; then the replayed reference's logits are compared with
the engine's at every position.

Replayed decisions (Ds4Model.replay hooks), in forward order per layer:
  raw_kv       every raw KV row: FP8-E4M3 (dims [0, D−n_rot), power-of-two block scale of 64)
               then f16
  comp         every compressed attention row (ratio 4 and 128): FP8 then f16
  index        every indexer row (ratio 4): FP4-E2M1 (blocks of 32) of the Hadamard'd row, f16
  index_query  the FP4 indexer query at each position where the engine ran indexer_select
  index_select the top-k compressed rows chosen by the indexer at those positions
  experts      the routed experts of every position (hash layers: must equal the table)
Verification:
  * rounded values: the engine's value must be a rounding, on the model's value grid (f16;
    E4M3 or E2M1 × the block's power-of-two scale, then f16), of some x within δ of the
    reference's own pre-rounding value, δ = ROUND_REL_TOL × max |row| (f32 noise; 1-2% of an
    f16 step). Rounding is monotone, so: round(pre − δ) <= engine <= round(pre + δ). Away
    from a rounding midpoint that is the reference's own value; within δ of one, either of
    the two nearest grid values. The block scale is the reference's own, or the one of
    amax ± δ where that crosses a power of two.
  * top-k sets: every chosen score >= every unchosen (visible) score − ε, with ε =
    TOPK_REL_EPS × max(1, max |score| of that row).
Assertions (--check): every decision legitimate; argmax equal at EVERY position; max |Δlogit|
over all positions and the full vocabulary <= LOGIT_BOUND (f32 reassociation only: see
README.md "Decision replay").

Usage:
  decision_replay.py --trace-bin BUILD/tests/ds4-decision-trace --check   (the ctest)
  decision_replay.py --trace DIR --model PATH                             (one existing trace)
Exit code 77 when torch or gguf is missing (a failure in ctest: scripts/setup.sh installs them).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import numpy as np
    import torch
    import gguf  # noqa: F401
except ImportError as e:  # pragma: no cover
    print(f"decision_replay: FAIL: missing Python package ({e}); scripts/setup.sh installs tools/requirements.txt")
    sys.exit(77)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ds4_ref import fp8_e4m3_roundtrip  # noqa: E402
from gguf_io import load_model  # noqa: E402

GOLDENS = REPO / "tests" / "reference" / "goldens"
E4M3_MAX, E2M1_MAX = 448.0, 6.0
FP8_BLOCK, FP4_BLOCK = 64, 32
ROUND_REL_TOL = 4e-6     # δ of a rounded value: this × max |pre-rounding row| (f32 noise)
TOPK_REL_EPS = 1e-5      # top-k gap tolerance, relative to max(1, max |score|) of the row
LOGIT_BOUND = 1e-4       # max |Δlogit| after replay (f32 reassociation; measured <= 1.5e-5)


def _e4m3_magnitudes() -> np.ndarray:
    v = [(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
         for e in range(16) for m in range(8)]
    return np.array(sorted(set(x for x in v if x <= E4M3_MAX)), dtype=np.float64)


E4M3_GRID = np.concatenate([-_e4m3_magnitudes()[::-1], _e4m3_magnitudes()[1:]])
E2M1_MAG = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_GRID = np.concatenate([-E2M1_MAG[::-1], E2M1_MAG[1:]])


def f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def f16_neighbours(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest f16 <= x and smallest f16 >= x (as f32), elementwise."""
    h = x.astype(np.float16)
    hf = h.astype(np.float32)
    with np.errstate(over="ignore"):
        dn = np.nextafter(h, np.float16(-np.inf)).astype(np.float32)
        up = np.nextafter(h, np.float16(np.inf)).astype(np.float32)
    lo = np.where(hf <= x, hf, dn)
    hi = np.where(hf >= x, hf, up)
    return lo, hi


def grid_neighbours(v: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest grid value <= v and smallest >= v (v already clamped to the grid's range)."""
    i = np.searchsorted(grid, v, side="right") - 1
    i = np.clip(i, 0, len(grid) - 1)
    lo = grid[i]
    exact = lo == v
    j = np.clip(i + np.where(exact, 0, 1), 0, len(grid) - 1)
    return lo, grid[j]


class Stats:
    def __init__(self):
        self.n = {}          # kind -> decisions replayed
        self.diff = {}       # kind -> decisions that differ from the reference's own
        self.bad = []        # illegitimate decisions (messages)
        self.worst_tie = 0.0   # max |pre − mid(own, engine)| / max |row| over differing roundings
        self.worst_gap = 0.0   # max (best unchosen − worst chosen) / scale over differing sets
        self.closest = {}      # kind -> min (worst chosen − best unchosen) / scale (all sets)

    def add(self, kind: str, n: int, diff: int) -> None:
        self.n[kind] = self.n.get(kind, 0) + n
        self.diff[kind] = self.diff.get(kind, 0) + diff


class Replayer:
    """Ds4Model.replay hooks: verify each engine decision, count differences, return it."""

    def __init__(self, trace_dir: Path, cfg):
        self.cfg = cfg
        self.j = json.loads((trace_dir / "trace.json").read_text())
        self.a = {}
        for name, d in self.j["arrays"].items():
            dt = np.int32 if d["dtype"] == "i32" else np.float32
            self.a[name] = np.fromfile(trace_dir / d["file"], dtype="<" + np.dtype(dt).str[1:]
                                       ).reshape(d["shape"])
        self.st = Stats()

    # -- rounding checks
    def _check_rounded(self, kind: str, il: int, pre: np.ndarray, eng: np.ndarray,
                       own: np.ndarray, fmt: str) -> None:
        """pre/eng/own: [..., n] f32 rows; fmt: 'kv' (FP8 on the leading n − n_rot dims, then
        f16 on all), 'fp4_f16' (FP4 blocks of 32, then f16) or 'fp4'. Legitimate: the engine's
        value is the rounding of some x with |x − pre| <= δ, δ = ROUND_REL_TOL · max |pre row|
        (rounding is monotone, so: round(pre − δ) <= engine <= round(pre + δ), with the block
        scale of the reference's own amax, or of amax ± δ when that crosses a power of two)."""
        pre = pre.astype(np.float32)
        n = pre.shape[-1]
        delta = ROUND_REL_TOL * np.abs(pre).max(-1, keepdims=True).astype(np.float64)
        delta = np.broadcast_to(delta, pre.shape)
        if fmt == "kv":
            nl = n - self.cfg.n_rot
            ok = np.zeros(pre.shape, dtype=bool)
            ok[..., :nl] = self._check_blocks(pre[..., :nl], eng[..., :nl], delta[..., :nl],
                                              FP8_BLOCK, E4M3_GRID, E4M3_MAX, 1e-4, True)
            p64 = pre[..., nl:].astype(np.float64)
            d = delta[..., nl:]
            lo = f16((p64 - d).astype(np.float32))
            hi = f16((p64 + d).astype(np.float32))
            e = eng[..., nl:]
            ok[..., nl:] = (lo <= e) & (e <= hi)
        else:
            ok = self._check_blocks(pre, eng, delta, FP4_BLOCK, E2M1_GRID, E2M1_MAX,
                                    7.052966104933725e-38, fmt == "fp4_f16")
        differ = eng != own
        n_bad = int((~ok).sum())
        if n_bad:
            idx = tuple(np.argwhere(~ok)[0])
            self.st.bad.append(f"{kind} layer {il}: {n_bad} values not a rounding of pre ± δ, "
                               f"first at {idx}: pre {float(pre[idx])!r} engine "
                               f"{float(eng[idx])!r} own {float(own[idx])!r} "
                               f"δ {float(delta[idx]):.3g}")
        if differ.any():
            need = np.abs(pre.astype(np.float64) - (own.astype(np.float64) + eng) / 2)
            rel = need / np.maximum(np.abs(pre).max(-1, keepdims=True), 1e-30)
            self.st.worst_tie = max(self.st.worst_tie, float(rel[differ].max()))
        self.st.add(kind, pre.size, int(differ.sum()))

    @staticmethod
    def _nearest(v: np.ndarray, grid: np.ndarray) -> np.ndarray:
        lo, hi = grid_neighbours(v, grid)
        return np.where(hi - v < v - lo, hi, lo)

    def _check_blocks(self, pre, eng, delta, block, grid, vmax, amin, then_f16) -> np.ndarray:
        shp = pre.shape
        pb = pre.reshape(-1, block).astype(np.float64)
        eb = eng.reshape(-1, block)
        db = np.ascontiguousarray(delta).reshape(-1, block)
        amax = np.maximum(np.abs(pb).max(-1, keepdims=True), amin)
        dmax = db.max(-1, keepdims=True)
        scales = []
        for a in (amax, np.maximum(amax - dmax, amin), amax + dmax):
            r = (a.astype(np.float32) / np.float32(vmax)).astype(np.float64)
            scales.append(np.exp2(np.ceil(np.log2(r))))
        ok_any = np.zeros(eb.shape[0], dtype=bool)[:, None]
        ok_el = None
        for s in scales:  # own scale first; the others only when amax ± δ changes it
            def rnd(x):
                q = (self._nearest(np.clip(x / s, -vmax, vmax), grid) * s).astype(np.float32)
                return f16(q) if then_f16 else q
            ok = (rnd(pb - db) <= eb) & (eb <= rnd(pb + db))
            if ok_el is None:
                ok_el = ok
            blk = ok.all(-1, keepdims=True)
            ok_el = np.where(blk & ~ok_any, ok, ok_el)
            ok_any = ok_any | blk
        return ok_el.reshape(shp)

    # -- top-k checks
    def _check_topk(self, kind: str, il: int, score: np.ndarray, vis: np.ndarray,
                    eng_sel: np.ndarray, own_sel: np.ndarray, k: int) -> None:
        """score/vis/eng_sel/own_sel: [T, n] (sel bool masks)."""
        sc = np.where(vis, score.astype(np.float64), -np.inf)
        chosen_min = np.where(eng_sel, sc, np.inf).min(-1)
        unchosen_max = np.where(vis & ~eng_sel, sc, -np.inf).max(-1)
        scale = np.maximum(1.0, np.abs(np.where(vis, score, 0.0)).max(-1))
        gap = (unchosen_max - chosen_min) / scale
        count_ok = eng_sel.sum(-1) == np.minimum(k, vis.sum(-1))
        inside = ~(eng_sel & ~vis).any(-1)
        ok = count_ok & inside & (gap <= TOPK_REL_EPS)
        differ = (eng_sel != own_sel).any(-1)
        fin = np.isfinite(gap)
        if fin.any():
            self.st.closest[kind] = min(self.st.closest.get(kind, np.inf), float(-gap[fin].max()))
        if differ.any():
            self.st.worst_gap = max(self.st.worst_gap, float(np.max(gap[differ])))
        if not ok.all():
            t = int(np.argwhere(~ok)[0][0])
            self.st.bad.append(f"{kind} layer {il}: {int((~ok).sum())} positions not a valid top-{k}, "
                               f"first at {t}: relative gap {gap[t]:.3g}, count ok {bool(count_ok[t])}")
        self.st.add(kind, score.shape[0], int(differ.sum()))

    # -- hooks (tensors [B=1, ...])
    def raw_kv(self, il, pre, own):
        eng = self.a["raw_kv"][il]
        self._check_rounded("raw_kv", il, pre[0].numpy(), eng, own[0].numpy(), "kv")
        return torch.from_numpy(eng.copy())[None]

    def comp(self, il, pre, own):
        eng = self.a[f"comp_L{il}"]
        self._check_rounded("comp", il, pre[0].numpy(), eng, own[0].numpy(), "kv")
        return torch.from_numpy(eng.copy())[None]

    def index(self, il, pre, own):
        eng = self.a[f"index_L{il}"]
        self._check_rounded("index", il, pre[0].numpy(), eng, own[0].numpy(), "fp4_f16")
        return torch.from_numpy(eng.copy())[None]

    def _called(self, il) -> np.ndarray:
        return self.a[f"idxsel_L{il}"][:, 0] != -1   # [T] positions where indexer_select ran

    def index_query(self, il, pre, own):
        called = self._called(il)
        eng = self.a[f"idxq_L{il}"]
        self._check_rounded("index_query", il, pre[0].numpy()[called], eng[called],
                            own[0].numpy()[called], "fp4")
        out = own[0].clone()
        out[torch.from_numpy(called)] = torch.from_numpy(eng[called].copy())
        return out[None]

    def index_select(self, il, masked, vis, own):
        called = self._called(il)
        eng = self.a[f"idxsel_L{il}"][called].astype(bool)
        sc = masked[0].numpy()[called]
        v = vis[0].numpy()[called]
        self._check_topk("index_select", il, np.where(v, sc, 0.0), v, eng,
                         own[0].numpy()[called], self.cfg.indexer_top_k)
        out = own[0].clone()
        out[torch.from_numpy(called)] = torch.from_numpy(eng)
        if not torch.equal(out[~torch.from_numpy(called)], vis[0][~torch.from_numpy(called)]):
            self.st.bad.append(f"index_select layer {il}: a position without indexer_select "
                               "does not see every visible row")
        return out[None]

    def experts(self, il, score, own):
        eng = self.a["experts"][il].astype(np.int64)                    # [T, n_used]
        if score is None:  # hash layer: the table decides, nothing to choose
            same = np.array_equal(np.sort(eng, -1), np.sort(own[0].numpy(), -1))
            if not same:
                self.st.bad.append(f"experts layer {il}: hash routing differs from the table")
            self.st.add("experts_hash", eng.shape[0], 0 if same else 1)
            return torch.from_numpy(eng)[None]
        ne = score.shape[-1]
        eng_m = np.zeros((eng.shape[0], ne), dtype=bool)
        np.put_along_axis(eng_m, eng, True, -1)
        own_m = np.zeros_like(eng_m)
        np.put_along_axis(own_m, own[0].numpy(), True, -1)
        self._check_topk("experts", il, score[0].numpy(), np.ones_like(eng_m), eng_m, own_m,
                         self.cfg.n_expert_used)
        return torch.from_numpy(eng)[None]


def self_test() -> None:
    """The verifier rejects what it must (so the test can fail): a one-step rounding change
    away from a midpoint, an FP8 value off its block grid, a top-k set with a better unchosen
    score; and accepts a rounding exactly at a midpoint and a top-k within ε."""
    class Cfg:
        n_rot = 64
        indexer_top_k = 2
        n_expert_used = 2
    rp = object.__new__(Replayer)
    rp.cfg, rp.st = Cfg(), Stats()
    one = np.float32(1.0)
    pre = np.full((1, 128), 0.5, np.float32)
    for v, eng, legit in ((one + np.float32(0.3 * 2 ** -10), one + np.float32(2 ** -10), False),
                          (one + np.float32(2 ** -11), one + np.float32(2 ** -10), True),
                          (one + np.float32(2 ** -11), one, True)):
        p, e = pre.copy(), f16(pre)
        p[0, 100], e[0, 100] = v, eng
        rp.st.bad = []
        rp._check_rounded("t", 0, p, e, f16(p), "kv")
        assert bool(rp.st.bad) != legit, (v, eng, rp.st.bad)
    p = np.linspace(-1.0, 1.0, 128, dtype=np.float32)[None]
    own = f16(fp8_e4m3_roundtrip(torch.from_numpy(p), 64).numpy())
    rp.st.bad = []
    rp._check_rounded("t", 0, p, own, own, "kv")
    assert not rp.st.bad, rp.st.bad
    e = own.copy()
    e[0, 3] = np.float32(e[0, 3] + 2 ** -4)        # block max 1 -> scale 2^-8: one E4M3 step
    rp._check_rounded("t", 0, p, e, own, "kv")
    assert rp.st.bad, "FP8 off-grid value accepted"
    sc = np.array([[3.0, 2.0, 2.0 - 1e-7, 0.5]])
    for sel, legit in (([1, 0, 0, 1], False), ([1, 0, 1, 0], True), ([1, 1, 0, 0], True)):
        rp.st.bad = []
        m = np.array([sel], dtype=bool)
        rp._check_topk("t", 0, sc, np.ones_like(m), m, m, 2)
        assert bool(rp.st.bad) != legit, (sel, rp.st.bad)


def replay_one(trace_dir: Path, model_path: str, replay: bool = True) -> dict:
    model, _ = load_model(model_path)
    model.eval()
    rp = Replayer(trace_dir, model.cfg)
    toks = rp.j["tokens"]
    model.replay = rp if replay else None
    with torch.no_grad():
        logits = model(torch.tensor([toks]))[0].float().numpy()
    eng = rp.a["logits"]
    d = np.abs(logits - eng)
    am_ref, am_eng = logits.argmax(-1), eng.argmax(-1)
    srt = np.sort(logits, -1)
    margin = srt[:, -1] - srt[:, -2]
    return {"stats": rp.st, "max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "argmax_agree": int((am_ref == am_eng).sum()), "n": len(toks),
            "min_margin": float(margin.min()), "worst_pos": int(d.max(-1).argmax())}


def report(label: str, r: dict) -> None:
    st = r["stats"]
    parts = ", ".join(f"{k} {st.n[k]}/{st.diff[k]}" for k in st.n)
    print(f"[replay] {label}: decisions replayed/differing-from-reference: {parts}; "
          f"worst differing rounding |pre-mid|/rowmax {st.worst_tie:.3g}, worst top-k gap "
          f"{st.worst_gap:.3g} (closest calls: "
          f"{', '.join(f'{k} {v:.2g}' for k, v in st.closest.items())}); max|dlogit| {r['max_abs']:.3g} (mean {r['mean_abs']:.2g}, "
          f"at position {r['worst_pos']}); argmax {r['argmax_agree']}/{r['n']} "
          f"(min reference margin {r['min_margin']:.3g}); illegitimate: {len(st.bad)}",
          flush=True)
    for b in st.bad[:10]:
        print(f"  ILLEGITIMATE: {b}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace-bin", help="ds4-decision-trace binary: trace every golden")
    ap.add_argument("--goldens", default="seed1,seed2,seed3,shipped")
    ap.add_argument("--trace", help="an existing trace directory (with --model)")
    ap.add_argument("--model")
    ap.add_argument("--check", action="store_true", help="exit 1 unless all assertions hold")
    ap.add_argument("--no-replay", action="store_true",
                    help="compare with the reference's own decisions instead (diagnostic)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    self_test()
    runs = []
    if args.trace:
        runs.append((args.trace, Path(args.trace), args.model))
    else:
        if not args.trace_bin:
            ap.error("--trace-bin or --trace")
        tmp = tempfile.TemporaryDirectory()
        for g in [s for s in args.goldens.split(",") if s]:
            gj = GOLDENS / f"{g}.json"
            out = Path(tmp.name) / g
            out.mkdir()
            if g == "shipped":
                mp = str(REPO / "models" / "ds4-tiny.gguf")
                if not Path(mp).exists():
                    print(f"[replay] {g}: no {mp}, skipped")
                    continue
                cmd = ["--model", mp]
            else:
                mp = str(out / "model.gguf")
                cmd = ["--generate-seed", g.removeprefix("seed")]
            t0 = time.time()
            subprocess.run([args.trace_bin, *cmd, "--golden", str(gj), "--out", str(out),
                            "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
            print(f"[replay] {g}: engine trace {time.time() - t0:.1f} s", flush=True)
            runs.append((g, out, mp))
    failed = False
    for label, tdir, mp in runs:
        t0 = time.time()
        r = replay_one(tdir, mp, not args.no_replay)
        report(label, r)
        print(f"[replay] {label}: reference replay {time.time() - t0:.1f} s", flush=True)
        if r["stats"].bad or r["argmax_agree"] != r["n"] or r["max_abs"] > LOGIT_BOUND:
            failed = True
            if r["argmax_agree"] != r["n"]:
                print(f"  FAIL {label}: argmax differs at {r['n'] - r['argmax_agree']} positions")
            if r["max_abs"] > LOGIT_BOUND:
                print(f"  FAIL {label}: max |dlogit| {r['max_abs']:.3g} > {LOGIT_BOUND}")
    return 1 if (failed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
