#!/usr/bin/env python3
"""check_tokenizer.py — cross-checks the C++ tokenizer against the Python tools.

  1. pre-tokenizer: `ds4-tok-pieces pieces` == tools/tokenizer/ds4_pretok.py on
     data/promessi_sposi.txt, tests/tokenizer/tricky.txt and seeded random byte soup
     (invalid UTF-8: ds4's lead-byte stepping), and ds4_pretok's regex path == its byte
     scanner on valid UTF-8;
  2. BPE: `ds4-tok-pieces encode tok2k.gguf` == the string-level oracle
     tools/tokenizer/ds4_bpe.py on the same inputs;
  3. trainer determinism: retraining tests/tokenizer/tok2k.gguf from promessi_sposi.txt
     reproduces the committed file byte for byte;
  4. trainer correctness: the incremental trainer equals a naive full-recount BPE trainer on
     small random corpora full of overlapping pairs ("aaa", "abab").

usage: check_tokenizer.py SOURCE_DIR PATH/TO/ds4-tok-pieces WORK_DIR
"""
import os
import random
import subprocess
import sys

src, tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(src, "tools", "tokenizer"))
import ds4_bpe  # noqa: E402
import ds4_pretok  # noqa: E402
import gguf  # noqa: E402

os.makedirs(work, exist_ok=True)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def byte_soup(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    frags = [b" ", b"  ", b"\t", b"\n", b"\r\n", b"\v", b"\f", b"a", b"Zz", b"123", b"4",
             b".", b"!?", b"'", b"\"", b"<", b"(", "é".encode(), "中".encode(),
             "か".encode(), "😀".encode(), b"\x00", b"\x1b", b"\x7f", b"\xff", b"\xc3",
             b"\xe4\xb8", b"\x80", "—".encode(), b"word", b" the", b"\xef\xbd\x9c"]
    out = bytearray()
    while len(out) < n:
        if rng.random() < 0.1:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        else:
            out += rng.choice(frags)
    return bytes(out)


inputs = {
    "promessi_sposi": os.path.join(src, "data", "promessi_sposi.txt"),
    "tricky": os.path.join(src, "tests", "tokenizer", "tricky.txt"),
}
for seed in range(3):
    p = os.path.join(work, f"soup{seed}.bin")
    with open(p, "wb") as f:
        f.write(byte_soup(seed, 60000))
    inputs[f"soup{seed}"] = p

# 1. pieces
for name, path in inputs.items():
    data = open(path, "rb").read()
    cc = subprocess.run([tool, "pieces", path], check=True, capture_output=True).stdout.decode()
    py = "".join(f"{b} {e}\n" for b, e in ds4_pretok.piece_offsets(data))
    if cc != py:
        cl, pl = cc.splitlines(), py.splitlines()
        i = next((k for k in range(min(len(cl), len(pl))) if cl[k] != pl[k]), min(len(cl), len(pl)))
        fail(f"pieces differ on {name} at piece {i}: C++ {cl[i:i+1]} vs Python {pl[i:i+1]}")
    else:
        print(f"ok: pieces {name} ({len(py.splitlines())} pieces)")

# 1b. the two Python implementations (regex for valid UTF-8, byte scanner) agree on valid text
for name in ("promessi_sposi", "tricky"):
    data = open(inputs[name], "rb").read()[:300000]
    valid = data.decode("utf-8", errors="ignore").encode("utf-8")
    if ds4_pretok._split_raw(valid) != ds4_pretok.split_bytes(valid):
        fail(f"ds4_pretok regex and byte scanner differ on valid UTF-8 from {name}")
    else:
        print(f"ok: regex == byte scanner on valid UTF-8 from {name}")

# 2. BPE ids with the committed trained vocabulary
vocab_path = os.path.join(src, "tests", "tokenizer", "tok2k.gguf")
r = gguf.GGUFReader(vocab_path)


def str_array(key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


bpe = ds4_bpe.Bpe(str_array("tokenizer.ggml.tokens"), str_array("tokenizer.ggml.merges"))
for name, path in inputs.items():
    data = open(path, "rb").read()
    if name == "promessi_sposi":  # the oracle is slow: check a 300 KB prefix
        data = data[:300000]
        path = os.path.join(work, "promessi_prefix.txt")
        open(path, "wb").write(data)
    cc = subprocess.run([tool, "encode", vocab_path, path], check=True,
                        capture_output=True).stdout.decode().split()
    py = [str(i) for i in bpe.encode(data)]
    if cc != py:
        i = next((k for k in range(min(len(cc), len(py))) if cc[k] != py[k]), min(len(cc), len(py)))
        fail(f"ids differ on {name} at {i}: C++ {cc[i:i+5]} vs Python {py[i:i+5]}")
    else:
        print(f"ok: ids {name} ({len(py)} tokens)")

# 3. trainer determinism
out = os.path.join(work, "tok2k_retrained.gguf")
subprocess.run([sys.executable, os.path.join(src, "tools", "tokenizer", "train_tokenizer.py"),
                "--vocab-size", "2048", "--name", "ds4-test-bpe-2k", "--out", out,
                os.path.join(src, "data", "promessi_sposi.txt")], check=True, capture_output=True)
if open(out, "rb").read() != open(vocab_path, "rb").read():
    fail("retrained tok2k.gguf differs from the committed tests/tokenizer/tok2k.gguf")
else:
    print("ok: trainer reproduces tests/tokenizer/tok2k.gguf")

# 4. incremental trainer == naive trainer
sys.path.insert(0, os.path.join(src, "tools", "tokenizer"))
import train_tokenizer as T  # noqa: E402
from collections import Counter  # noqa: E402


def naive(counts, vocab_size, min_frequency):
    """Full recount of all pairs after every merge; same tie rule as the trainer."""
    tokens = list(T.SPECIALS) + T.gpt2_byte_map()
    token_id = {t: i for i, t in enumerate(tokens)}
    words = []
    for piece in sorted(counts):
        raw = piece.encode("utf-8", "surrogateescape")
        if len(raw) >= 2:
            words.append(([len(T.SPECIALS) + b for b in raw], counts[piece]))
    merges = []
    while len(tokens) < vocab_size:
        pc = Counter()
        for w, f in words:
            for p in zip(w, w[1:]):
                pc[p] += f
        if not pc:
            break
        best = min(pc, key=lambda p: (-pc[p], tokens[p[0]], tokens[p[1]], p))
        if pc[best] < min_frequency:
            break
        a, b = best
        text = tokens[a] + tokens[b]
        if text not in token_id:
            token_id[text] = len(tokens)
            tokens.append(text)
        nid = token_id[text]
        merges.append(f"{tokens[a]} {tokens[b]}")
        new_words = []
        for w, f in words:
            nw, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    nw.append(nid)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            new_words.append((nw, f))
        words = new_words
    return tokens, merges


for seed in range(20):
    rng = random.Random(seed)
    text = "".join(rng.choice(["a", "b", "ab", "aaa", "abab", "ba", " a", " ab", "c", "aab", "bb",
                               "\n", "12"]) for _ in range(rng.randrange(50, 400)))
    counts = Counter(T.ds4_pretok.split_text(text))
    got = T.train(counts, 263 + 40, 1, log=lambda *a: None)[:2]
    want = naive(counts, 263 + 40, 1)
    if tuple(got) != tuple(want):
        fail(f"trainer differs from the naive trainer on random corpus {seed}")
        break
else:
    print("ok: incremental trainer == naive trainer on 20 random corpora")

sys.exit(1 if failures else 0)
