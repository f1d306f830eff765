#!/usr/bin/env bash
# scripts/bench_spec.sh BUILD — what `make bench-spec` executes (issue #5): the DSpark channel
# benchmark (BUILD/bin/ds4-bench-spec) on data/prompts/{structured,code,english,italian}.jsonl,
# then the repeated n-gram rates of each channel (tools/ngram_similarity/ngram_similarity.py)
# of the prompts used and of the greedy outputs.
#
# Models: models/ds4-tiny.gguf + models/ds4-tiny-dspark.gguf when both exist. Otherwise random
# stand-ins are generated into BUILD/models and a loud warning says so (a random drafter only
# measures overhead: it never gets drafts accepted). A shipped target without a shipped drafter
# gets a random drafter shaped for it.
# Override with env: MODEL, MTP, PROMPTS (per channel, 4), GEN (128), MAX_PROMPT (512),
# CHANNELS, POLICIES (default: all eight presets, the engine's default costlookup included),
# THREADS (0 = all), CALIBRATE (1: measure this machine's cost-gate costs first, as
# `ds4 --dspark-calibrate`, so the cost* policies price verifies and proposals for the machine
# and thread count they run on; 0: the compiled-in 2-core costs), BENCH_ARGS (extra flags).
# Outputs: table on stdout; BUILD/bench/spec_channels.csv; BUILD/bench/spec_outputs/<channel>.jsonl.
# Exit status: the benchmark's (1 when any DSpark output differs from the plain output).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROMPTS=${PROMPTS:-4}
GEN=${GEN:-128}
MAX_PROMPT=${MAX_PROMPT:-512}
CHANNELS=${CHANNELS:-structured,code,english,italian}
POLICIES=${POLICIES:-baseline,fold,grid,backoff,margin,all,costall,costlookup}
THREADS=${THREADS:-0}
CALIBRATE=${CALIBRATE:-1}
BENCH_ARGS=${BENCH_ARGS:-}
PY=${PYTHON:-python3}

find_bin() {
  for p in "$BUILD/bin/$1" "$BUILD/bench/$1" "$BUILD/tools/ds4-gguf/$1" "$BUILD/tools/dspark-gguf/$1"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "bench_spec.sh: '$1' not found under $BUILD (build it first: make build)" >&2
  return 1
}

loud() {
  echo "########################################################################" >&2
  for line in "$@"; do echo "## $line" >&2; done
  echo "########################################################################" >&2
}

BENCH=$(find_bin ds4-bench-spec)
MODEL=${MODEL:-}
MTP=${MTP:-}
if [ -z "$MODEL" ]; then
  if [ -f "$ROOT/models/ds4-tiny.gguf" ]; then
    MODEL="$ROOT/models/ds4-tiny.gguf"
  else
    MODEL="$BUILD/models/ds4-tiny-random.gguf"
    if [ ! -f "$MODEL" ]; then
      mkdir -p "$BUILD/models"
      "$(find_bin ds4-gguf)" generate --profile tiny --quant q2 --seed 1 -o "$MODEL.tmp" >&2
      mv "$MODEL.tmp" "$MODEL"
    fi
    loud "models/ds4-tiny.gguf is MISSING: using the RANDOM tiny target $MODEL"
  fi
fi
if [ -z "$MTP" ]; then
  if [ "$MODEL" = "$ROOT/models/ds4-tiny.gguf" ] && [ -f "$ROOT/models/ds4-tiny-dspark.gguf" ]; then
    MTP="$ROOT/models/ds4-tiny-dspark.gguf"
  else
    # A random drafter shaped for the chosen target (regenerated when the target is newer).
    MTP="$BUILD/models/$(basename "$MODEL" .gguf)-random-dspark.gguf"
    if [ ! -f "$MTP" ] || [ "$MODEL" -nt "$MTP" ]; then
      mkdir -p "$BUILD/models"
      "$(find_bin ds4-dspark-gguf)" generate --target "$MODEL" --seed 3 -o "$MTP.tmp" >&2
      mv "$MTP.tmp" "$MTP"
    fi
    loud "models/ds4-tiny-dspark.gguf is MISSING (or the target is not the shipped one):" \
         "using the RANDOM drafter $MTP" \
         "acceptance will be ~0: the figures below measure overhead, not speed-up"
  fi
fi

OUT="$BUILD/bench"
mkdir -p "$OUT/spec_outputs"
rm -f "$OUT/spec_outputs"/*.jsonl "$OUT/spec_channels.csv"  # no stale results
CSV="$OUT/spec_channels.csv"
CMD=("$BENCH" -m "$MODEL" --mtp "$MTP" --prompts-dir "$ROOT/data/prompts" --channels "$CHANNELS"
     --policies "$POLICIES" -n "$PROMPTS" --gen-tokens "$GEN" --max-prompt-tokens "$MAX_PROMPT"
     -t "$THREADS" --csv "$CSV" --outputs-dir "$OUT/spec_outputs")
[ "$CALIBRATE" = 1 ] && CMD+=(--calibrate)
# shellcheck disable=SC2206
[ -n "$BENCH_ARGS" ] && CMD+=($BENCH_ARGS)
echo "+ ${CMD[*]}" >&2
rc=0
"${CMD[@]}" || rc=$?

# Repeated n-gram rates (n = 1..4) per channel: the prompts used (words) and the greedy
# outputs (token ids), computed by the shared tool; this script only picks the mean lines.
NGRAM="$ROOT/tools/ngram_similarity/ngram_similarity.py"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo
echo "# repeated n-gram rates per channel (ngram_similarity.py mean over the prompts used)"
printf '%-11s %-28s %-28s\n' channel "prompt words n=1..4" "output tokens n=1..4"
IFS=',' read -r -a CH_LIST <<< "$CHANNELS"
for ch in "${CH_LIST[@]}"; do
  head -n "$PROMPTS" "$ROOT/data/prompts/$ch.jsonl" > "$TMP/$ch.jsonl"
  p_mean=$("$PY" "$NGRAM" "$TMP/$ch.jsonl" | awk '$1 == "mean" {print $2, $3, $4, $5}')
  o_mean="-"
  if [ -f "$OUT/spec_outputs/$ch.jsonl" ]; then
    o_mean=$("$PY" "$NGRAM" --tokens --field output_tokens "$OUT/spec_outputs/$ch.jsonl" |
             awk '$1 == "mean" {print $2, $3, $4, $5}')
  fi
  printf '%-11s %-28s %-28s\n' "$ch" "$p_mean" "$o_mean"
done
echo "# CSV: $CSV ; outputs: $OUT/spec_outputs/"
exit "$rc"
