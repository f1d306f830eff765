#!/usr/bin/env python3
"""tests/server/bench_load.py — ds4-server load figures (a benchmark, not a test: no assertions
on timings).

Starts ds4-server on a free port, then serves the same REQUESTS streaming greedy chat requests
twice: one at a time, and from CLIENTS concurrent clients. Reports per mode: errors, incomplete
streams, time to first token p50/p99, aggregate generated tokens/s, and the server's RSS before
and after.

Usage: bench_load.py --server build/bin/ds4-server --model models/ds4-tiny.gguf
                     [--clients 16] [--requests 32] [--max-tokens 128] [--threads 2] [--dspark]
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import re
import signal
import subprocess
import sys
import time

PROMPTS = ["Write a python function that adds two numbers.", "Describe the printf function.",
           "What is a struct in C?", "Tell me about Milan.", "List three colors.",
           "How do I open a file?", "Explain recursion briefly.", "What does malloc return?"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one(host, port, i, max_tokens):
    body = json.dumps({"model": "ds4-tiny", "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True, "reasoning_effort": "none",
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=300)
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        return {"error": r.status}
    ttft, tokens, done = None, 0, False
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            break
        ev = json.loads(data)
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
        for c in ev.get("choices", []):
            d = c.get("delta", {})
            if ttft is None and (d.get("content") or d.get("reasoning_content")):
                ttft = time.perf_counter() - t0
    conn.close()
    return {"ttft": ttft, "tokens": tokens, "done": done, "total": time.perf_counter() - t0}


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else float("nan")


def run(host, port, pid, clients, requests, max_tokens):
    rss0 = rss_kib(pid)
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda i: one(host, port, i, max_tokens), range(requests)))
    wall = time.perf_counter() - t0
    rss1 = rss_kib(pid)
    errors = sum(1 for r in res if "error" in r)
    incomplete = sum(1 for r in res if "error" not in r and not r["done"])
    ttft = [r["ttft"] for r in res if r.get("ttft") is not None]
    tokens = sum(r.get("tokens", 0) for r in res)
    return {"clients": clients, "requests": requests, "errors": errors, "incomplete": incomplete,
            "ttft_p50_ms": 1e3 * pct(ttft, 50), "ttft_p99_ms": 1e3 * pct(ttft, 99),
            "tokens": tokens, "wall_s": wall, "tok_per_s": tokens / wall, "rss_before_mib": rss0 / 1024,
            "rss_after_mib": rss1 / 1024}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dspark", action="store_true")
    a = ap.parse_args()
    args = [a.server, "-m", a.model, "--port", "0", "-t", str(a.threads), "--ctx", "2048"] + (["--dspark"] if a.dspark else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.match(r"listening on (\S+):(\d+)", proc.stdout.readline())
    if not m:
        print("server did not start", file=sys.stderr)
        return 1
    host, port = m.group(1), int(m.group(2))
    try:
        one(host, port, 0, 8)  # warm-up
        for clients in (1, a.clients):
            r = run(host, port, proc.pid, clients, a.requests, a.max_tokens)
            print(json.dumps(r))
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        print(f"server exit code after SIGTERM: {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
