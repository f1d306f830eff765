"""ds4_pretok.py — the DS4 ("JoyAI") pre-tokenizer of ds4-architecture.md §8.2 in Python.

Mirror of tokenizer/pretok.cpp, rule for rule; tests/tokenizer/check_tokenizer.py proves that
both give the same pieces. Character classes are ASCII-only and every non-ASCII character is
"letter-like", as in ds4.

Two implementations of the same rules:
  * valid UTF-8 (the normal case, fast): one regular expression over the decoded str whose
    alternatives are tried in order at each position (Python's `re` takes the first
    alternative that matches, like the hand-written scanner);
  * anything else: a byte-level scanner (`_split_raw`) that reproduces ds4's treatment of
    malformed UTF-8 (character length from the lead byte, continuation bytes unchecked,
    masked decoding for the CJK test), exactly like the C++ code. On valid UTF-8 both agree.

Rules:
  1 digits{1,3}  2 CJK/Hiragana/Katakana run  3 punct + ASCII letters  4 letter-like run
  5 one other non-newline char + letter-like run  6 ' ' + punct run + [\\r\\n]*
  7 punct run + [\\r\\n]*  8 space run (to its last newline; or minus its last char when
  followed by letter-like/punct; or whole)  9 one character.
"""
from __future__ import annotations

import re
from typing import Iterator, List, Tuple

_P = r"!-/:-@\[-`{-~"                       # ASCII punct ranges (inside a class)
_L = r"A-Za-z\u0080-\U0010FFFF"             # letter-like: ASCII letter or any non-ASCII
_CJK = r"\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF"
_SP = r" \t\n\r\v\f"                          # space class
_SP_NO_NL = r" \t\v\f"

PATTERN = re.compile(
    "|".join([
        r"[0-9]{1,3}",                                        # 1
        rf"[{_CJK}]+",                                        # 2
        rf"[{_P}][A-Za-z]+",                                  # 3
        rf"[{_L}]+",                                          # 4
        rf"[^\r\n{_P}][{_L}]+",                               # 5
        rf" [{_P}]+[\r\n]*",                                  # 6
        rf"[{_P}]+[\r\n]*",                                   # 7
        rf"[{_SP}]*[\r\n]",                                   # 8a: run with a newline
        rf"[{_SP_NO_NL}]+(?=[{_SP_NO_NL}][{_L}{_P}])",        # 8b: run minus its last char
        rf"[{_SP_NO_NL}]+",                                   # 8c: whole run
        r".",                                                 # 9
    ]),
    re.DOTALL,
)


def split_text(text: str) -> Iterator[str]:
    """Pieces of a str that is valid Unicode text (no lone surrogates)."""
    for m in PATTERN.finditer(text):
        yield m.group(0)


def _is_punct(c: int) -> bool:
    return 0x21 <= c <= 0x2F or 0x3A <= c <= 0x40 or 0x5B <= c <= 0x60 or 0x7B <= c <= 0x7E


def _is_alpha(c: int) -> bool:
    return 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A


def _letter_like(c: int) -> bool:
    return c >= 0x80 or _is_alpha(c)


def _char_len(s: bytes, i: int) -> int:
    c = s[i]
    n = 1
    if c & 0xE0 == 0xC0:
        n = 2
    elif c & 0xF0 == 0xE0:
        n = 3
    elif c & 0xF8 == 0xF0:
        n = 4
    return 1 if i + n > len(s) else n


def _cjk_len(s: bytes, i: int) -> int:
    if i >= len(s) or s[i] < 0x80:
        return 0
    n = _char_len(s, i)
    if n == 3:
        cp = ((s[i] & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F)
    elif n == 4:
        cp = (((s[i] & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6)
              | (s[i + 3] & 0x3F))
    else:
        return 0
    ok = 0x4E00 <= cp <= 0x9FA5 or 0x3040 <= cp <= 0x309F or 0x30A0 <= cp <= 0x30FF
    return n if ok else 0


def _letter_run(s: bytes, j: int) -> int:
    while j < len(s) and _letter_like(s[j]):
        j += _char_len(s, j)
    return j


_SPACE = b" \t\n\r\v\f"
_NL = b"\r\n"


def _piece_end(s: bytes, i: int) -> int:
    n = len(s)
    c = s[i]
    if 0x30 <= c <= 0x39:                                                   # 1
        j = i + 1
        while j < n and j - i < 3 and 0x30 <= s[j] <= 0x39:
            j += 1
        return j
    if c >= 0x80:
        k = _cjk_len(s, i)
        if k:                                                               # 2
            j = i + k
            while True:
                k = _cjk_len(s, j)
                if not k:
                    return j
                j += k
        return _letter_run(s, i)                                            # 4
    if _is_punct(c) and i + 1 < n and _is_alpha(s[i + 1]):                  # 3
        j = i + 2
        while j < n and _is_alpha(s[j]):
            j += 1
        return j
    if _is_alpha(c):                                                        # 4
        return _letter_run(s, i)
    if c not in _NL and not _is_punct(c) and i + 1 < n and _letter_like(s[i + 1]):
        return _letter_run(s, i + 1)                                        # 5
    if (c == 0x20 and i + 1 < n and _is_punct(s[i + 1])) or _is_punct(c):  # 6, 7
        j = i + 1 if _is_punct(c) else i + 2
        while j < n and _is_punct(s[j]):
            j += 1
        while j < n and s[j] in _NL:
            j += 1
        return j
    if c in _SPACE:                                                         # 8
        j = i + 1
        while j < n and s[j] in _SPACE:
            j += 1
        last_nl_end = 0
        for k in range(i, j):
            if s[k] in _NL:
                last_nl_end = k + 1
        if last_nl_end:
            return last_nl_end
        if j - i > 1 and j < n and (_letter_like(s[j]) or _is_punct(s[j])):
            return j - 1
        return j
    return i + _char_len(s, i)                                              # 9


def _split_raw(data: bytes) -> List[bytes]:
    out, i = [], 0
    while i < len(data):
        j = _piece_end(data, i)
        out.append(data[i:j])
        i = j
    return out


def split_bytes(data: bytes) -> List[bytes]:
    """Pieces of arbitrary bytes, as bytes; their concatenation is `data`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _split_raw(data)
    return [p.encode("utf-8") for p in split_text(text)]


def piece_offsets(data: bytes) -> List[Tuple[int, int]]:
    """[begin, end) byte offsets of the pieces (the format of `ds4-tok-pieces pieces`)."""
    out, pos = [], 0
    for p in split_bytes(data):
        out.append((pos, pos + len(p)))
        pos += len(p)
    assert pos == len(data)
    return out


if __name__ == "__main__":
    import sys
    data = open(sys.argv[1], "rb").read()
    sys.stdout.write("".join(f"{b} {e}\n" for b, e in piece_offsets(data)))
