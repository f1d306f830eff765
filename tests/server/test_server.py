#!/usr/bin/env python3
"""tests/server/test_server.py — ds4-server end to end over loopback, on the bundled tiny model.

Starts three servers on free ports (plain; DSpark with the bundled drafter; one slot + one
queue place + an API key) and checks, with the official `openai` and `anthropic` clients and
raw sockets: streaming and whole responses agree, usage counts, stop sequences, logprobs,
thinking split, tool-call request shapes, errors as the clients' own exception types,
determinism (a greedy request alone == the same request among 7 concurrent others; DSpark on ==
off), bad input (crafted cases + 10,000 generated malformed requests, each a 4xx with an error
body, the server still serving afterwards), a client disconnect freeing its slot, a full queue
(429 + Retry-After, then recovery) and SIGTERM under load (exit 0).

Usage: test_server.py --server build/bin/ds4-server --models models
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import anthropic
import openai

MODEL = "ds4-tiny"
NOTHINK = {"reasoning_effort": "none"}


class Server:
    def __init__(self, binary, models, *extra):
        args = [binary, "-m", os.path.join(models, "ds4-tiny.gguf"), "--port", "0", "-t", "2", *extra]
        # stderr goes to a file: a pipe nobody drains would block a chatty server.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on (\S+):(\d+)", line)
        if not m:
            self.proc.wait(timeout=10)
            self.log.seek(0)
            raise RuntimeError(f"server did not start: {line!r} {self.log.read()[-2000:]}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.base = f"http://{self.host}:{self.port}"

    def openai(self, key="x"):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=0, timeout=60)

    def anthropic(self, key="x"):
        return anthropic.Anthropic(base_url=self.base, api_key=key, max_retries=0, timeout=60)

    def request(self, method, path, body=None, headers=None, conn=None):
        """Raw HTTP: (status, headers, body bytes)."""
        own = conn is None
        conn = conn or http.client.HTTPConnection(self.host, self.port, timeout=30)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        if own:
            conn.close()
        return r.status, dict(r.getheaders()), data

    def metrics(self, key=None):
        _, _, data = self.request("GET", "/metrics", headers={"Authorization": f"Bearer {key}"} if key else None)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def chat(client, prompt, max_tokens=32, temperature=0, extra=None, **kw):
    """One chat request; no thinking unless `extra` says otherwise (the server defaults to think)."""
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                          max_tokens=max_tokens, temperature=temperature,
                                          extra_body=dict(NOTHINK) if extra is None else extra, **kw)


def stream_text(client, prompt, max_tokens=32, **kw):
    s = chat(client, prompt, max_tokens, stream=True, stream_options={"include_usage": True}, **kw)
    content, reasoning, usage, finish = "", "", None, None
    for chunk in s:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                content += c.delta.content
            r = (c.delta.model_extra or {}).get("reasoning_content")
            if r:
                reasoning += r
            if c.finish_reason:
                finish = c.finish_reason
    return content, reasoning, usage, finish


PROMPTS = ["Write a python function that adds two numbers.", "Describe the printf function.",
           "What is a struct in C?", "Tell me about Milan.", "List three colors.",
           "How do I open a file?", "Explain recursion briefly.", "What does malloc return?"]


# ------------------------------------------------------------------------------- tests


def test_models_and_health(s, **_):
    ids = [m.id for m in s.openai().models.list().data]
    check(ids == [MODEL], f"models: {ids}")
    st, _, body = s.request("GET", "/health")
    check(st == 200 and json.loads(body)["status"] == "ok", f"health {st} {body}")
    st, h, page = s.request("GET", "/")
    check(st == 200 and h.get("Content-Type", "").startswith("text/html"), f"chat page {st} {h}")
    check(b"/v1/chat/completions" in page and not re.search(rb"(src|href)=\"?https?:|https?://", page),
          "chat page must stream from this server and fetch nothing external")


def test_openai_chat_stream_and_usage(s, **_):
    c = s.openai()
    r = chat(c, PROMPTS[0], 24)
    text = r.choices[0].message.content
    check(isinstance(text, str) and text, "empty content")
    u = r.usage
    check(u.prompt_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u}")
    check(r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
    if r.choices[0].finish_reason == "length":
        check(u.completion_tokens == 24, f"length finish with {u.completion_tokens} tokens")
    content, reasoning, usage, finish = stream_text(c, PROMPTS[0], 24)
    check(content == text, f"stream {content!r} != whole {text!r}")
    check(reasoning == "", "reasoning in no-think mode")
    check(usage is not None and usage.completion_tokens == u.completion_tokens, f"stream usage {usage}")
    check(finish == r.choices[0].finish_reason, f"finish {finish}")


def test_thinking_split(s, **_):
    c = s.openai()
    r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPTS[1]}],
                                  max_tokens=40, temperature=0, reasoning_effort="high")
    extra = r.choices[0].message.model_extra or {}
    check("reasoning_content" in extra, "no reasoning_content in thinking mode")
    content, reasoning, _, _ = stream_text(c, PROMPTS[1], 40, extra={"reasoning_effort": "high"})
    check(reasoning == extra["reasoning_content"], "streamed reasoning differs")
    check(content == (r.choices[0].message.content or ""), "streamed content differs")
    check(reasoning != "" or content != "", "nothing generated")


def test_stop_sequences(s, **_):
    c = s.openai()
    full = chat(c, PROMPTS[2], 40).choices[0].message.content
    check(len(full) > 12, f"too short: {full!r}")
    stop = full[8:12]
    expect = full[:full.find(stop)]
    r = chat(c, PROMPTS[2], 40, stop=[stop])
    check(r.choices[0].message.content == expect, f"stop: {r.choices[0].message.content!r} != {expect!r}")
    check(r.choices[0].finish_reason == "stop", r.choices[0].finish_reason)
    content, _, _, finish = stream_text(c, PROMPTS[2], 40, stop=[stop])
    check(content == expect and finish == "stop", f"stream stop {content!r} {finish}")
    # Anthropic renders the same prompt (no thinking by default): same greedy text.
    a = s.anthropic()
    m = a.messages.create(model=MODEL, max_tokens=40, extra_body={"temperature": 0},
                          messages=[{"role": "user", "content": PROMPTS[2]}])
    check(m.content[0].text == full, f"anthropic {m.content[0].text!r} != openai {full!r}")
    m = a.messages.create(model=MODEL, max_tokens=40, extra_body={"temperature": 0}, stop_sequences=[stop],
                          messages=[{"role": "user", "content": PROMPTS[2]}])
    check(m.stop_reason == "stop_sequence" and m.stop_sequence == stop, f"{m.stop_reason} {m.stop_sequence}")
    check(m.content[0].text == expect, f"anthropic stop text {m.content[0].text!r}")


def test_completions_and_logprobs(s, **_):
    c = s.openai()
    r = c.completions.create(model=MODEL, prompt="def main():", max_tokens=16, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    check(len(lp.tokens) == r.usage.completion_tokens, "completion logprobs count")
    check("".join(lp.tokens).encode("utf-8", "replace") and r.choices[0].text, "empty completion")
    st = c.completions.create(model=MODEL, prompt="def main():", max_tokens=16, temperature=0, stream=True)
    check("".join(ch.choices[0].text for ch in st if ch.choices) == r.choices[0].text, "completion stream differs")
    r = chat(c, PROMPTS[3], 12, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    check(len(content) == r.usage.completion_tokens, f"{len(content)} logprobs for {r.usage.completion_tokens} tokens")
    for t in content:
        check(len(t.top_logprobs) == 3, "top_logprobs size")
        lps = [a.logprob for a in t.top_logprobs]
        check(lps == sorted(lps, reverse=True) and lps[0] <= 0.0, f"top order {lps}")
        check(t.token == t.top_logprobs[0].token and abs(t.logprob - lps[0]) < 1e-6, "greedy token is not the top one")


def test_openai_errors(s, **_):
    c = s.openai()
    cases = [(openai.BadRequestError, dict(n=2)), (openai.BadRequestError, dict(temperature=5)),
             (openai.NotFoundError, dict(model="gpt-nonexistent")),
             (openai.BadRequestError, dict(response_format={"type": "json_object"}))]
    for exc, kw in cases:
        args = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        args.update(kw)
        try:
            c.chat.completions.create(**args)
            raise AssertionError(f"no error for {kw}")
        except exc as e:
            check(e.body and "message" in (e.body if isinstance(e.body, dict) else {}), f"body {e.body}")
    try:
        chat(c, "word " * 3000, 4)
        raise AssertionError("no context error")
    except openai.BadRequestError as e:
        check("1024" in str(e), f"context limit not named: {e}")


def test_anthropic(s, **_):
    a = s.anthropic()
    m = a.messages.create(model=MODEL, max_tokens=20, extra_body={"temperature": 0}, system="Be brief.",
                          messages=[{"role": "user", "content": PROMPTS[4]}])
    check(m.usage.output_tokens <= 20 and m.usage.input_tokens > 0, f"usage {m.usage}")
    with a.messages.stream(model=MODEL, max_tokens=20, extra_body={"temperature": 0}, system="Be brief.",
                           messages=[{"role": "user", "content": PROMPTS[4]}]) as st:
        final = st.get_final_message()
    check(final.content[0].text == m.content[0].text, "anthropic stream differs")
    check(final.usage.output_tokens == m.usage.output_tokens, "anthropic stream usage differs")
    t = a.messages.create(model=MODEL, max_tokens=30, extra_body={"temperature": 0}, thinking={"type": "enabled", "budget_tokens": 1024},
                          messages=[{"role": "user", "content": PROMPTS[4]}])
    check(t.content[0].type == "thinking", f"blocks {[b.type for b in t.content]}")
    for exc, kw in [(anthropic.BadRequestError, dict(extra_body={"temperature": 1.5})),
                    (anthropic.NotFoundError, dict(model="claude-x"))]:
        args = dict(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        args.update(kw)
        try:
            a.messages.create(**args)
            raise AssertionError(f"no error for {kw}")
        except exc:
            pass


def test_tool_round_trip_shapes(s, **_):
    c = s.openai()
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"}]
    r = c.chat.completions.create(model=MODEL, messages=msgs, tools=tools, tool_choice="auto", max_tokens=16,
                                  temperature=0, reasoning_effort="none")
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r.choices[0].finish_reason)
    check(r.usage.prompt_tokens > 60, f"tool schema not rendered? {r.usage.prompt_tokens} prompt tokens")
    a = s.anthropic()
    m = a.messages.create(model=MODEL, max_tokens=16, extra_body={"temperature": 0},
                          tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
                          messages=[{"role": "user", "content": "Weather in Rome?"},
                                    {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1",
                                                                       "name": "get_weather", "input": {"city": "Rome"}}]},
                                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                                                  "content": "sunny"}]}])
    check(m.stop_reason in ("end_turn", "max_tokens", "tool_use"), m.stop_reason)


def greedy_texts(server, prompts, concurrent, max_tokens=48):
    c = server.openai()

    def one(p):
        r = chat(c, p, max_tokens)
        return r.choices[0].message.content, (r.usage.model_extra or {}).get("dspark", {})

    if not concurrent:
        return [one(p) for p in prompts]
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(one, prompts))


def test_determinism(s, refs, **_):
    alone = [t for t, _ in greedy_texts(s, PROMPTS, False)]
    refs["plain"] = alone
    together = [t for t, _ in greedy_texts(s, PROMPTS, True)]
    for i, (x, y) in enumerate(zip(alone, together)):
        check(x == y, f"prompt {i}: alone {x!r} != among 8 {y!r}")
    # The 8 concurrent requests decoded in shared forwards (Engine::decode_batch).
    m = s.metrics()
    check(m["ds4_batched_decode_steps_total"] > 0 and
          m["ds4_batched_decode_rows_total"] >= 2 * m["ds4_batched_decode_steps_total"], "batched decoding metrics")
    # Sampled with a seed: also a pure function of the request.
    c = s.openai()
    a = chat(c, PROMPTS[5], 24, temperature=0.9, seed=1234).choices[0].message.content
    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(chat, c, PROMPTS[5], 24, temperature=0.9, seed=1234)] + \
               [ex.submit(chat, c, p, 24, temperature=0.9, seed=7) for p in PROMPTS[:7]]
        b = futs[0].result().choices[0].message.content
        [f.result() for f in futs]
    check(a == b, f"seeded sample alone {a!r} != concurrent {b!r}")


def test_dspark_identity(s, refs, dspark=None, **_):
    alone = greedy_texts(dspark, PROMPTS, False)
    check(any(d.get("used") for _, d in alone), "DSpark never used")
    for i, (t, _) in enumerate(alone):
        check(t == refs["plain"][i], f"prompt {i}: DSpark {t!r} != plain {refs['plain'][i]!r}")
    together = greedy_texts(dspark, PROMPTS, True)
    for i, (t, _) in enumerate(together):
        check(t == refs["plain"][i], f"prompt {i}: DSpark among 8 differs")
    # Drafter state is per session: every concurrent greedy request got a DSpark decoder (it
    # speculates while it is the only request decoding, and joins the batched forward otherwise).
    check(all(d.get("used") for _, d in together), "a concurrent greedy request had no DSpark decoder")
    m = dspark.metrics()
    check(m["ds4_dspark_requests_total"] >= 8 and m["ds4_dspark_draft_tokens_total"] > 0, "DSpark metrics")


def malformed_requests(rng, n):
    """n request (path, body bytes) pairs that must each be rejected with a 4xx."""
    base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    bad_fields = {
        "messages": [5, "x", {}, [], [5], [{"role": 5}], [{"role": "user", "content": 5}], [{"content": "x"}],
                     [{"role": "robot", "content": "x"}], [{"role": "user", "content": [{"type": "image_url"}]}]],
        "temperature": ["x", [], {}, True, -1, 2.5, 1e300],
        "top_p": ["x", -0.1, 1.5, True],
        "top_k": ["x", 1.5, -5],
        "min_p": [-1, 2, "x"],
        "max_tokens": [0, -1, "x", 1.5, True, [], -(2 ** 63)],
        "max_completion_tokens": [0, "y"],
        "n": [0, 2, 10, "x", 1.5],
        "stream": ["x", 1, []],
        "stop": [5, {}, [1], [""], ["a"] * 17, ["x" * 300]],
        "seed": ["x", 1.5, []],
        "logprobs": ["x", 1],
        "top_logprobs": [-1, 21, "x"],
        "model": [5, "unknown-model", [], {}],
        "tools": [5, "x", [5], [{"type": "function"}], [{"type": "function", "function": {"name": ""}}]],
        "tool_choice": [5, "sometimes", {"type": "function", "function": {"name": "nope"}}],
        "reasoning_effort": [5, "extreme"],
        "thinking": [5, "x", {"type": "sideways"}],
        "response_format": [5, {"type": "json_object"}],
        "stream_options": [5, "x"],
        "presence_penalty": [1, 5, "x"],
        "frequency_penalty": [-1, 9],
        "logit_bias": [{"1": 5}, 3],
    }
    msg_base = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    msg_bad = {"max_tokens": [None, 0, "x"], "messages": [[{"role": "system", "content": "x"}], 3, []],
               "temperature": [1.5, "x"], "system": [5, [5]], "stop_sequences": [5, [5]],
               "tools": [[{"name": ""}], 4], "tool_choice": [{"type": "tool", "name": "zz"}, "auto"],
               "model": ["nope"]}
    comp_bad = {"prompt": [None, 5, [], ["a", "b"], [-1], [10 ** 6], {}], "echo": [True], "best_of": [2],
                "logprobs": [6, "x"], "suffix": ["x"]}
    out = []
    fields = list(bad_fields)
    for i in range(n):
        kind = i % 7
        if kind in (0, 1, 2):
            b = json.loads(json.dumps(base))
            k = rng.choice(fields)
            b[k] = rng.choice(bad_fields[k])
            if k == "top_logprobs":
                b["logprobs"] = True
            out.append(("/v1/chat/completions", json.dumps(b).encode()))
        elif kind == 3:
            text = json.dumps(rng.choice([base, msg_base]))
            out.append((rng.choice(["/v1/chat/completions", "/v1/messages"]), text[:rng.randrange(1, len(text))].encode()))
        elif kind == 4:
            raw = json.dumps(base).encode()
            bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
            at = raw.index(b'"hi"') + 2
            out.append(("/v1/chat/completions", raw[:at] + bad + raw[at:]))
        elif kind == 5:
            b = json.loads(json.dumps(msg_base))
            k = rng.choice(list(msg_bad))
            b[k] = rng.choice(msg_bad[k])
            out.append(("/v1/messages", json.dumps(b).encode()))
        else:
            if rng.random() < 0.5:
                b = {"model": MODEL, "prompt": "x", "max_tokens": 3}
                k = rng.choice(list(comp_bad))
                b[k] = rng.choice(comp_bad[k])
                out.append(("/v1/completions", json.dumps(b).encode()))
            else:
                out.append((rng.choice(["/v1/chat/completions", "/v1/completions", "/v1/messages"]),
                            json.dumps(rng.choice([[], 5, "str", None, True, [base]])).encode()))
    return out


def expect_4xx(status, body, what):
    check(400 <= status < 500, f"{what}: status {status} {body[:200]!r}")
    err = json.loads(body).get("error", {})
    check(isinstance(err.get("message"), str) and err["message"], f"{what}: no error message: {body[:200]!r}")


def test_bad_input(s, **_):
    crafted = [
        ("/v1/chat/completions", b"{not json"),
        ("/v1/chat/completions", b""),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "word " * 3000}]}).encode()),
        ("/v1/completions", json.dumps({"prompt": "word " * 3000}).encode()),
        ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"caf\xe9"}]}'),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 30}).encode()),
        ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"x"}],"temperature":1e999}'),
        ("/v1/nonexistent", b"{}"),
    ]
    for path, body in crafted:
        st, _, data = s.request("POST", path, body)
        expect_4xx(st, data, f"{path} {body[:40]!r}")
    st, _, data = s.request("POST", "/v1/chat/completions", b"x" * (2 << 20))
    check(st == 413, f"huge body: {st}")
    expect_4xx(st, data, "huge body")

    rng = random.Random(31)
    reqs = malformed_requests(rng, 10000)
    conn = None
    statuses = {}
    for path, body in reqs:
        for attempt in range(2):
            try:
                conn = conn or http.client.HTTPConnection(s.host, s.port, timeout=30)
                st, _, data = s.request("POST", path, body, conn=conn)
                break
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                conn = None
                if attempt:
                    raise
        statuses[st] = statuses.get(st, 0) + 1
        expect_4xx(st, data, f"{path} {body[:80]!r}")
    if conn:
        conn.close()
    print(f"    10,000 malformed requests: statuses {sorted(statuses.items())}")
    check(s.proc.poll() is None, "server died")
    r = chat(s.openai(), "hi", 4)
    check(r.choices[0].message.content is not None, "no normal reply after the fuzz")


def test_disconnect_frees_slot(s, **_):
    """A client that goes away mid-generation (streaming or not) frees its slot early."""
    for stream in (True, False):
        before = s.metrics()
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[6]}], "max_tokens": 512,
                           "temperature": 0, "stream": stream, "reasoning_effort": "none"}).encode()
        sock = socket.create_connection((s.host, s.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        if stream:
            got = b""
            while got.count(b"data:") < 3:
                got += sock.recv(4096)
        else:
            deadline = time.time() + 10
            while s.metrics()["ds4_active_requests"] == 0 and time.time() < deadline:
                time.sleep(0.002)
            time.sleep(0.02)
        sock.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            m = s.metrics()
            if (m["ds4_active_requests"] == 0 and
                    m["ds4_requests_finished_total"] > before["ds4_requests_finished_total"]):
                break
            time.sleep(0.05)
        what = "stream" if stream else "whole"
        check(m["ds4_active_requests"] == 0, f"{what}: slot not freed")
        check(m["ds4_requests_cancelled_total"] > before["ds4_requests_cancelled_total"], f"{what}: not cancelled")
        check(m["ds4_client_disconnects_total"] > before["ds4_client_disconnects_total"], f"{what}: not counted")
        gen = m["ds4_generated_tokens_total"] - before["ds4_generated_tokens_total"]
        check(gen < 512, f"{what}: generation ran to the end ({gen} tokens)")
        print(f"    {what}: cancelled after {int(gen)} of 512 tokens")


def open_stream(server, max_tokens, key):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[7]}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "reasoning_effort": "none"}).encode()
    sock = socket.create_connection((server.host, server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    return sock


def test_prefix_reuse(s, small=None, **_):
    """A follow-up turn resumes the cached session of the first; outputs equal a server without reuse."""
    c, ref = s.openai(), small.openai("sekret")
    sys_msg = {"role": "system", "content": "You are a terse assistant for C programmers."}
    first = [sys_msg, {"role": "user", "content": PROMPTS[2]}]
    a = c.chat.completions.create(model=MODEL, messages=first, max_tokens=24, temperature=0, extra_body=NOTHINK)
    again = c.chat.completions.create(model=MODEL, messages=first, max_tokens=24, temperature=0, extra_body=NOTHINK)
    check(again.choices[0].message.content == a.choices[0].message.content, "repeat differs")
    cached = again.usage.prompt_tokens_details.cached_tokens
    check(cached == a.usage.prompt_tokens - 2, f"repeat reused {cached} of {a.usage.prompt_tokens} tokens")
    follow = first + [{"role": "assistant", "content": a.choices[0].message.content},
                      {"role": "user", "content": "And a union?"}]
    before = s.metrics()
    b = c.chat.completions.create(model=MODEL, messages=follow, max_tokens=24, temperature=0, extra_body=NOTHINK)
    after = s.metrics()
    check(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 2,
          f"follow-up reused {b.usage.prompt_tokens_details.cached_tokens} tokens")
    check(after["ds4_prefix_reuse_hits_total"] == before["ds4_prefix_reuse_hits_total"] + 1, "reuse not counted")
    for msgs, got in ((first, a), (follow, b)):
        r = ref.chat.completions.create(model=MODEL, messages=msgs, max_tokens=24, temperature=0, extra_body=NOTHINK)
        check(r.usage.prompt_tokens_details.cached_tokens == 0, "reference server reused a session")
        check(r.choices[0].message.content == got.choices[0].message.content,
              f"reused {got.choices[0].message.content!r} != fresh {r.choices[0].message.content!r}")


def test_dspark_prefix_reuse(s, dspark=None, small=None, **_):
    """A greedy DSpark request that extends a cached conversation resumes it (its decoder drafts
    from the tail's hidden rows) and still answers exactly what a fresh plain server answers."""
    c, ref = dspark.openai(), small.openai("sekret")
    first = [{"role": "user", "content": PROMPTS[3]}]
    a = c.chat.completions.create(model=MODEL, messages=first, max_tokens=32, temperature=0, extra_body=NOTHINK)
    follow = first + [{"role": "assistant", "content": a.choices[0].message.content},
                      {"role": "user", "content": "Say it again, shorter."}]
    b = c.chat.completions.create(model=MODEL, messages=follow, max_tokens=32, temperature=0, extra_body=NOTHINK)
    cached = b.usage.prompt_tokens_details.cached_tokens
    check(cached >= a.usage.prompt_tokens - 2, f"DSpark follow-up reused {cached} tokens")
    check((b.usage.model_extra or {}).get("dspark", {}).get("used"), "the follow-up did not run DSpark")
    for msgs, got in ((first, a), (follow, b)):
        r = ref.chat.completions.create(model=MODEL, messages=msgs, max_tokens=32, temperature=0, extra_body=NOTHINK)
        check(r.choices[0].message.content == got.choices[0].message.content,
              f"DSpark+reuse {got.choices[0].message.content!r} != fresh plain {r.choices[0].message.content!r}")


def read_until_data(sock):
    got = b""
    sock.settimeout(15)
    while b"data:" not in got:
        chunk = sock.recv(4096)
        check(chunk, f"stream closed before any data: {got[:300]!r}")
        got += chunk


def test_auth_queue_and_sigterm(s, small=None, **_):
    key = "sekret"
    try:
        small.openai(key="wrong").models.list()
        raise AssertionError("no auth error")
    except openai.AuthenticationError:
        pass
    try:
        small.anthropic(key="wrong").messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("no auth error (anthropic)")
    except anthropic.AuthenticationError:
        pass
    st, _, _ = small.request("GET", "/health")
    check(st == 200, "health needs no key")
    st, _, _ = small.request("GET", "/metrics")
    check(st == 401, f"metrics without key: {st}")

    # One slot, one queue place: A runs, B waits, C gets 429.
    a = open_stream(small, 4000, key)
    read_until_data(a)
    b = open_stream(small, 4000, key)
    deadline = time.time() + 5
    while small.metrics(key).get("ds4_queue_depth", 0) < 1 and time.time() < deadline:
        time.sleep(0.02)
    try:
        chat(small.openai(key), "hi", 4)
        raise AssertionError("no 429")
    except openai.RateLimitError as e:
        check(e.response.headers.get("retry-after") == "1", f"Retry-After {e.response.headers}")
    a.close()
    b.close()
    r = None
    deadline = time.time() + 15
    while r is None and time.time() < deadline:
        try:
            r = chat(small.openai(key), "hi", 4)
        except openai.RateLimitError:
            time.sleep(0.1)
    check(r is not None and r.choices[0].message.content is not None, "no recovery after the queue drained")

    # SIGTERM under load: the stream ends, the process exits 0.
    e = open_stream(small, 4000, key)
    read_until_data(e)
    small.proc.send_signal(signal.SIGTERM)
    e.settimeout(15)
    while e.recv(65536):
        pass
    e.close()
    rc = small.proc.wait(timeout=20)
    check(rc == 0, f"exit code {rc} after SIGTERM")


TESTS = [test_models_and_health, test_openai_chat_stream_and_usage, test_thinking_split, test_stop_sequences,
         test_completions_and_logprobs, test_openai_errors, test_anthropic, test_tool_round_trip_shapes,
         test_determinism, test_dspark_identity, test_dspark_prefix_reuse, test_bad_input, test_disconnect_frees_slot,
         test_prefix_reuse, test_auth_queue_and_sigterm]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("-k", default="", help="run only tests whose name contains this")
    args = ap.parse_args()
    common = ["--ctx", "1024", "--max-tokens", "512", "--max-body", "1"]
    servers = {}
    failures = 0
    try:
        servers["s"] = Server(args.server, args.models, *common)
        servers["dspark"] = Server(args.server, args.models, *common, "--dspark")
        servers["small"] = Server(args.server, args.models, "--ctx", "4096", "--max-tokens", "4000", "--parallel", "1",
                                  "--max-queue", "1", "--api-key", "sekret", "--shutdown-timeout", "2",
                                  "--kv-memory", "0")
        refs = {}
        for t in TESTS:
            if args.k and args.k not in t.__name__:
                continue
            t0 = time.time()
            try:
                t(servers["s"], refs=refs, dspark=servers["dspark"], small=servers["small"])
                print(f"ok   {t.__name__} ({time.time() - t0:.1f} s)")
            except Exception:  # noqa: BLE001 — report every failure, keep going
                failures += 1
                print(f"FAIL {t.__name__} ({time.time() - t0:.1f} s)")
                traceback.print_exc()
        for name in ("s", "dspark"):
            rc = servers[name].stop()
            if rc != 0:
                failures += 1
                print(f"FAIL server '{name}' exited with {rc} after SIGTERM")
    finally:
        for srv in servers.values():
            if srv.proc.poll() is None:
                srv.proc.kill()
    print("server e2e:", "ok" if failures == 0 else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
