#!/usr/bin/env python3
"""tools/bench_plots.py OUT [--png-dir DIR] — the figures and the summary of a CUDA sweep.

Reads the folder scripts/bench_cuda_sweep.sh wrote (docs/CUDA.md "Measuring"):
  decode.csv    ds4-bench: ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,
                kvcache_bytes,logits_sha256,backend
  verify.csv    bench_verify --csv_out: r,call,best_ms,median_ms,bytes (r = 0: decode(1))
  roofline.csv  bench_cuda --roofline: device,read_gbps,copy_gbps,buffer_bytes,l2_bytes
  longctx.csv   ds4-bench --fill-ctx (decode after a synthetic fill, timing only): decode.csv's
                columns, logits_sha256 "synthetic" or "skipped: <bytes needed vs free>"
  memory.csv    step,context_tokens,peak_used_mib,idle_used_mib,seconds,exit
  sweep.log     the "weights: ... weights on cuda:0: X GB ..." line
and writes
  decode_tps_vs_context.png  decode tokens/s against the context length (prefill on a
                             second axis);
  verify_time_vs_r.png       verify(r) time (best and median) against r, decode(1) as a
                             line, and the bytes roofline: bytes of the call / the probe's read
                             GB/s (the fastest the call could be, streaming its bytes once);
  longctx_decode_tps.png     decode tokens/s against the (synthetic) context, 1K .. 1M, KV
                             bytes per token on a second axis, skipped contexts marked;
and prints the summary (roofline share per r, KV bytes per token, long context, memory). A file that is
missing skips its figure or line. Needs matplotlib (tools/requirements.txt).
"""
import argparse
import csv
import os
import re
import sys


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_decode(rows, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ctx = [int(r["ctx_tokens"]) for r in rows]
    dec = [float(r["gen_tps"]) for r in rows]
    pre = [float(r["prefill_tps"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(ctx, dec, "o-", color="tab:blue", label="decode tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ctx)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("decode tokens/s", color="tab:blue")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(ctx, pre, "s--", color="tab:gray", alpha=0.7, label="prefill tokens/s (new tokens)")
    ax2.set_ylabel("prefill tokens/s", color="tab:gray")
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [l.get_label() for l in lines], loc="lower left", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def ctx_label(c):
    if c % 1048576 == 0:
        return "%dM" % (c // 1048576)
    if c % 1024 == 0:
        return "%dK" % (c // 1024)
    return str(c)


def plot_longctx(rows, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    done = [r for r in rows if not r["logits_sha256"].startswith("skipped")]
    skipped = [r for r in rows if r["logits_sha256"].startswith("skipped")]
    ctx = [int(r["ctx_tokens"]) for r in done]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(ctx, [float(r["gen_tps"]) for r in done], "o-", color="tab:blue", label="decode tokens/s")
    for r in skipped:
        ax.axvline(int(r["ctx_tokens"]), color="tab:red", ls=":", lw=1.5)
        ax.text(int(r["ctx_tokens"]), 0.02, " does not fit", color="tab:red", fontsize=8, rotation=90,
                transform=ax.get_xaxis_transform(), va="bottom")
    all_ctx = sorted(set(ctx + [int(r["ctx_tokens"]) for r in skipped]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(all_ctx)
    ax.set_xticklabels([ctx_label(c) for c in all_ctx])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("context (tokens, synthetic fill)")
    ax.set_ylabel("decode tokens/s", color="tab:blue")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(ctx, [int(r["kvcache_bytes"]) / int(r["ctx_tokens"]) for r in done], "s--", color="tab:gray",
             alpha=0.7, label="state bytes / context token")
    ax2.set_ylabel("state bytes per token", color="tab:gray")
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [l.get_label() for l in lines], loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def plot_verify(rows, read_gbps, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dec = [r for r in rows if int(r["r"]) == 0]
    ver = sorted((r for r in rows if int(r["r"]) > 0), key=lambda r: int(r["r"]))
    rs = [int(r["r"]) for r in ver]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(rs, [float(r["best_ms"]) for r in ver], "o-", color="tab:blue", label="verify(r), best")
    ax.plot(rs, [float(r["median_ms"]) for r in ver], "x:", color="tab:blue", alpha=0.6, label="verify(r), median")
    if dec:
        ax.axhline(float(dec[0]["best_ms"]), color="tab:green", ls="--", lw=1, label="decode(1), best")
    if read_gbps:
        roof = [float(r["bytes"]) / (read_gbps * 1e9) * 1e3 for r in ver]
        ax.plot(rs, roof, "-", color="tab:red", lw=2,
                label="bytes roofline (bytes / %.0f GB/s read)" % read_gbps)
    ax.set_xlabel("r (rows verified in one forward)")
    ax.set_ylabel("time per call (ms)")
    ax.set_xticks(rs)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def longctx_lines(rows):
    lines = []
    for r in rows:
        c = int(r["ctx_tokens"])
        if r["logits_sha256"].startswith("skipped"):
            lines.append("long context %5s (%8d tokens): %s" % (ctx_label(c), c, r["logits_sha256"]))
            continue
        kv = int(r["kvcache_bytes"])
        lines.append("long context %5s (%8d tokens): decode %8.2f tokens/s, state %9.1f MiB, %6.0f bytes/token"
                     % (ctx_label(c), c, float(r["gen_tps"]), kv / 2**20, kv / c))
    return lines


def summary(out, decode, verify, roof, memory, longctx=()):
    lines = []
    read_gbps = float(roof[0]["read_gbps"]) if roof else 0.0
    if roof:
        lines.append("roofline: %s: read %.0f GB/s, D2D copy %.0f GB/s (read + write)"
                     % (roof[0]["device"], read_gbps, float(roof[0]["copy_gbps"])))
    if verify:
        lines.append("%-10s %10s %10s %12s %12s %10s" % ("call", "best_ms", "median_ms", "MB/call", "roofline_ms",
                                                        "% of roof"))
        for r in sorted(verify, key=lambda r: int(r["r"])):
            name = "decode(1)" if int(r["r"]) == 0 else "verify(%s)" % r["r"]
            b = float(r["bytes"])
            roof_ms = b / (read_gbps * 1e9) * 1e3 if read_gbps else 0.0
            best = float(r["best_ms"])
            lines.append("%-10s %10.3f %10.3f %12.1f %12.3f %9.1f%%" % (
                name, best, float(r["median_ms"]), b / 1e6, roof_ms, 100.0 * roof_ms / best if best else 0.0))
    if decode:
        for r in decode:
            lines.append("decode at %6s tokens: %8.2f tokens/s (prefill %8.2f tokens/s), state %.1f MiB" % (
                r["ctx_tokens"], float(r["gen_tps"]), float(r["prefill_tps"]), int(r["kvcache_bytes"]) / 2**20))
        if len(decode) >= 2:
            a, b = decode[0], decode[-1]
            dctx = int(b["ctx_tokens"]) - int(a["ctx_tokens"])
            if dctx > 0:
                kv = (int(b["kvcache_bytes"]) - int(a["kvcache_bytes"])) / dctx
                lines.append("KV per token: %.0f bytes (state bytes between %s and %s tokens)"
                             % (kv, a["ctx_tokens"], b["ctx_tokens"]))
    lines.extend(longctx_lines(longctx))
    log = os.path.join(out, "sweep.log")
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            text = f.read()
        m = re.findall(r"weights on cuda:\d+: ([0-9.]+) GB", text)
        if m:
            lines.append("weights: %s GB on the device" % m[-1])
        # bench_verify's "memory:" lines (the session's own formulas), once per context.
        seen = set()
        for ctx, state, per_tok, scratch, sess in re.findall(
                r"memory: ctx=(\d+) state_bytes=(\d+) state_bytes_per_token=(\d+) scratch_bytes=(\d+) "
                r"session_bytes=(\d+)", text):
            if ctx in seen:
                continue
            seen.add(ctx)
            lines.append("session at %8s tokens: state %9.1f MiB (%s bytes/token), scratch + frontier copies "
                         "%8.1f MiB, session %9.1f MiB" % (ctx, int(state) / 2**20, per_tok, int(scratch) / 2**20,
                                               int(sess) / 2**20))
    for r in memory:
        if r["step"] in ("decode_sweep", "profile_decode", "verify_sweep", "profile_verify", "longctx"):
            lines.append("peak device memory, %-15s (context %6s tokens): %s MiB (idle %s MiB)"
                         % (r["step"], r["context_tokens"], r["peak_used_mib"], r["idle_used_mib"]))
    return lines, read_gbps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the sweep's folder")
    ap.add_argument("--png-dir", help="where the PNGs go (default: the sweep's folder)")
    a = ap.parse_args()
    png_dir = a.png_dir or a.out
    os.makedirs(png_dir, exist_ok=True)
    decode = read_csv(os.path.join(a.out, "decode.csv"))
    verify = read_csv(os.path.join(a.out, "verify.csv"))
    roof = read_csv(os.path.join(a.out, "roofline.csv"))
    memory = read_csv(os.path.join(a.out, "memory.csv"))
    longctx = read_csv(os.path.join(a.out, "longctx.csv"))
    if not (decode or verify or longctx):
        print("bench_plots: no decode.csv, verify.csv or longctx.csv in %s" % a.out, file=sys.stderr)
        return 1
    lines, read_gbps = summary(a.out, decode, verify, roof, memory, longctx)
    device = roof[0]["device"] if roof else (decode[0].get("backend", "") if decode else "")
    if decode:
        png = os.path.join(png_dir, "decode_tps_vs_context.png")
        plot_decode(decode, png, "ds4 decode, full-shape Flash q2 — %s" % device)
        lines.append("wrote " + png)
    if verify:
        png = os.path.join(png_dir, "verify_time_vs_r.png")
        plot_verify(verify, read_gbps, png, "verify(r) vs the bytes roofline — %s" % device)
        lines.append("wrote " + png)
    if any(not r["logits_sha256"].startswith("skipped") for r in longctx):
        png = os.path.join(png_dir, "longctx_decode_tps.png")
        backend = longctx[0].get("backend", "")
        plot_longctx(longctx, png, "ds4 decode after a synthetic fill (timing only) — %s" % (device or backend))
        lines.append("wrote " + png)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
