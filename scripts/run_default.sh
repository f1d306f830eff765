#!/usr/bin/env bash
# scripts/run_default.sh BUILD PROMPT N — what `make run` executes.
# Uses the bundled trained model models/ds4-tiny.gguf when present; otherwise generates a
# random tiny DS4-layout model into BUILD/models/ (once) and runs on that, so `make run` works
# before the trained model lands. Then: ds4 -m MODEL --raw -p PROMPT -n N (the tiny model is a
# base language model, not a chat model, so the prompt is continued as plain text).
set -euo pipefail
BUILD=${1:-build}
PROMPT=${2:-Once upon a time}
N=${3:-64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

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
echo "+ $DS4 -m $MODEL --raw -p \"$PROMPT\" -n $N" >&2
exec "$DS4" -m "$MODEL" --raw -p "$PROMPT" -n "$N"
