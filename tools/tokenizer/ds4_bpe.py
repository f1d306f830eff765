"""ds4_bpe.py — a slow, obviously-correct DS4 BPE encoder (the oracle for C++ cross-checks).

Follows ds4-architecture.md §8.3 literally on strings: bytes -> GPT-2 code points, one symbol
per character, repeatedly merge the adjacent pair with the smallest rank (leftmost on equal
rank), look each symbol up, unknown symbols fall back to per-byte lookups.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import ds4_pretok

_BYTE_MAP: List[str] = []
_n = 256
for _b in range(256):
    if 33 <= _b <= 126 or 161 <= _b <= 172 or 174 <= _b <= 255:
        _BYTE_MAP.append(chr(_b))
    else:
        _BYTE_MAP.append(chr(_n))
        _n += 1


class Bpe:
    def __init__(self, tokens: Sequence[str], merges: Sequence[str]):
        self.ids: Dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.rank: Dict[tuple, int] = {}
        for r, m in enumerate(merges):
            a, b = m.split(" ", 1)
            self.rank.setdefault((a, b), r)
        self.cache: Dict[bytes, List[int]] = {}

    def piece(self, raw: bytes) -> List[int]:
        if raw in self.cache:
            return self.cache[raw]
        syms = [_BYTE_MAP[b] for b in raw]
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        out: List[int] = []
        for s in syms:
            if s in self.ids:
                out.append(self.ids[s])
            else:
                out.extend(self.ids[c] for c in s if c in self.ids)
        self.cache[raw] = out
        return out

    def encode(self, data: bytes) -> List[int]:
        out: List[int] = []
        for p in ds4_pretok.split_bytes(data):
            out.extend(self.piece(p))
        return out
