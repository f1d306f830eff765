#!/usr/bin/env python3
"""train_tokenizer.py — learns a DS4-compatible byte-level BPE vocabulary from a corpus.

Usage:
  python3 tools/tokenizer/train_tokenizer.py --vocab-size 8192 --out tok.gguf CORPUS...

CORPUS entries are files or directories (all regular files below a directory, sorted by
path). The text is cut with the DS4 pre-tokenizer (ds4_pretok.py, identical to the C++ one),
pieces are counted, and BPE merges are learned on the counted pieces: each step merges the
adjacent symbol pair with the highest total count (ties: the pair whose token strings sort
first), non-overlapping left to right inside each piece, until the vocabulary has
--vocab-size tokens or no pair occurs --min-frequency times. The result is deterministic:
the same corpus and flags give the same file, byte for byte.

Vocabulary layout (ids): 0 BOS <｜begin▁of▁sentence｜>, 1 EOS <｜end▁of▁sentence｜>,
2 <｜User｜>, 3 <｜Assistant｜>, 4 <think>, 5 </think>, 6 ｜DSML｜ (token_type 3 = control),
7..262 the 256 GPT-2 byte symbols in byte order, then one token per learned merge
(token_type 1 = normal).

Output: a GGUF file holding only metadata (no tensors): general.architecture =
"ds4-tokenizer", tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "joyai-llm",
tokenizer.ggml.tokens / merges / token_type, tokenizer.ggml.bos_token_id / eos_token_id.
`ds4-gguf generate` and the C++ Tokenizer::from_gguf read these keys.
"""
from __future__ import annotations

import argparse
import hashlib
import heapq
import os
import sys
import time
from collections import Counter, defaultdict
from typing import Dict, List, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ds4_pretok  # noqa: E402

SPECIALS = [
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<\uff5cUser\uff5c>",
    "<\uff5cAssistant\uff5c>",
    "<think>",
    "</think>",
    "\uff5cDSML\uff5c",
]
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3


def gpt2_byte_map() -> List[str]:
    """byte -> GPT-2 code point (33-126, 161-172, 174-255 map to themselves, the rest to 256+n)."""
    out, nxt = [], 256
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            out.append(chr(b))
        else:
            out.append(chr(nxt))
            nxt += 1
    return out


def corpus_files(paths: Sequence[str]) -> List[str]:
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for n in sorted(names):
                    full = os.path.join(root, n)
                    if os.path.isfile(full):
                        files.append(full)
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise SystemExit(f"error: corpus path '{p}' does not exist")
    return files


def count_pieces(files: Sequence[str], max_bytes: int) -> Tuple[Counter, int, str]:
    counts: Counter = Counter()
    total = 0
    sha = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        if max_bytes and total + len(data) > max_bytes:
            data = data[: max_bytes - total]
        sha.update(data)
        total += len(data)
        counts.update(ds4_pretok.split_bytes(data))
        if max_bytes and total >= max_bytes:
            break
    return counts, total, sha.hexdigest()


def train(counts: Counter, vocab_size: int, min_frequency: int, log=print):
    bmap = gpt2_byte_map()
    tokens: List[str] = list(SPECIALS) + bmap
    types: List[int] = [TOKEN_TYPE_CONTROL] * len(SPECIALS) + [TOKEN_TYPE_NORMAL] * 256
    token_id: Dict[str, int] = {t: i for i, t in enumerate(tokens)}
    if len(token_id) != len(tokens):
        raise SystemExit("error: special tokens collide with byte symbols")
    if vocab_size < len(tokens):
        raise SystemExit(f"error: --vocab-size must be at least {len(tokens)}")

    # Words: symbol-id lists with counts, in a deterministic order.
    base = len(SPECIALS)
    words: List[List[int]] = []
    freqs: List[int] = []
    for piece in sorted(counts):  # pieces as bytes (or str)
        raw = piece if isinstance(piece, bytes) else piece.encode("utf-8", "surrogateescape")
        if len(raw) < 2:
            continue
        words.append([base + b for b in raw])
        freqs.append(counts[piece])

    pair_count: Dict[Tuple[int, int], int] = defaultdict(int)
    where: Dict[Tuple[int, int], set] = defaultdict(set)
    for wi, w in enumerate(words):
        f = freqs[wi]
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(wi)

    # Max-heap on (count, then smaller token strings first) with lazy invalidation.
    def key(p, c):
        return (-c, tokens[p[0]], tokens[p[1]], p)

    heap = [key(p, c) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges: List[str] = []
    t0 = time.time()
    while len(tokens) < vocab_size and heap:
        negc, _, _, pair = heapq.heappop(heap)
        c = pair_count.get(pair, 0)
        if c != -negc:
            continue  # stale
        if c < min_frequency:
            break
        a, b = pair
        new_text = tokens[a] + tokens[b]
        if new_text in token_id:
            new_id = token_id[new_text]
        else:
            new_id = len(tokens)
            tokens.append(new_text)
            types.append(TOKEN_TYPE_NORMAL)
            token_id[new_text] = new_id
        merges.append(f"{tokens[a]} {tokens[b]}")
        changed = set()
        # Visiting order does not matter: counts are sums, and heap ties are broken by a
        # total order on (count, token strings), so the result is deterministic.
        for wi in where.pop(pair, ()):
            w = words[wi]
            n = len(w)
            f = freqs[wi]
            # Replace occurrences left to right, non-overlapping; update only the pairs
            # around each merge site.
            nw: List[int] = []
            i = 0
            merged = False
            last_merged = False  # nw[-1] is a merge made in this word
            while i < n:
                if i + 1 < n and w[i] == a and w[i + 1] == b:
                    if last_merged:
                        # old pair (b, a) here was already removed by the previous site
                        pair_count[(new_id, new_id)] += f
                        changed.add((new_id, new_id))
                        where[(new_id, new_id)].add(wi)
                    elif nw:
                        x = nw[-1]
                        pair_count[(x, a)] -= f
                        changed.add((x, a))
                        pair_count[(x, new_id)] += f
                        changed.add((x, new_id))
                        where[(x, new_id)].add(wi)
                    if i + 2 < n:
                        y = w[i + 2]
                        pair_count[(b, y)] -= f
                        changed.add((b, y))
                        if not (y == a and i + 3 < n and w[i + 3] == b):
                            # the right neighbour stays a plain symbol
                            pair_count[(new_id, y)] += f
                            changed.add((new_id, y))
                            where[(new_id, y)].add(wi)
                    nw.append(new_id)
                    i += 2
                    merged = last_merged = True
                else:
                    nw.append(w[i])
                    i += 1
                    last_merged = False
            if merged:
                words[wi] = nw
        pair_count.pop(pair, None)
        changed.discard(pair)
        for p in changed:
            cnt = pair_count.get(p, 0)
            if cnt > 0:
                heapq.heappush(heap, key(p, cnt))
            else:
                pair_count.pop(p, None)
        if len(merges) % 1000 == 0:
            log(f"  {len(merges)} merges, vocab {len(tokens)}, last count {c}, "
                f"{time.time() - t0:.1f}s")
    return tokens, merges, types


def write_gguf(path: str, tokens, merges, types, name: str, description: str) -> None:
    import gguf  # the reference `gguf` package (tools/requirements.txt)

    w = gguf.GGUFWriter(path, "ds4-tokenizer")
    w.add_name(name)
    w.add_description(description)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("joyai-llm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(tokens.index(SPECIALS[0]))
    w.add_eos_token_id(tokens.index(SPECIALS[1]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="+", help="text files or directories")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--min-frequency", type=int, default=2,
                    help="stop when the best pair occurs fewer times")
    ap.add_argument("--max-bytes", type=int, default=0, help="read at most this many bytes (0 = all)")
    ap.add_argument("--out", required=True, help="output GGUF (metadata only)")
    ap.add_argument("--name", default="ds4-bpe")
    args = ap.parse_args()

    files = corpus_files(args.corpus)
    if not files:
        raise SystemExit("error: no corpus files")
    t0 = time.time()
    counts, total, digest = count_pieces(files, args.max_bytes)
    print(f"read {len(files)} files, {total} bytes, {len(counts)} distinct pieces "
          f"({time.time() - t0:.1f}s)")
    tokens, merges, types = train(counts, args.vocab_size, args.min_frequency)
    if len(tokens) < args.vocab_size:
        print(f"warning: stopped at {len(tokens)} tokens (no pair occurs "
              f"{args.min_frequency} times)")
    desc = (f"DS4 byte-level BPE, {len(tokens)} tokens, trained on {total} bytes "
            f"(sha256 {digest}) by tools/tokenizer/train_tokenizer.py")
    write_gguf(args.out, tokens, merges, types, args.name, desc)
    print(f"wrote {args.out}: {len(tokens)} tokens, {len(merges)} merges "
          f"({time.time() - t0:.1f}s total)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
