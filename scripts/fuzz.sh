#!/usr/bin/env bash
# scripts/fuzz.sh — build and run the libFuzzer targets (libFuzzer + ASan + UBSan):
# gguf_fuzz (GGUF parser, seeds tests/gguf/corpus) and tokenizer_fuzz (BPE + pre-tokenizer).
#
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh      (default 600 s per target, one job)
#   FUZZ_TARGETS=gguf_fuzz bash scripts/fuzz.sh
#
# Configures build-fuzz with clang, -DDS4_FUZZ=ON -DDS4_SANITIZE=ON (so the library under test
# is instrumented too), builds gguf_fuzz, runs it on a scratch copy of the committed seed
# corpus tests/gguf/corpus, prints the execution count and exits non-zero on any crash
# (the crashing input is left in build-fuzz/fuzz-artifacts/).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FUZZ_BUILD:-$ROOT/build-fuzz}"
SECONDS_TO_RUN="${FUZZ_SECONDS:-600}"
JOBS="${FUZZ_BUILD_JOBS:-2}"

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDS4_FUZZ=ON -DDS4_SANITIZE=ON >/dev/null
TARGETS="${FUZZ_TARGETS:-gguf_fuzz tokenizer_fuzz}"
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$JOBS" --target $TARGETS

run_target() {
local target="$1" bin seeds
case "$target" in
  gguf_fuzz) bin="$BUILD/fuzz/gguf_fuzz"; seeds="$ROOT/tests/gguf/corpus" ;;
  tokenizer_fuzz) bin="$(find "$BUILD" -name tokenizer_fuzz -type f -perm -u+x | head -1)"
                  seeds="$ROOT/tests/tokenizer" ;;
  *) echo "unknown fuzz target $target" >&2; return 2 ;;
esac

local WORK="$BUILD/fuzz-corpus-$target"
local ARTIFACTS="$BUILD/fuzz-artifacts"
mkdir -p "$WORK" "$ARTIFACTS"
if [[ $target == gguf_fuzz ]]; then cp -n "$seeds"/*.gguf "$WORK"/ 2>/dev/null || true; fi
local LOG="$BUILD/$target.log"

echo "fuzzing $target for ${SECONDS_TO_RUN}s (log: $LOG)"
set +e
"$bin" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" \
  "$WORK" "$seeds" >"$LOG" 2>&1
rc=$?
set -e
execs=$(grep -E '^stat::number_of_executed_units' "$LOG" | awk '{print $2}' | tail -1)
tail -n 5 "$LOG"
echo "executions: ${execs:-unknown}"
if [[ $rc -ne 0 ]]; then
  echo "FUZZER FAILED (exit $rc); crashing input in $ARTIFACTS" >&2
  grep -E 'ERROR|SUMMARY|runtime error' "$LOG" | head -n 20 >&2 || true
  return 1
fi
echo "$target OK: no crash in ${SECONDS_TO_RUN}s"
}

for t in $TARGETS; do run_target "$t"; done
