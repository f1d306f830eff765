#!/usr/bin/env bash
# scripts/run_default.sh BUILD [PROMPT] [N] — what `make run` executes.
#
# Without PROMPT it continues a held-out benchmark prompt: data/prompts/structured.jsonl id 13
# (the structured channel, ISO 639-3 language records from Debian's iso-codes package). Every
# prompt in data/prompts/ is cut from the held-out split of tools/corpus/build_corpus.py, so the
# bundled model never trained on this text; the structured channel is the one it models best
# (held-out perplexity 3.15, models/README.md), and id 13 is a prompt of that channel whose
# greedy continuation repeats no record (id 14 was, until the 64-lane dot order of 2026-12-06
# changed the bits). Greedy (--temp 0), so every run prints the same text.
# With PROMPT, that text is continued instead (also greedy). N: tokens to generate (default 131).
#
# Model: the bundled trained models/ds4-tiny.gguf when present; otherwise a random tiny
# DS4-layout model generated into BUILD/models/ (its text is noise).
set -euo pipefail
BUILD=${1:-build}
PROMPT=${2:-}
N=${3:-}
N=${N:-131}  # 131: the greedy continuation ends after its third whole record
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELD_OUT_FILE="$ROOT/data/prompts/structured.jsonl"
HELD_OUT_ID=13

find_bin() {  # find_bin NAME: the built binary, wherever the target puts it
  for p in "$BUILD/bin/$1" "$BUILD/cli/$1" "$BUILD/bench/$1" "$BUILD/tools/$1/$1" \
           "$BUILD/tools/ds4-gguf/$1"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "run_default.sh: '$1' not found under $BUILD (build it first: make build)" >&2
  return 1
}

DS4=$(find_bin ds4)
MODEL="$ROOT/models/ds4-tiny.gguf"
if [ ! -f "$MODEL" ]; then
  MODEL="$BUILD/models/ds4-tiny-random.gguf"
  if [ ! -f "$MODEL" ]; then
    GEN=$(find_bin ds4-gguf)
    mkdir -p "$BUILD/models"
    echo "run_default.sh: models/ds4-tiny.gguf not found; generating a random tiny model:" >&2
    echo "  $GEN generate --profile tiny --quant q2 --seed 1 -o $MODEL" >&2
    "$GEN" generate --profile tiny --quant q2 --seed 1 -o "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
  fi
  echo "run_default.sh: using the RANDOM tiny model $MODEL (its text is noise)" >&2
fi

SHOWN=${MODEL#"$PWD"/}  # the model path as typed from the current directory (make: the repo root)
if [ -n "$PROMPT" ]; then
  echo "+ $DS4 -m $SHOWN --raw --temp 0 -p \"$PROMPT\" -n $N" >&2
  exec "$DS4" -m "$MODEL" --raw --temp 0 -p "$PROMPT" -n "$N"
fi

# The held-out prompt, extracted from its JSONL line into a file for --prompt-file.
PROMPT_FILE="$BUILD/run_default_prompt.txt"
python3 - "$HELD_OUT_FILE" "$HELD_OUT_ID" "$PROMPT_FILE" <<'EOF'
import json, sys
path, want, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, encoding="utf-8") as f:
    for line in f:
        rec = json.loads(line)
        if rec["id"] == want:
            with open(out, "w", encoding="utf-8") as g:
                g.write(rec["text"])
            break
    else:
        sys.exit(f"run_default.sh: no prompt with id {want} in {path}")
EOF
{
  echo "prompt: data/prompts/structured.jsonl id $HELD_OUT_ID (held-out text, never trained on)," \
       "$(wc -l < "$PROMPT_FILE") JSON records; its last two lines:"
  tail -n 2 "$PROMPT_FILE"
  echo "+ $DS4 -m $SHOWN --raw --temp 0 --prompt-file $PROMPT_FILE -n $N"
  echo "continuation:"
} >&2
exec "$DS4" -m "$MODEL" --raw --temp 0 --prompt-file "$PROMPT_FILE" -n "$N"
