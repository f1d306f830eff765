#!/usr/bin/env python3
"""tools/ncu_kernel_table.py NCU_CSV [B_CSV] [--forward K] [--top N] [--csv OUT] — where a
decoded token's device time goes, kernel by kernel.

Reads the output of
    ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
        ds4-bench --cuda -m MODEL --prompt-file P --ctx-start 64 --ctx-max 64 --gen-tokens 2
(scripts/bench_cuda_sweep.sh's `kernels` step; ds4-bench's own lines and ncu's ==PROF== lines
may be mixed in: only the rows after ncu's "ID",... header are read). ncu runs the kernels one at
a time, so each duration is the kernel's own, with no gaps and no overlap. The launches are cut
into forwards at the greedy read-out (each argmax kernel closes a forward: the prefill's, then
one per decoded token); the table is one forward's (the last complete one unless --forward K
picks another, 0 = the first), grouped by kernel (template arguments kept, parameters dropped):
calls, total µs, µs per call, share of the forward, grid and block shapes.

With a second file B (the same command under other flags or another build), the two tables
side by side: µs per call in each and the ratio B / A per kernel, and the forwards' totals.

Exit status 0; 2 for a file that cannot be read or holds no ncu rows or no complete forward.
Nothing here needs a GPU: it reads the CSV a GPU machine wrote.
"""
import argparse
import csv
import sys
from collections import OrderedDict

_UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
            "second": 1e9, "s": 1e9}


class InputError(Exception):
    pass


def kernel_base(name):
    """'void (anonymous namespace)::k<1, float>(const float *, int)' -> 'k<1, float>'."""
    n = name.replace("(anonymous namespace)::", "").replace("unnamed>::", "")
    if n.startswith("void "):
        n = n[5:]
    depth = 0
    for i, c in enumerate(n):  # cut at the parameter list: the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return n[:i].strip()
    return n.strip()


def read_launches(path):
    """[(kernel, grid, block, ns)] in launch order."""
    try:
        with open(path, newline="", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        raise InputError(f"{path}: no ncu CSV header (\"ID\",...): was ncu run with --csv?")
    rows = list(csv.reader(lines[start:]))
    hdr = rows[0]
    try:
        ki, vi = hdr.index("Kernel Name"), hdr.index("Metric Value")
    except ValueError:
        raise InputError(f"{path}: the ncu header lacks 'Kernel Name' or 'Metric Value'")
    mi = hdr.index("Metric Name") if "Metric Name" in hdr else None
    ui = hdr.index("Metric Unit") if "Metric Unit" in hdr else None
    gi = hdr.index("Grid Size") if "Grid Size" in hdr else None
    bi = hdr.index("Block Size") if "Block Size" in hdr else None
    out = []
    for r in rows[1:]:
        if len(r) <= vi or not r[0].strip().isdigit():
            continue  # the profiled program's own lines
        if mi is not None and r[mi] != "gpu__time_duration.sum":
            continue
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        scale = _UNIT_NS.get(r[ui].strip(), 1.0) if ui is not None else 1.0
        out.append((kernel_base(r[ki]), r[gi] if gi is not None else "", r[bi] if bi is not None else "", v * scale))
    if not out:
        raise InputError(f"{path}: no gpu__time_duration.sum rows")
    return out


def forwards(launches):
    """The launches cut after each argmax kernel (a forward's greedy read-out)."""
    fw, cur = [], []
    for l in launches:
        cur.append(l)
        if l[0].startswith("argmax_kernel") or l[0].startswith("top_two_kernel"):
            fw.append(cur)
            cur = []
    return fw


def table(forward):
    """OrderedDict kernel -> [calls, ns, shapes] sorted by time, and the forward's total ns."""
    agg = {}
    for k, g, b, ns in forward:
        e = agg.setdefault(k, [0, 0.0, []])
        e[0] += 1
        e[1] += ns
        shape = f"{g}x{b}"
        if shape not in e[2]:
            e[2].append(shape)
    total = sum(e[1] for e in agg.values())
    return OrderedDict(sorted(agg.items(), key=lambda kv: -kv[1][1])), total


def pick(fw, k, path):
    if not fw:
        raise InputError(f"{path}: no complete forward (no argmax launch: was the run greedy?)")
    if k < -len(fw) or k >= len(fw):
        raise InputError(f"{path}: --forward {k} out of range ({len(fw)} complete forwards)")
    return fw[k]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="ncu --csv output (A)")
    ap.add_argument("b", nargs="?", help="a second ncu --csv output to compare (B)")
    ap.add_argument("--forward", type=int, default=-1,
                    help="which complete forward: -1 the last (default), 0 the first (the prefill)")
    ap.add_argument("--top", type=int, default=0, help="print only the N most expensive kernels (0: all)")
    ap.add_argument("--csv", metavar="OUT", help="also write the table as CSV")
    args = ap.parse_args(argv)
    try:
        fa = forwards(read_launches(args.a))
        ta, tot_a = table(pick(fa, args.forward, args.a))
        tb = tot_b = None
        if args.b:
            fb = forwards(read_launches(args.b))
            tb, tot_b = table(pick(fb, args.forward, args.b))
    except InputError as e:
        print(f"ncu_kernel_table: error: {e}", file=sys.stderr)
        return 2
    n_a = sum(e[0] for e in ta.values())
    rows = []
    names = list(ta.keys()) + ([k for k in tb.keys() if k not in ta] if tb else [])
    if args.top > 0:
        names = names[:args.top]
    if tb is None:
        print(f"forward {args.forward} of {len(fa)}: {n_a} kernels, {tot_a / 1e3:.1f} us of kernel time")
        print(f"{'kernel':60s} {'calls':>5s} {'total_us':>9s} {'us_each':>8s} {'share':>6s}  shapes")
        for k in names:
            c, ns, shapes = ta[k]
            print(f"{k[:60]:60s} {c:5d} {ns / 1e3:9.1f} {ns / c / 1e3:8.2f} {100 * ns / tot_a:5.1f}%  "
                  f"{' '.join(shapes[:3])}")
            rows.append({"kernel": k, "calls": c, "total_us": f"{ns / 1e3:.3f}", "us_each": f"{ns / c / 1e3:.3f}",
                         "share": f"{ns / tot_a:.5f}", "shapes": " ".join(shapes)})
    else:
        n_b = sum(e[0] for e in tb.values())
        print(f"forward {args.forward}: A {n_a} kernels {tot_a / 1e3:.1f} us, B {n_b} kernels {tot_b / 1e3:.1f} us, "
              f"B/A {tot_b / tot_a:.3f}")
        print(f"{'kernel':60s} {'calls_a':>7s} {'us_a':>8s} {'calls_b':>7s} {'us_b':>8s} {'b/a':>6s}")
        for k in names:
            ca, na, _ = ta.get(k, (0, 0.0, []))
            cb, nb, _ = tb.get(k, (0, 0.0, []))
            ea = na / ca / 1e3 if ca else float("nan")
            eb = nb / cb / 1e3 if cb else float("nan")
            ratio = f"{eb / ea:6.3f}" if ca and cb else "     -"
            print(f"{k[:60]:60s} {ca:7d} {ea:8.2f} {cb:7d} {eb:8.2f} {ratio}")
            rows.append({"kernel": k, "calls_a": ca, "us_each_a": f"{ea:.3f}", "calls_b": cb, "us_each_b": f"{eb:.3f}",
                         "ratio": ratio.strip()})
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
