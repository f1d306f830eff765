#!/usr/bin/env bash
# scripts/speed_table.sh [BUILD] — the README's Speed table, from ds4-bench runs on this machine.
#
# Prints a Markdown table (stdout; progress and the commands run on stderr) with prefill and
# decode tokens/s for
#   1. the bundled tiny model (models/ds4-tiny.gguf) at two prompt lengths, and
#   2. a generated full-shape DeepSeek V4 Flash file (43 layers, 256 experts, q2 layout) whose
#      routed experts are filled for only SPARSE of the 256 per layer (the others are file holes
#      and routing is biased to the filled ones), so it fits a small disk and page cache while
#      every token still reads what a real q2 token reads: all non-routed weights + 6 experts in
#      each of 43 layers (~9.6 GB). Generated once into BUILD/models/ (~10.6 GB written).
# with the machine named: CPU model and logical CPUs (/proc/cpuinfo), the kernel path that
# --isa auto picks, the thread count, and the load average when the run started (a loaded
# machine gives lower figures). Regenerate it whenever a backend changes.
#
# Environment: THREADS (default: all logical CPUs), FULL=0 skips the full-shape rows,
# TINY_CTX (default "512 2048"), TINY_GEN (128), FULL_CTX (32), FULL_GEN (4), SPARSE (6),
# BACKEND (cpu; cuda once it exists), PROMPT_FILE (data/promessi_sposi.txt).
# Prefill tokens/s is ctx tokens over the prefill time from an empty context; decode tokens/s is
# GEN greedy tokens over their time, right after that prefill (ds4-bench's CSV columns).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-$(nproc)}
FULL=${FULL:-1}
TINY_CTX=${TINY_CTX:-512 2048}
TINY_GEN=${TINY_GEN:-128}
FULL_CTX=${FULL_CTX:-32}
FULL_GEN=${FULL_GEN:-4}
SPARSE=${SPARSE:-6}
BACKEND=${BACKEND:-cpu}
PROMPT_FILE=${PROMPT_FILE:-$ROOT/data/promessi_sposi.txt}

find_bin() {  # find_bin NAME: the built binary, wherever the target puts it
  for p in "$BUILD/bin/$1" "$BUILD/bench/$1" "$BUILD/tools/ds4-gguf/$1"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "speed_table.sh: '$1' not found under $BUILD (build it: cmake --build $BUILD --target $1)" >&2
  return 1
}
BENCH=$(find_bin ds4-bench)

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || true)
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
# The same test as backend/cpu/kernels.cpp cpu_has_avx512() / cpu_has_avx2().
if has avx2 && has f16c && has avx512f && has avx512bw && has avx512vl && has avx512dq &&
   has avx512_vnni; then
  isa=avx512
elif has avx2 && has f16c; then
  isa=avx2
else
  isa=scalar
fi
load=$(cut -d' ' -f1-3 /proc/loadavg)

# bench MODEL CTX GEN: one ds4-bench frontier; prints "prefill_tps gen_tps".
bench() {
  local csv="$BUILD/speed/bench.csv"
  echo "+ $BENCH -m $1 --$BACKEND -t $THREADS --prompt-file $PROMPT_FILE --ctx-start $2" \
       "--ctx-max $2 --gen-tokens $3 --csv $csv" >&2
  "$BENCH" -m "$1" "--$BACKEND" -t "$THREADS" --prompt-file "$PROMPT_FILE" --ctx-start "$2" \
    --ctx-max "$2" --gen-tokens "$3" --csv "$csv" >&2
  awk -F, 'NR == 2 { print $3, $5 }' "$csv"
}

mkdir -p "$BUILD/speed"
rows=()
for ctx in $TINY_CTX; do
  out=$(bench "$ROOT/models/ds4-tiny.gguf" "$ctx" "$TINY_GEN")
  read -r p d <<< "$out"
  rows+=("| tiny (\`models/ds4-tiny.gguf\`, 34.5M params, q2) | $ctx | $p | $TINY_GEN | $d |")
done

if [ "$FULL" = 1 ]; then
  GEN_TOOL=$(find_bin ds4-gguf)
  FLASH="$BUILD/models/flash-q2-sparse$SPARSE.gguf"
  if [ ! -f "$FLASH" ]; then
    mkdir -p "$BUILD/models"
    echo "+ $GEN_TOOL generate --profile flash --quant q2 --sparse-experts $SPARSE --fill random" \
         "--seed 1 -o $FLASH" >&2
    "$GEN_TOOL" generate --profile flash --quant q2 --sparse-experts "$SPARSE" --fill random \
      --seed 1 -o "$FLASH.tmp" >&2
    mv "$FLASH.tmp" "$FLASH"
  fi
  # A short warm-up run first pages in what a token reads, so the row measures compute and
  # memory, not the first read from disk (reading the whole file would also read ~70 GB of holes).
  echo "warm-up:" >&2
  bench "$FLASH" 8 1 > /dev/null
  out=$(bench "$FLASH" "$FULL_CTX" "$FULL_GEN")
  read -r p d <<< "$out"
  rows+=("| full-shape Flash q2, generated (\`--sparse-experts $SPARSE\`) | $FULL_CTX | $p | $FULL_GEN | $d |")
fi

echo "Machine: ${cpu_model:-unknown CPU}, $(nproc) logical CPUs, $isa kernels (\`--isa auto\`)," \
     "backend $BACKEND, $THREADS threads; load average at start: $load."
echo "Produced by \`scripts/speed_table.sh\` ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))."
echo
echo "| model | prompt tokens | prefill tokens/s | generated tokens | decode tokens/s |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
