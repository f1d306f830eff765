#!/usr/bin/env python3
"""tests/tools/check_greedy_gen.py — end-to-end checks of `ds4-greedy-gen` (the drafter's
training-data generator) on a tiny model.

Asserts:
  * every output row starts with its prompt;
  * rows do not depend on how they are sharded over processes (--first/--count) nor on the
    thread count (the engine is batch and thread invariant);
  * greedy consistency: extending the first L0+8 tokens of an output row reproduces the row
    (prefill of a longer prompt lands on the same greedy path as decoding it);
  * bad input (size not a multiple of the row, token id outside the vocabulary, --first past
    the end, missing file) exits 2 with an error naming the problem.
Usage: check_greedy_gen.py TOOL MODEL WORKDIR
"""
import os
import random
import struct
import subprocess
import sys

tool, model, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
L0, T, N = 12, 40, 5


def write(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack(f"<{len(r)}i", *r))


def read(path, width):
    data = open(path, "rb").read()
    vals = struct.unpack(f"<{len(data) // 4}i", data)
    return [list(vals[i:i + width]) for i in range(0, len(vals), width)]


def run(*args, expect=0, pattern=None):
    p = subprocess.run([tool, "-m", model, "-q", *args], capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"FAIL: {args} exited {p.returncode}, want {expect}\n{p.stderr}")
    if pattern and pattern not in p.stderr:
        sys.exit(f"FAIL: {args}: stderr lacks '{pattern}':\n{p.stderr}")


rng = random.Random(7)
prompts = [[rng.randrange(0, 8000) for _ in range(L0)] for _ in range(N)]
src = os.path.join(work, "prompts.i32")
write(src, prompts)
common = ["--in", src, "--prompt-len", str(L0), "--total-len", str(T)]

full = os.path.join(work, "full.i32")
run(*common, "--out", full, "-t", "1")
rows = read(full, T)
assert len(rows) == N, f"{len(rows)} rows, want {N}"
for p, r in zip(prompts, rows):
    assert r[:L0] == p, "an output row does not start with its prompt"
assert len({tuple(r[L0:]) for r in rows}) > 1, "every prompt gave the same continuation"

shard = os.path.join(work, "shard.i32")
run(*common, "--out", shard, "-t", "2", "--first", "2", "--count", "2")
assert read(shard, T) == rows[2:4], "rows 2..3 differ between a 2-thread shard and the full run"
run(*common, "--out", shard, "-t", "2", "--first", "4")
assert read(shard, T) == rows[4:], "the tail shard differs from the full run"

longer = [r[:L0 + 8] for r in rows]
src2 = os.path.join(work, "longer.i32")
write(src2, longer)
out2 = os.path.join(work, "longer_out.i32")
run("--in", src2, "--prompt-len", str(L0 + 8), "--total-len", str(T), "--out", out2)
assert read(out2, T) == rows, "extending a greedy prefix left the greedy path"

bad = os.path.join(work, "bad.i32")
with open(bad, "wb") as f:
    f.write(b"\0" * (4 * L0 + 4))
run("--in", bad, "--prompt-len", str(L0), "--out", shard, expect=2, pattern="not a multiple")
write(bad, [[0] * (L0 - 1) + [1 << 20]])
run("--in", bad, "--prompt-len", str(L0), "--out", shard, expect=2, pattern="outside the vocabulary")
run(*common, "--out", shard, "--first", str(N + 1), expect=2, pattern="past the")
run("--in", os.path.join(work, "missing.i32"), "--out", shard, expect=2, pattern="cannot read")
run("--in", src, "--prompt-len", "8", "--total-len", "8", "--out", shard, expect=2, pattern="--total-len")
print(f"ok: {N} rows of {T}, shard/thread/prefix invariant, bad input rejected")
