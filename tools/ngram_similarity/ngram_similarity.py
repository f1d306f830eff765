#!/usr/bin/env python3
"""tools/ngram_similarity/ngram_similarity.py — repeated n-gram rates for speculation triage.

Role: for each text of a prompt/output set, the fraction of its n-grams (n = 1..4) that
already occurred EARLIER in the same text. High rates mean a text is predictable from its
own history (n-gram / prompt-lookup drafting pays off); low rates mean it is not.

Input: JSONL files (one object a line; the text is taken from --field, default "text"; a
record with "prompt" and "output" fields is scored on prompt+output) or plain .txt files
(one text per file). Units: whitespace-separated words by default, characters with --chars,
or token ids with --tokens (a JSON list in the field).
Output: one line per text (id, length, rates for n = 1..4) and the mean per file, or JSON
with --json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def repeated_rates(units: list, max_n: int = 4) -> list[float]:
    """rate[n-1] = #{i : units[i:i+n] occurred at some j < i} / #n-grams (0 if none)."""
    rates = []
    for n in range(1, max_n + 1):
        seen: set = set()
        total = rep = 0
        for i in range(len(units) - n + 1):
            g = tuple(units[i:i + n])
            total += 1
            if g in seen:
                rep += 1
            seen.add(g)
        rates.append(rep / total if total else 0.0)
    return rates


def load_texts(path: Path, field: str) -> list[tuple[str, object]]:
    if path.suffix == ".jsonl":
        out = []
        for k, line in enumerate(path.open(encoding="utf-8")):
            if not line.strip():
                continue
            rec = json.loads(line)
            if "prompt" in rec and "output" in rec and field == "text":
                val = rec["prompt"] + rec["output"]
            else:
                val = rec[field]
            out.append((str(rec.get("id", k)), val))
        return out
    return [(path.name, path.read_text(encoding="utf-8"))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--field", default="text")
    ap.add_argument("--max-n", type=int, default=4)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--chars", action="store_true", help="characters as units")
    g.add_argument("--tokens", action="store_true", help="the field holds token ids")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = {}
    for f in args.files:
        rows = []
        for tid, val in load_texts(Path(f), args.field):
            units = list(val) if (args.chars or args.tokens) else str(val).split()
            rows.append({"id": tid, "units": len(units),
                         "rates": repeated_rates(units, args.max_n)})
        mean = [sum(r["rates"][n] for r in rows) / max(len(rows), 1) for n in range(args.max_n)]
        report[f] = {"texts": rows, "mean": mean}
        if not args.json:
            print(f"== {f}")
            for r in rows:
                print(f"  {r['id']:>8s} {r['units']:6d}  " +
                      "  ".join(f"{n + 1}:{v:.3f}" for n, v in enumerate(r["rates"])))
            print("  mean           " + "  ".join(f"{n + 1}:{v:.3f}" for n, v in enumerate(mean)))
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
