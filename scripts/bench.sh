#!/usr/bin/env bash
# scripts/bench.sh BUILD — what `make bench` executes: a small ds4-bench frontier sweep over
# data/promessi_sposi.txt on the default model (models/ds4-tiny.gguf, else the random tiny
# model that run_default.sh generates). CSV on stdout and in BUILD/bench/ds4-bench.csv.
# Override the sweep with CTX_START, CTX_MAX, STEP, GEN, THREADS.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CTX_START=${CTX_START:-256}
CTX_MAX=${CTX_MAX:-2048}
STEP=${STEP:-256}
GEN=${GEN:-64}
THREADS=${THREADS:-0}

find_bin() {
  for p in "$BUILD/bin/$1" "$BUILD/bench/$1" "$BUILD/tools/ds4-gguf/$1"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "bench.sh: '$1' not found under $BUILD (build it first: make build)" >&2
  return 1
}

BENCH=$(find_bin ds4-bench)
MODEL="$ROOT/models/ds4-tiny.gguf"
if [ ! -f "$MODEL" ]; then
  MODEL="$BUILD/models/ds4-tiny-random.gguf"
  if [ ! -f "$MODEL" ]; then
    GEN_TOOL=$(find_bin ds4-gguf)
    mkdir -p "$BUILD/models"
    "$GEN_TOOL" generate --profile tiny --quant q2 --seed 1 -o "$MODEL.tmp"
    mv "$MODEL.tmp" "$MODEL"
  fi
  echo "bench.sh: using the random tiny model $MODEL" >&2
fi
mkdir -p "$BUILD/bench"
CSV="$BUILD/bench/ds4-bench.csv"
echo "+ $BENCH -m $MODEL --prompt-file $ROOT/data/promessi_sposi.txt --ctx-start $CTX_START" \
     "--ctx-max $CTX_MAX --step-incr $STEP --gen-tokens $GEN -t $THREADS --csv $CSV" >&2
"$BENCH" -m "$MODEL" --prompt-file "$ROOT/data/promessi_sposi.txt" --ctx-start "$CTX_START" \
  --ctx-max "$CTX_MAX" --step-incr "$STEP" --gen-tokens "$GEN" -t "$THREADS" --csv "$CSV"
cat "$CSV"
