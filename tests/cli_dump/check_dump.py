#!/usr/bin/env python3
"""check_dump.py — end-to-end checks of `ds4 --dump-tokens` and `ds4 --dump-logprobs`.

On the committed tiny model (models/ds4-tiny.gguf):
  1. --dump-tokens --raw: ids == BOS + `ds4-tok-pieces encode` of the prompt (the tokenizer
     path of the tools), pieces == the token bytes (escaped), nothing generated;
  2. --dump-tokens with the template: BOS first, <｜User｜> before the prompt, <｜Assistant｜>
     then </think> (--nothink) or <think> (default) last;
  3. --dump-logprobs: valid JSON; prompt_tokens == the --dump-tokens ids; per step top is sorted
     by logprob, top[0] is the chosen token, logprobs <= 0 with sum(exp) <= 1, K entries;
     the chosen tokens' bytes == the text that plain greedy decoding (--temp 0) prints;
  4. bad input: --logprobs-top-k 0, an unwritable FILE, no prompt (-i) -> non-zero exit, message.

usage: check_dump.py SOURCE_DIR PATH/TO/ds4 PATH/TO/ds4-tok-pieces WORK_DIR
"""
import json
import math
import os
import subprocess
import sys

src, ds4, pieces_tool, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
model = os.path.join(src, "models", "ds4-tiny.gguf")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(*args, check=True):
    r = subprocess.run([ds4, "-m", model, "-t", "1", *args], capture_output=True, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        fail(f"ds4 {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


def dump_lines(out):
    rows = []
    for line in out.decode("utf-8").splitlines():
        i, tid, piece = line.split("\t", 2)
        rows.append((int(i), int(tid), piece))
    return rows


prompt = "Ciao, mondo! 12345 \u4e2d\u6587 \U0001F600\n\ttab"
# 1. raw
r = run("--dump-tokens", "--raw", "-p", prompt)
rows = dump_lines(r.stdout)
p = os.path.join(work, "prompt.txt")
with open(p, "wb") as f:
    f.write(prompt.encode())
enc = subprocess.run([pieces_tool, "encode", model, p], capture_output=True, check=True).stdout.split()
want = [0] + [int(x) for x in enc]
if [t for _, t, _ in rows] != want:
    fail(f"--dump-tokens --raw ids {[t for _, t, _ in rows]} != BOS + encode {want}")
if [i for i, _, _ in rows] != list(range(len(rows))):
    fail("--dump-tokens indices are not 0..n-1")
if "\\n" not in "".join(pc for _, _, pc in rows) or "\\t" not in "".join(pc for _, _, pc in rows):
    fail("--dump-tokens does not escape newline/tab in pieces")

# 2. template
USER, ASSISTANT, THINK, UNTHINK = 2, 3, 4, 5  # the tiny model's synthetic special ids
for flag, last in (("--nothink", UNTHINK), (None, THINK)):
    args = ["--dump-tokens", "-p", "hello"] + ([flag] if flag else [])
    ids = [t for _, t, _ in dump_lines(run(*args).stdout)]
    if ids[0] != 0 or USER not in ids or ids[-2:] != [ASSISTANT, last]:
        fail(f"--dump-tokens {flag}: unexpected template ids {ids}")
template_ids = [t for _, t, _ in dump_lines(run("--dump-tokens", "--nothink", "-p", "hello").stdout)]

# 3. logprobs
out = os.path.join(work, "lp.json")
K, N = 4, 12
run("--dump-logprobs", out, "--logprobs-top-k", str(K), "-n", str(N), "--nothink", "-p", "hello")
with open(out, encoding="utf-8") as f:
    d = json.load(f)
if d["prompt_tokens"] != template_ids:
    fail("prompt_tokens differ from --dump-tokens")
steps = d["steps"]
if not 1 <= len(steps) <= N:
    fail(f"{len(steps)} steps for -n {N}")
chosen = b""
for k, s in enumerate(steps):
    top = s["top"]
    lps = [t["logprob"] for t in top]
    if len(top) != K or top[0]["token"] != s["token"] or lps != sorted(lps, reverse=True):
        fail(f"step {k}: top list malformed {top}")
    if max(lps) > 1e-9 or sum(math.exp(x) for x in lps) > 1 + 1e-6 or abs(s["logprob"] - lps[0]) > 1e-12:
        fail(f"step {k}: bad logprobs {lps}")
    chosen += bytes.fromhex(s["bytes"])
g = run("--temp", "0", "-n", str(N), "--nothink", "-p", "hello")
printed = g.stdout[:-1] if g.stdout.endswith(b"\n") else g.stdout  # one-shot adds a newline
eos_text = "<\uff5cend\u2581of\u2581sentence\uff5c>".encode()
if chosen.endswith(eos_text) and not printed.endswith(eos_text):
    chosen = chosen[: -len(eos_text)]
if chosen != printed:
    fail(f"greedy steps {chosen!r} != ds4 --temp 0 output {printed!r}")

# 4. bad input
for args, what in ((["--dump-logprobs", out, "--logprobs-top-k", "0", "-p", "x"], "top-k 0"),
                   (["--dump-logprobs", "/nonexistent-dir/x.json", "-p", "x"], "unwritable file"),
                   (["--dump-tokens", "-i"], "no prompt (interactive)")):
    r = run(*args, check=False)
    if r.returncode == 0 or b"error" not in r.stderr:
        fail(f"{what}: exit {r.returncode}, stderr {r.stderr!r}")

print(f"check_dump: {len(steps)} logprob steps, {len(rows)} raw tokens; "
      + ("all checks passed" if not failures else f"{len(failures)} failures"))
sys.exit(1 if failures else 0)
