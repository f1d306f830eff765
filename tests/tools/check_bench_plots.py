#!/usr/bin/env python3
"""tests/tools/check_bench_plots.py SCRIPT WORKDIR — tools/bench_plots.py on a synthetic sweep.

Writes the CSVs scripts/bench_cuda_sweep.sh produces (made-up figures of the right shape) into
WORKDIR, runs the plot script, and checks the three PNGs (PNG signature, non-trivial size) and
the summary's derived figures: the bytes roofline per call (bytes / read GB/s), the KV bytes per
token (slope of kvcache_bytes), the long-context lines (state bytes / context, a skipped
context with its reason) and the memory lines. Then a folder with longctx.csv alone still gives
its plot. Exit 77 (ctest: skipped) without matplotlib.
"""
import os
import shutil
import subprocess
import sys


def main():
    script, work = sys.argv[1], sys.argv[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed: skipped")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "decode.csv"), "w") as f:
        f.write("ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend\n")
        for i, ctx in enumerate([128, 256, 512, 1024]):
            f.write('%d,%d,%.2f,32,%.2f,%d,abc,"cuda: device 0, Fake GPU"\n'
                    % (ctx, ctx // 2, 200.0 - i, 25.0 - i, 1000000 + 3000 * ctx))
    with open(os.path.join(work, "verify.csv"), "w") as f:
        f.write("r,call,best_ms,median_ms,bytes\n")
        f.write("0,decode,40.0,41.0,10000000000\n")
        for r in range(1, 9):
            f.write("%d,verify,%.1f,%.1f,%d\n" % (r, 40.0 + 5 * r, 41.0 + 5 * r, 10000000000 + 2000000000 * r))
    longctx = ("ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend\n"
               '1024,0,0.00,16,80.00,20000000,synthetic,"cuda: device 0, Fake GPU"\n'
               '16384,0,0.00,16,70.50,100000000,synthetic,"cuda: device 0, Fake GPU"\n'
               '131072,0,0.00,16,40.25,786432000,synthetic,"cuda: device 0, Fake GPU"\n'
               '1048576,0,0.00,0,0.00,0,"skipped: a session of 1048593 tokens needs 20.00 GiB of device memory, '
               'but cuda:0 (Fake GPU) has 15.00 GiB free of 79.00 GiB","cuda: device 0, Fake GPU"\n')
    with open(os.path.join(work, "longctx.csv"), "w") as f:
        f.write(longctx)
    with open(os.path.join(work, "roofline.csv"), "w") as f:
        f.write('device,read_gbps,copy_gbps,buffer_bytes,l2_bytes\n"Fake GPU",2500.0,3000.0,1073741824,52428800\n')
    with open(os.path.join(work, "memory.csv"), "w") as f:
        f.write("step,context_tokens,peak_used_mib,idle_used_mib,seconds,exit\n")
        f.write("decode_sweep,1024,70000,500,60.0,0\nprofile_decode,1024,65000,500,40.0,0\n")
        f.write("longctx,1048576,75000,500,90.0,0\n")
    with open(os.path.join(work, "sweep.log"), "w") as f:
        f.write("weights: ds4: weights on cuda:0: 61.02 GB in 23.7 s (2.57 GB/s)\n")
        f.write("memory: ctx=1024 state_bytes=2097152 state_bytes_per_token=2048 scratch_bytes=1048576 "
                "session_bytes=4194304\n")
    p = subprocess.run([sys.executable, script, work], capture_output=True, text=True)
    print(p.stdout, p.stderr)
    if p.returncode != 0:
        print("bench_plots.py failed")
        return 1
    for name in ("decode_tps_vs_context.png", "verify_time_vs_r.png", "longctx_decode_tps.png"):
        path = os.path.join(work, name)
        with open(path, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(path) < 5000:
            print("%s: not a plot" % name)
            return 1
    # verify(1): 12 GB at 2500 GB/s = 4.8 ms, 45 ms best -> 10.7%.
    expect = ["verify(1)      45.000     46.000      12000.0        4.800      10.7%",
              "KV per token: 3000 bytes",
              "weights: 61.02 GB on the device",
              "session at     1024 tokens: state       2.0 MiB (2048 bytes/token), scratch + frontier copies "
              "     1.0 MiB, "
              "session       4.0 MiB",
              "peak device memory, decode_sweep    (context   1024 tokens): 70000 MiB (idle 500 MiB)",
              "roofline: Fake GPU: read 2500 GB/s",
              # 786432000 bytes / 131072 tokens = 6000 bytes/token.
              "long context  128K (  131072 tokens): decode    40.25 tokens/s, state     750.0 MiB,   6000 bytes/token",
              "long context    1M ( 1048576 tokens): skipped: a session of 1048593 tokens needs 20.00 GiB",
              "peak device memory, longctx         (context 1048576 tokens): 75000 MiB (idle 500 MiB)"]
    for e in expect:
        if e not in p.stdout:
            print("missing from the summary: %r" % e)
            return 1
    # longctx.csv alone (a sweep cut short, or ds4-bench --fill-ctx on its own).
    alone = os.path.join(work, "alone")
    os.makedirs(alone)
    with open(os.path.join(alone, "longctx.csv"), "w") as f:
        f.write(longctx)
    p = subprocess.run([sys.executable, script, alone], capture_output=True, text=True)
    print(p.stdout, p.stderr)
    if p.returncode != 0 or not os.path.exists(os.path.join(alone, "longctx_decode_tps.png")):
        print("bench_plots.py on longctx.csv alone failed")
        return 1
    if os.path.exists(os.path.join(alone, "decode_tps_vs_context.png")):
        print("a decode plot without decode.csv")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
