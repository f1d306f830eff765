#!/usr/bin/env python3
"""tests/tools/check_ncu_kernel_table.py SCRIPT WORKDIR — tools/ncu_kernel_table.py on synthetic
ncu output.

Writes two files shaped like `ncu --metrics gpu__time_duration.sum --csv ds4-bench ...` (ncu's
==PROF== lines and ds4-bench's CSV first, thousands separators, ns and us units, template
kernel names with parameter lists) holding a prefill forward and two decode forwards, each
closed by an argmax launch; runs the script and checks the per-kernel table of the last forward
and of the first (calls, µs per call, share), the A/B table (the ratio per kernel, a kernel only
in B), the --csv file, and exit 2 with a message for a file with no ncu rows and for a
--forward out of range.
"""
import csv
import os
import shutil
import subprocess
import sys

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def ncu_file(path, forwards):
    """forwards: [[(kernel_name, ns_or_(value, unit))]]"""
    with open(path, "w") as f:
        f.write("==PROF== Connected to process 1 (ds4-bench)\n")
        f.write("ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps\n64,64,1.0,2,0.1\n")
        f.write("==PROF== Disconnected from process 1\n")
        f.write(HEADER + "\n")
        i = 0
        for fw in forwards:
            for name, t in fw + [("argmax_kernel(const float *, long, long, long, int *)", 3000)]:
                value, unit = (t, "ns") if not isinstance(t, tuple) else t
                f.write(f'"{i}","1","ds4-bench","h","{name}","1","13","(256, 1, 1)","(1, 24, 1)","0","9.0",'
                        f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value:,}"\n')
                i += 1


def run(script, *args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    script, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hc = "void (anonymous namespace)::hc_staged_kernel<(HcKind)0>(FusedArgs, int)"
    mv = "void (anonymous namespace)::q8_0_wide_kernel<1, float>(const unsigned char *, unsigned long, float *, bool)"
    rn = "(anonymous namespace)::rms_norm_staged_kernel(const float *, float *, int)"
    prefill = [(hc, 50000), (mv, 120000)]
    decode1 = [(hc, 24000), (mv, 9000), (hc, 26000), (rn, (4.5, "us"))]
    decode2 = [(hc, 25000), (mv, 10000), (hc, 25000), (rn, 4000), (mv, 11000)]
    a = os.path.join(work, "a.csv")
    ncu_file(a, [prefill, decode1, decode2])
    rc, out, err = run(script, a, "--csv", os.path.join(work, "t.csv"))
    assert rc == 0, err
    # The last forward: 6 launches (argmax included), 25+10+25+4+11+3 = 78 us.
    assert "forward -1 of 3: 6 kernels, 78.0 us of kernel time" in out, out
    lines = {l.split()[0]: l.split() for l in out.splitlines()[2:]}
    hc_row = lines["hc_staged_kernel<(HcKind)0>"]
    assert hc_row[1:5] == ["2", "50.0", "25.00", "64.1%"], hc_row
    mv_row = lines["q8_0_wide_kernel<1,"]
    assert mv_row[2:6] == ["2", "21.0", "10.50", "26.9%"], mv_row
    assert lines["rms_norm_staged_kernel"][1:4] == ["1", "4.0", "4.00"], lines["rms_norm_staged_kernel"]
    # The table's order is by time: hc first.
    assert out.splitlines()[2].startswith("hc_staged_kernel"), out
    with open(os.path.join(work, "t.csv")) as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["kernel"] == "hc_staged_kernel<(HcKind)0>" and rows[0]["calls"] == "2", rows[0]
    assert abs(sum(float(r["share"]) for r in rows) - 1.0) < 1e-4, rows
    # The first forward (the prefill) and the microsecond unit of decode 1.
    rc, out, err = run(script, a, "--forward", "1")
    assert rc == 0, err
    assert "forward 1 of 3: 5 kernels, 66.5 us of kernel time" in out, out
    # A/B: B's hc kernel 20% faster, a kernel only B has.
    b = os.path.join(work, "b.csv")
    fused = "void (anonymous namespace)::hc_fused_kernel<(HcKind)0>(FusedArgs)"
    ncu_file(b, [prefill, [(hc, 20000), (mv, 10000), (hc, 20000), (fused, 2000), (mv, 11000)]])
    rc, out, err = run(script, a, b)
    assert rc == 0, err
    assert "B/A 0.846" in out, out  # (20+10+20+2+11+3) / 78
    ab = {l.split()[0]: l.split() for l in out.splitlines()[2:]}
    assert ab["hc_staged_kernel<(HcKind)0>"][-1] == "0.800", ab["hc_staged_kernel<(HcKind)0>"]
    assert ab["hc_fused_kernel<(HcKind)0>"][-1] == "-", ab["hc_fused_kernel<(HcKind)0>"]
    # Errors: no ncu rows; a forward that does not exist.
    bad = os.path.join(work, "bad.csv")
    with open(bad, "w") as f:
        f.write("ctx_tokens,gen_tps\n64,1.0\n")
    rc, out, err = run(script, bad)
    assert rc == 2 and "no ncu CSV header" in err, (rc, err)
    rc, out, err = run(script, a, "--forward", "7")
    assert rc == 2 and "out of range (3 complete forwards)" in err, (rc, err)
    print("ncu_kernel_table: tables, A/B and errors as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
