#!/usr/bin/env python3
"""tools/corpus/build_corpus.py — deterministic training corpus from pinned Debian packages.

Role: fetch the packages named in tools/corpus/manifest.json with `apt-get download
NAME=VERSION` (never reads what is installed on this machine), unpack each with
`dpkg-deb -x`, turn the selected files into plain-text documents in four channels
(code, english, italian, structured) and split every channel into train / held-out by a
hash of the document name. Writes, under --out (default build-corpus/, git-ignored):

  debs/*.deb                     the fetched packages (reused when present, sha256 recorded)
  <channel>.train.jsonl          {"name": ..., "text": ...} one document a line
  <channel>.heldout.jsonl
  train.txt                      all train documents, separated by blank lines
  tokenizer_sample.txt           ≤2.5 M characters per channel (tokenizer training input)
  sources.json                   package versions + sha256 of every .deb, document counts

and, with --prompts DIR (default data/prompts, committed), four benchmark prompt sets
<channel>.jsonl derived from the held-out split (16 prompts of ~300–400 tokens each,
cut at line boundaries).

Invariants: the same manifest and the same .deb files give byte-identical outputs
(files are visited in sorted order, the split depends only on the document name, no clock or
random state is read). Italian prose comes from data/promessi_sposi.txt (one document per
chapter).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHANNELS = ("structured", "code", "english", "italian")
# Held-out share per channel (percent of documents, by name hash). Italian has only ~38
# chapters, so it gets a larger share to leave enough held-out text for prompts + perplexity.
HELDOUT_PCT = {"structured": 5, "code": 5, "english": 5, "italian": 12}
RECORDS_PER_DOC = 32
TOKENIZER_SAMPLE_CHARS = 2_500_000
# prompt length in characters per channel (~2.2 / 3.0 / 3.6 / 3.1 characters per token)
PROMPT_CHARS = {"structured": 800, "code": 1000, "english": 1200, "italian": 1000}  # structured: JSON records grouped into documents of this many lines


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_heldout(channel: str, name: str) -> bool:
    h = int.from_bytes(hashlib.sha256(f"{channel}:{name}".encode()).digest()[:8], "little")
    return h % 100 < HELDOUT_PCT[channel]


# ---------------------------------------------------------------- fetching / unpacking
def fetch(pkg: dict, debs: Path) -> Path:
    debs.mkdir(parents=True, exist_ok=True)
    arch_guess = list(debs.glob(f"{pkg['name']}_{pkg['version'].split(':')[-1]}_*.deb"))
    if arch_guess:
        return arch_guess[0]
    spec = f"{pkg['name']}={pkg['version']}"
    r = subprocess.run(["apt-get", "download", spec], cwd=debs, capture_output=True, text=True)
    found = list(debs.glob(f"{pkg['name']}_*.deb"))
    if r.returncode != 0 or not found:
        sys.exit(f"build_corpus: apt-get download {spec} failed:\n{r.stderr}")
    return found[0]


def unpack(deb: Path, dest: Path) -> Path:
    if not (dest / ".done").exists():
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
        (dest / ".done").write_text("ok\n")
    return dest


def control_fields(deb: Path) -> dict:
    out = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True,
                         text=True).stdout
    fields: dict[str, str] = {}
    key = None
    for line in out.splitlines():
        if line.startswith((" ", "\t")) and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, val = line.partition(":")
            fields[key] = val.strip()
    return fields


# ---------------------------------------------------------------- text conversion
_ROFF_ESC = {"-": "-", "e": "\\", "&": "", " ": " ", "~": " ", "|": "", "^": "", "0": " ",
             "c": "", "%": ""}
_ROFF_NAMED = {"em": "--", "en": "-", "bu": "*", "aq": "'", "dq": '"', "lq": '"', "rq": '"',
               "oq": "'", "cq": "'", "co": "(c)", "rg": "(R)", "mu": "x", ">=": ">=",
               "<=": "<=", "ti": "~", "ha": "^", "rs": "\\", "at": "@", "sh": "#", "dg": "+",
               "aa": "'", "ga": "`", "hy": "-", "pl": "+", "mi": "-", "eq": "=", "or": "|"}


def _roff_inline(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch != "\\" or i + 1 >= len(s):
            out.append(ch)
            i += 1
            continue
        nx = s[i + 1]
        if nx == "f":  # font change \fB \fI \fR \fP \f(CW \f[..]
            if i + 2 < len(s) and s[i + 2] == "(":
                i += 5
            elif i + 2 < len(s) and s[i + 2] == "[":
                j = s.find("]", i + 3)
                i = j + 1 if j >= 0 else len(s)
            else:
                i += 3
        elif nx == "(":
            out.append(_ROFF_NAMED.get(s[i + 2:i + 4], ""))
            i += 4
        elif nx == "[":
            j = s.find("]", i + 2)
            name = s[i + 2:j] if j >= 0 else ""
            out.append(_ROFF_NAMED.get(name, ""))
            i = j + 1 if j >= 0 else len(s)
        elif nx == "*":  # string register \*(xx or \*x or \*[..]
            if i + 2 < len(s) and s[i + 2] == "(":
                i += 5
            elif i + 2 < len(s) and s[i + 2] == "[":
                j = s.find("]", i + 3)
                i = j + 1 if j >= 0 else len(s)
            else:
                i += 3
        elif nx in "sv" :  # size / vertical motion escapes: \s-1, \s0, \v'..'
            j = i + 2
            if j < len(s) and s[j] in "+-":
                j += 1
            if j < len(s) and s[j] == "'":
                k = s.find("'", j + 1)
                j = k + 1 if k >= 0 else len(s)
            else:
                while j < len(s) and s[j].isdigit():
                    j += 1
            i = j
        elif nx == '"':  # comment to end of line
            break
        else:
            out.append(_ROFF_ESC.get(nx, nx))
            i += 2
    return "".join(out)


def _roff_args(rest: str) -> list[str]:
    args, cur, q = [], [], False
    for ch in rest:
        if ch == '"':
            q = not q
        elif ch in " \t" and not q:
            if cur:
                args.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        args.append("".join(cur))
    return args


def roff_to_text(src: str) -> str | None:
    """Small man(7) renderer: keeps the words, refills paragraphs (80 columns), keeps
    .nf/.EX blocks verbatim. None for .so alias pages."""
    out: list[str] = []
    para: list[str] = []
    fill = True

    def flush() -> None:
        if para:
            out.extend(textwrap.wrap(" ".join(para), 80, break_long_words=False,
                                     break_on_hyphens=False) or [""])
            para.clear()

    def blank() -> None:
        flush()
        if out and out[-1] != "":
            out.append("")

    for raw in src.splitlines():
        if raw.startswith((".so ", "'so ")):
            return None
        if raw.startswith((".\\\"", "'\\\"")) or raw.strip() in (".", "'"):
            continue
        if raw.startswith((".", "'")):
            m = re.match(r"[.'](\S+)\s*(.*)", raw)
            if not m:
                continue
            mac, rest = m.group(1), m.group(2)
            args = [_roff_inline(a) for a in _roff_args(rest)]
            words = None
            if mac in ("SH", "SS"):
                blank()
                out.append(" ".join(args).upper() if mac == "SH" else " ".join(args))
            elif mac in ("B", "I", "SM", "SB"):
                words = " ".join(args)
            elif mac in ("BR", "RB", "IR", "RI", "BI", "IB"):
                words = "".join(args)
            elif mac in ("PP", "P", "LP", "sp", "TP", "HP"):
                blank()
            elif mac == "IP":
                blank()
                if args:
                    out.append(args[0])
            elif mac == "TH":
                out.append(" ".join(args[:2]))
            elif mac in ("UR", "MT"):
                words = " ".join(args)
            elif mac in ("nf", "EX"):
                flush()
                fill = False
            elif mac in ("fi", "EE"):
                fill = True
            elif mac == "br":
                flush()
            if words:
                (para.append(words) if fill else out.append(words))
            continue
        line = _roff_inline(raw)
        if not fill:
            out.append(line)
        elif not line.strip():
            blank()
        else:
            para.append(line.strip())
    flush()
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text + "\n" if text else None


def chapters_italian(path: Path) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    parts = re.split(r"\n(?=[ \t]*CAPITOLO [A-Z]+\.?[ \t]*\n)", text)
    docs = []
    for i, part in enumerate(parts):
        body = "\n".join(line.strip() for line in part.splitlines())
        body = re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"
        docs.append((f"promessi_sposi#ch{i:02d}", body))
    return docs


def json_records(path: Path) -> list[dict]:
    data = json.loads(path.read_text(encoding="utf-8"))
    recs = []
    for key, value in data.items():
        if isinstance(value, list):
            recs += [{"table": f"{path.stem}.{key}", **v} if isinstance(v, dict) else v
                     for v in value]
    return recs


# ---------------------------------------------------------------- main build
def collect(manifest: dict, out: Path) -> tuple[dict[str, list[tuple[str, str]]], list[dict]]:
    docs: dict[str, list[tuple[str, str]]] = {c: [] for c in CHANNELS}
    sources = []
    control_recs = []
    for pkg in manifest["packages"]:
        deb = fetch(pkg, out / "debs")
        root = unpack(deb, out / "extract" / pkg["name"])
        fields = control_fields(deb)
        if fields.get("Version") != pkg["version"]:
            sys.exit(f"build_corpus: {deb.name}: expected version {pkg['version']}, "
                     f"got {fields.get('Version')}")
        digest = sha256_file(deb)
        if pkg.get("sha256") and pkg["sha256"] != digest:
            sys.exit(f"build_corpus: {deb.name}: sha256 {digest}, manifest pins {pkg['sha256']}")
        sources.append({"package": pkg["name"], "version": pkg["version"], "deb": deb.name,
                        "sha256": digest})
        control_recs.append({k: fields[k] for k in sorted(fields)})
        # symlinks (man page aliases such as CPU_FREE.3 -> CPU_SET.3) are skipped: they would
        # put the same text in train and held-out
        files = sorted({p for pat in pkg["take"] for p in root.glob(pat)
                        if p.is_file() and not p.is_symlink()})
        ch = pkg["channel"]
        for f in files:
            rel = f"{pkg['name']}:{f.relative_to(root)}"
            if ch == "structured":
                recs = json_records(f)
                for i in range(0, len(recs), RECORDS_PER_DOC):
                    chunk = recs[i:i + RECORDS_PER_DOC]
                    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                                   for r in chunk)
                    docs[ch].append((f"{rel}#{i // RECORDS_PER_DOC}", text))
                continue
            raw = f.read_bytes()
            if f.suffix == ".gz":
                raw = gzip.decompress(raw)
            text = raw.decode("utf-8", errors="replace")
            if "/man/man" in str(f):
                text = roff_to_text(text)
                if text is None:
                    continue
            if not text.strip():
                continue
            docs[ch].append((rel, text))
    for i in range(0, len(control_recs), 1):
        docs["structured"].append((f"control#{control_recs[i]['Package']}",
                                   json.dumps(control_recs[i], ensure_ascii=False,
                                              sort_keys=True, indent=1) + "\n"))
    docs["italian"] = chapters_italian(REPO / "data" / "promessi_sposi.txt")
    # exact-duplicate texts (hard links, copies in two packages): keep the first name in
    # sorted order, so no text can land in both train and held-out
    seen: set[str] = set()
    for ch in CHANNELS:
        kept = []
        for name, text in sorted(docs[ch]):
            h = hashlib.sha256(text.encode()).hexdigest()
            if h not in seen:
                seen.add(h)
                kept.append((name, text))
        docs[ch] = kept
    return docs, sources


def make_prompts(heldout: list[tuple[str, str]], n: int, chars: int) -> list[dict]:
    """n windows of about `chars` characters, cut at line starts, spread over the documents."""
    prompts = []
    cands = []
    for name, text in heldout:
        lines = text.splitlines(keepends=True)
        pos = 0
        starts = []
        for ln in lines:
            starts.append(pos)
            pos += len(ln)
        # windows that start at a line start and end at the first line end past `chars`
        i = 0
        while i < len(lines):
            j, size = i, 0
            while j < len(lines) and size < chars:
                size += len(lines[j])
                j += 1
            if size >= chars * 0.8 and size <= chars * 1.6:
                window = "".join(lines[i:j])
                if window.strip() and len(set(window)) > 10:
                    cands.append((name, starts[i], window))
            i = j
    # deterministic spread: order by hash, take n from as many documents as possible
    cands.sort(key=lambda c: hashlib.sha256(f"{c[0]}@{c[1]}".encode()).hexdigest())
    used_docs: dict[str, int] = {}
    for round_ in range(64):
        for name, start, window in cands:
            if len(prompts) == n:
                break
            if used_docs.get(name, 0) != round_:
                continue
            if any(p["source"] == name and p["offset"] == start for p in prompts):
                continue
            used_docs[name] = round_ + 1
            prompts.append({"source": name, "offset": start, "text": window})
        if len(prompts) == n:
            break
    prompts.sort(key=lambda p: (p["source"], p["offset"]))
    return [{"id": i, **p} for i, p in enumerate(prompts)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default=str(REPO / "tools" / "corpus" / "manifest.json"))
    ap.add_argument("--out", default=str(REPO / "build-corpus"))
    ap.add_argument("--prompts", default=str(REPO / "data" / "prompts"),
                    help="where to write <channel>.jsonl prompt sets ('' = skip)")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--prompt-chars", type=int, default=0,
                    help="characters per prompt (0 = per-channel default, ~300-400 tokens)")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(Path(args.manifest).read_text())
    docs, sources = collect(manifest, out)

    summary = {"sources": sources, "channels": {}}
    with open(out / "train.txt", "w", encoding="utf-8") as all_train:
        for ch in CHANNELS:
            items = sorted(docs[ch])
            train = [(n, t) for n, t in items if not is_heldout(ch, n)]
            held = [(n, t) for n, t in items if is_heldout(ch, n)]
            for split, rows in (("train", train), ("heldout", held)):
                with open(out / f"{ch}.{split}.jsonl", "w", encoding="utf-8") as f:
                    for n, t in rows:
                        f.write(json.dumps({"name": n, "text": t}, ensure_ascii=False) + "\n")
            for _, t in train:
                all_train.write(t.rstrip("\n") + "\n\n")
            summary["channels"][ch] = {
                "train_docs": len(train), "heldout_docs": len(held),
                "train_chars": sum(len(t) for _, t in train),
                "heldout_chars": sum(len(t) for _, t in held)}
            if args.prompts:
                pdir = Path(args.prompts)
                pdir.mkdir(parents=True, exist_ok=True)
                prompts = make_prompts(held, args.n_prompts,
                                       args.prompt_chars or PROMPT_CHARS[ch])
                with open(pdir / f"{ch}.jsonl", "w", encoding="utf-8") as f:
                    for p in prompts:
                        f.write(json.dumps({"channel": ch, **p}, ensure_ascii=False) + "\n")
    # balanced tokenizer sample: up to TOKENIZER_SAMPLE_CHARS per channel, documents taken in
    # name-hash order (deterministic, spread over packages)
    with open(out / "tokenizer_sample.txt", "w", encoding="utf-8") as f:
        for ch in CHANNELS:
            rows = sorted((hashlib.sha256(n.encode()).hexdigest(), t) for n, t in docs[ch]
                          if not is_heldout(ch, n))
            size = 0
            for _, t in rows:
                if size >= TOKENIZER_SAMPLE_CHARS:
                    break
                f.write(t.rstrip("\n") + "\n\n")
                size += len(t)
    (out / "sources.json").write_text(json.dumps(summary, indent=1) + "\n")
    for ch, s in summary["channels"].items():
        print(f"{ch:10s} train {s['train_docs']:5d} docs {s['train_chars'] / 1e6:7.2f} MB chars"
              f" | held-out {s['heldout_docs']:4d} docs {s['heldout_chars'] / 1e6:6.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
