#!/usr/bin/env python3
"""tests/server/test_kv_cache.py — ds4-server --kv-cache-dir end to end, on the bundled tiny model.

A chat request's prompt prefix is saved to disk; after a restart the same request loads it
instead of prefilling (usage cached_tokens, /metrics ds4_kv_disk_hits_total and only the tail in
ds4_prompt_tokens_total) and answers byte-identically. A corrupt file (a flipped byte), a truncated
one and a foreign one (another model id, another --ctx) are ignored with a warning in the log: the
request is prefilled normally and still answers identically. SIGTERM under load exits 0 and leaves
only complete files (size and checksum verified here independently of the server), no temporary.

Usage: test_kv_cache.py --server build/bin/ds4-server --models models
"""
import argparse
import concurrent.futures as cf
import glob
import json
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, NOTHINK, PROMPTS, Server, check  # noqa: E402

SUFFIX = ".ds4state"
HEADER = 48
FNV_OFFSET, FNV_PRIME, MASK = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1
MESSAGES = [{"role": "system", "content": "You are a terse assistant for C programmers."},
            {"role": "user", "content": "What is a struct in C?"}]


def checksum(data):
    """FNV-1a-64 over little-endian 64-bit words (last one zero-padded), seeded with the length."""
    h = ((FNV_OFFSET ^ len(data)) * FNV_PRIME) & MASK
    pad = (-len(data)) % 8
    for (w,) in struct.iter_unpack("<Q", data + b"\0" * pad):
        h = ((h ^ w) * FNV_PRIME) & MASK
    return h


def verify_file(path):
    """Raises unless the file is a complete state file (header sizes + checksum)."""
    data = open(path, "rb").read()
    check(len(data) >= HEADER + 8 and data[:8] == b"DS4STATE", f"{path}: bad magic or too short")
    n_ctx, n_tok, payload = struct.unpack_from("<qqQ", data, 24)
    check(0 < n_tok <= n_ctx, f"{path}: {n_tok} tokens for n_ctx {n_ctx}")
    check(len(data) == HEADER + 4 * n_tok + payload + 8, f"{path}: truncated ({len(data)} bytes)")
    check(struct.unpack_from("<Q", data, len(data) - 8)[0] == checksum(data[:-8]), f"{path}: checksum")
    return n_tok


def state_files(d):
    return sorted(glob.glob(os.path.join(d, "*" + SUFFIX)))


def ask(srv):
    r = srv.openai().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0,
                                             extra_body=NOTHINK)
    return r.choices[0].message.content, r.usage


def wait_metric(srv, name, at_least, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if srv.metrics().get(name, 0) >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached {at_least}")


def log_of(srv):
    srv.log.seek(0)
    return srv.log.read()


class Env:
    def __init__(self, args, d):
        self.args, self.dir = args, d

    def start(self, *extra, ctx="1024"):
        return Server(self.args.server, self.args.models, "--ctx", ctx, "--kv-cache-dir", self.dir, *extra)

    def stop(self, srv):
        rc = srv.stop()
        check(rc == 0, f"server exit code {rc}")
        check(not glob.glob(os.path.join(self.dir, "*.tmp")), "a temporary file was left behind")


def test_restart_resumes_from_disk(env, ref):
    srv = env.start()
    content, usage = ask(srv)
    check(content == ref["content"], "first answer differs from the reference")
    check(usage.prompt_tokens_details.cached_tokens == 0, "nothing was on disk yet")
    wait_metric(srv, "ds4_kv_disk_saves_total", 1)
    env.stop(srv)
    files = state_files(env.dir)
    check(len(files) == 1, f"files after one request: {files}")
    check(verify_file(files[0]) == usage.prompt_tokens - 2, "the saved prefix is not the prompt minus its tail")

    srv = env.start()
    check("1 saved states" in log_of(srv), "the restarted server did not index the file")
    content, usage = ask(srv)
    m = srv.metrics()
    check(content == ref["content"], f"after restart {content!r} != {ref['content']!r}")
    check(usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 2,
          f"restart reused {usage.prompt_tokens_details.cached_tokens} of {usage.prompt_tokens}")
    check(m["ds4_kv_disk_hits_total"] == 1, "disk hit not counted")
    check(m["ds4_prompt_tokens_total"] == 2, f"prefilled {m['ds4_prompt_tokens_total']} tokens, expected the 2-token tail")
    env.stop(srv)


def corrupt_and_ask(env, ref, damage, expect_log, **start):
    """Damages the one state file, restarts: the file is ignored with a warning, the answer is right."""
    files = state_files(env.dir)
    check(len(files) == 1, f"files: {files}")
    data = bytearray(open(files[0], "rb").read())
    open(files[0], "wb").write(damage(data))
    srv = env.start(**start)
    content, usage = ask(srv)
    m = srv.metrics()
    log = log_of(srv)
    check(content == ref["content"], f"answer {content!r} != {ref['content']!r}")
    check(usage.prompt_tokens_details.cached_tokens == 0, "a damaged file was trusted")
    check(m["ds4_kv_disk_rejected_total"] >= 1, "rejection not counted")
    check(m["ds4_kv_disk_hits_total"] == 0, "a damaged file was loaded")
    check("kv cache: ignoring" in log and expect_log in log, f"no warning naming '{expect_log}': {log[-800:]}")
    wait_metric(srv, "ds4_kv_disk_saves_total", 1)  # written again, complete
    env.stop(srv)
    if not start:
        check(verify_file(state_files(env.dir)[0]) > 0, "the rewritten file is not valid")


def flip(offset):
    def f(data):
        data[offset if offset >= 0 else len(data) + offset] ^= 0x20
        return bytes(data)
    return f


def flip_payload_token(data):
    n_tok = struct.unpack_from("<q", data, 32)[0]
    data[HEADER + 4 * n_tok + 8 + 4] ^= 0x01  # the payload starts with i64 n, then the ids
    return bytes(data)


def stream_socket(srv, prompt, max_tokens):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "reasoning_effort": "none"}).encode()
    sock = socket.create_connection((srv.host, srv.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


def read_until_token(sock):
    """Reads a chat stream until its second SSE event: the first is the role chunk, sent before
    the prompt is prefilled; the second carries the first generated token, so the prompt's
    prefix has been handed to the disk cache by then."""
    got = b""
    sock.settimeout(15)
    while got.count(b"data:") < 2:
        chunk = sock.recv(4096)
        check(chunk, f"stream closed before the first token: {got[:300]!r}")
        got += chunk


def test_corrupt_files_are_ignored(env, ref):
    corrupt_and_ask(env, ref, lambda d: bytes(d[:len(d) * 2 // 3]), "truncated")
    corrupt_and_ask(env, ref, flip(-4000), "checksum")                 # inside the payload
    corrupt_and_ask(env, ref, flip_payload_token, "checksum")          # the payload's copy of a token id
    corrupt_and_ask(env, ref, flip(17), "another model")               # the model identity
    # A valid file of another context size: ignored by a --ctx 2048 server, kept on disk.
    before = state_files(env.dir)
    srv = env.start(ctx="2048")
    content, usage = ask(srv)
    check("written for context 1024" in log_of(srv), "no warning about the context size")
    check(usage.prompt_tokens_details.cached_tokens == 0, "a foreign-context file was loaded")
    env.stop(srv)
    check(all(f in state_files(env.dir) for f in before), "a foreign file was deleted")


def test_sigterm_under_load_leaves_complete_files(env, ref):
    shutil.rmtree(env.dir)
    srv = env.start("--shutdown-timeout", "0.5")
    socks = []
    for p in PROMPTS:
        socks.append(stream_socket(srv, p, 400))
    for s in socks:
        read_until_token(s)  # every prompt prefilled (its prefix queued for the disk, or skipped)
    # A slow disk (or a loaded CI machine) can leave the writer its queue bound behind: those
    # saves are skipped and counted, never waited for. Every queued one must reach the disk.
    skipped = int(srv.metrics().get("ds4_kv_disk_skipped_total", -1))
    check(0 <= skipped < len(PROMPTS), f"ds4_kv_disk_skipped_total {skipped}")
    srv.proc.send_signal(signal.SIGTERM)
    for s in socks:
        s.settimeout(15)
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    rc = srv.proc.wait(timeout=30)
    check(rc == 0, f"exit code {rc} after SIGTERM")
    files = state_files(env.dir)
    check(len(files) == len(PROMPTS) - skipped,
          f"{len(files)} files for {len(PROMPTS)} prompts, {skipped} saves skipped")
    for f in files:
        verify_file(f)
    check(not glob.glob(os.path.join(env.dir, "*.tmp")), "a temporary file was left behind")
    print(f"    {len(files)} complete state files after SIGTERM ({skipped} saves skipped)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--models", required=True)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="ds4_kv_cache_")
    env = Env(args, os.path.join(root, "kv"))
    failures = 0
    try:
        ref_srv = Server(args.server, args.models, "--ctx", "1024", "--kv-memory", "0")
        content, _ = ask(ref_srv)
        ref_srv.stop()
        ref = {"content": content}
        for t in (test_restart_resumes_from_disk, test_corrupt_files_are_ignored,
                  test_sigterm_under_load_leaves_complete_files):
            t0 = time.time()
            try:
                t(env, ref)
                print(f"ok   {t.__name__} ({time.time() - t0:.1f} s)")
            except Exception:  # noqa: BLE001 — report every failure, keep going
                failures += 1
                print(f"FAIL {t.__name__} ({time.time() - t0:.1f} s)")
                traceback.print_exc()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("PASS" if failures == 0 else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
