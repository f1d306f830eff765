#!/usr/bin/env bash
# scripts/bench_cuda_sweep.sh OUT [BUILD] — what `make bench-flash OUT=DIR` executes on a GPU
# machine: every figure of the full-shape Flash measurements (docs/CUDA.md "Measuring"), into
# one folder, with each step time-boxed (the whole sweep was ~6-8 minutes on an H100 with the
# 30-layer file before step 7, most of it the weight uploads; step 7 adds one upload, the
# drafter's generation once (~20 s on 2 cores here for 5.6 GB) and, by estimate, a few minutes
# of runs: run it alone with STEPS=spec under a 10-minute command limit).
#
# Steps (BUILD holds the CUDA build: ds4-gguf, ds4-bench, bench_verify, bench_cuda, and
# ds4-bench-spec + ds4-dspark-gguf for step 7):
#  1. the model: the full-shape Flash q2 file, `ds4-gguf generate --profile flash --quant q2
#     --sparse-experts 8 --route-all --layers N` (routed-expert holes read as zeros; routing
#     spreads over all 256 experts), reused when present. N = LAYERS, or by the device's free
#     memory: 43 (~81 GB of weights) from 120 GiB free (H200), else 30 (61 GB, what fits an H100
#     beside a session);
#  2. the roofline probe: `bench_cuda --roofline` (plain 16-byte-load read and D2D copy over
#     >= 4x L2) -> roofline.csv;
#  3. the decode frontier sweep: `ds4-bench --cuda`, frontiers CTX_START x2 .. CTX_MAX, GEN
#     greedy tokens each -> decode.csv;
#  4. the verify(r) sweep: `bench_verify --backend=cuda`, decode(1) and verify(1..8) from a
#     VERIFY_CTX-token frontier, best / median of ROUNDS, bytes per call by the op costs ->
#     verify.csv;
#  5. the op profiles (DS4_CUDA_GAP_PROFILE=1) -> profiles.log: one ds4-bench decode at a 1K
#     frontier (the real greedy loop: argmax + token read-back per token; its prefill too),
#     then bench_verify's decode(1) and verify(6), PROFILE_CALLS calls each;
#  6. long context: `ds4-bench --cuda --fill-ctx LONG_CTX` (default 1K,16K,128K,1M): per
#     context a fresh session filled SYNTHETICALLY to it (timing only: the row counters of that
#     many decodes over zero KV rows, no prefill), then LONG_GEN greedy tokens timed ->
#     longctx.csv (decode tokens/s, state bytes; a context whose session does not fit the free
#     device memory is a "skipped: ..." row with the bytes needed and free);
#  7. DSpark at full shape -> spec.csv + spec.log: `ds4-bench-spec --cuda --oracle ORACLE`
#     (default 0.9,0.7), the speculative cycle with the oracle proposer (a measurement tool:
#     drafts are the plain run's greedy continuation, each drafted position right with
#     probability h) on SPEC_PROMPTS prompts of each data/prompts channel, SPEC_GEN tokens
#     each: tokens/s against plain decoding, acceptance, accepted drafts and verify rows per
#     cycle, identity checked. In the same run, a drafter: MTP=FILE names a support GGUF for
#     the model; empty MTP (the default) generates a random Flash-width one for it,
#     `ds4-dspark-gguf generate --target MODEL --fill random` (random valid blocks: seconds;
#     cached beside the model as MODEL-dspark-random.gguf; its own time-boxed step
#     spec_drafter_gen), whose acceptance is ~0; MTP=none runs the oracle rows alone. With a
#     drafter, the cost calibration (`--calibrate`: decode(1), verify(n) and a proposal in
#     decode(1) units, '#' lines of spec.log; the cost gate then uses these device figures) and
#     the SPEC_POLICIES rows (default baseline,cost: at acceptance ~0, what the drafter's
#     proposals cost against plain decoding, and what the calibrated cost gate keeps) run too;
#  A. (only when STEPS names `ab`) the whole-token A/B of the kernel switches -> ab.csv: one
#     `ds4-bench --cuda` per entry of AB_CONFIGS (';'-separated flag sets, "" = the defaults;
#     default: the defaults, then the kernels before 2026-12-07 (the old defaults), then each
#     default switched off alone, the other chunk sizes and opt-in switches, then the defaults
#     again to show the noise) at an AB_CTX frontier (2048) with AB_GEN (16) greedy tokens:
#     prefill and decode tokens/s per config and the frontier hash, which must be the same for
#     every config (sweep.log says whether it is);
#  S. (only when STEPS names `switches`) the process-wide switches against each other on ONE
#     loaded model -> switches.txt: `bench_verify --ab=SWITCHES` (default: base, each opt-in
#     switch alone, then all of them) from an AB_CTX frontier, SWITCH_ROUNDS (20) interleaved
#     rounds of decode(1) and verify(6) per configuration: best / median / ratio, and whether
#     each configuration's logits are the first's bits (no model reload per configuration);
#  K. (only when STEPS names `kernels`; needs ncu) a decoded token's device time per kernel ->
#     kernels_ncu.csv (ncu --metrics gpu__time_duration.sum --csv over `ds4-bench --cuda
#     KERNEL_FLAGS`, a 64-token prompt and KERNEL_GEN (2) greedy tokens: every kernel's own
#     duration, no gaps) and kernels.txt / kernels.csv (tools/ncu_kernel_table.py: the last
#     forward by kernel: calls, µs each, share; compare two runs' CSVs with the same tool);
#  8. memory.csv: per step the peak device memory (nvidia-smi sampled every 200 ms) and the
#     session's context; the weights' size is in sweep.log ("weights on cuda").
# STEPS (default all) picks steps 2-7 by name: roofline,decode,verify,profiles,longctx,spec
# (the model is always made or reused), e.g. STEPS=longctx to run the long-context step alone;
# `ab`, `switches` and `kernels` run only when named (STEPS=kernels, STEPS=decode,ab, STEPS=switches).
# sweep.log holds every step's command, output tail, exit code and time. Nine files land in
# OUT, twelve with the three PNGs of tools/bench_plots.py OUT (matplotlib), run here when it is
# importable, else wherever the folder is copied (a GPU machine without network).
set -uo pipefail
OUT=${1:?usage: scripts/bench_cuda_sweep.sh OUT [BUILD]}
BUILD=${2:-build-cuda}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAYERS=${LAYERS:-auto}
MODEL_DIR=${MODEL_DIR:-$BUILD/models}
CTX_START=${CTX_START:-128}
CTX_MAX=${CTX_MAX:-8192}
GEN=${GEN:-32}
VERIFY_CTX=${VERIFY_CTX:-1024}
ROUNDS=${ROUNDS:-5}
PROFILE_CALLS=${PROFILE_CALLS:-16}
PROMPT=${PROMPT:-$ROOT/data/promessi_sposi.txt}
ORACLE=${ORACLE:-0.9,0.7}
SPEC_PROMPTS=${SPEC_PROMPTS:-2}
SPEC_GEN=${SPEC_GEN:-128}
SPEC_MAX_PROMPT=${SPEC_MAX_PROMPT:-256}
SPEC_POLICIES=${SPEC_POLICIES:-baseline,cost}
MTP=${MTP:-}
LONG_CTX=${LONG_CTX:-1K,16K,128K,1M}
LONG_GEN=${LONG_GEN:-16}
STEPS=${STEPS:-all}
KERNEL_GEN=${KERNEL_GEN:-2}
KERNEL_FLAGS=${KERNEL_FLAGS:-}
AB_CTX=${AB_CTX:-2048}
SWITCHES=${SWITCHES:-"base;no_lanes;products;fold_norm;products+fold_norm;fold_post;moe_tc"}
SWITCH_ROUNDS=${SWITCH_ROUNDS:-20}
AB_GEN=${AB_GEN:-16}
AB_CONFIGS=${AB_CONFIGS:-";--cuda-moe old --cuda-dense-rows tiles --no-cuda-pdl --no-cuda-batch-steps --prefill-chunk 32;--cuda-moe old;--cuda-dense-rows tiles;--no-cuda-pdl;--no-cuda-batch-steps;--prefill-chunk 32;--prefill-chunk 128;--cuda-attn fused;--cuda-graphs 1;--cuda-graphs 64;--cuda-hc-products;--cuda-fold-input-norm;--cuda-hc-products --cuda-fold-input-norm;--no-cuda-lanes;--cuda-fold-hc-post;--cuda-moe tc;"}

want() { [ "$STEPS" = all ] || [[ ",$STEPS," == *",$1,"* ]]; }
named() { [[ ",$STEPS," == *",$1,"* ]]; }  # steps that run only when named
# The largest context of a --fill-ctx list (K = 1024, M = 1048576), for memory.csv.
max_ctx() {
  local m=0 v n
  for v in ${1//,/ }; do
    case $v in
      *[kK]) n=$(( ${v%?} * 1024 )) ;;
      *[mM]) n=$(( ${v%?} * 1048576 )) ;;
      *) n=$v ;;
    esac
    [ "$n" -gt "$m" ] && m=$n
  done
  echo "$m"
}

mkdir -p "$OUT" "$MODEL_DIR"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/sweep.log"
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
: >"$LOG"
echo "step,context_tokens,peak_used_mib,idle_used_mib,seconds,exit" >"$OUT/memory.csv"

log() { echo "$*" | tee -a "$LOG" >&2; }

bin() {
  for p in "$BUILD/bin/$1" "$BUILD/bench/$1" "$BUILD/bench/kernels/$1" "$BUILD/tools/ds4-gguf/$1"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  log "bench_cuda_sweep: '$1' not found under $BUILD (make bench-flash builds it)"
  exit 1
}
GGUF=$(bin ds4-gguf); BENCH=$(bin ds4-bench); VERIFY=$(bin bench_verify); PROBE=$(bin bench_cuda)
SPEC=""  # step 7 is skipped (with a line in sweep.log) when ds4-bench-spec was not built
for p in "$BUILD/bin/ds4-bench-spec" "$BUILD/bench/ds4-bench-spec"; do [ -x "$p" ] && { SPEC=$p; break; }; done
DSPARK_GGUF=""  # step 7 without MTP: the drafter's generator (absent: the oracle rows alone)
for p in "$BUILD/bin/ds4-dspark-gguf" "$BUILD/tools/dspark-gguf/ds4-dspark-gguf"; do
  [ -x "$p" ] && { DSPARK_GGUF=$p; break; }
done

have_smi=0
command -v nvidia-smi >/dev/null && have_smi=1
mem_used() { [ $have_smi = 1 ] && nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1 || echo 0; }

# step NAME CONTEXT LIMIT_S OUTFILE CMD...: runs CMD under `timeout`, its stdout+stderr to
# OUTFILE (also appended to sweep.log), sampling the device memory meanwhile.
step() {
  local name=$1 ctx=$2 limit=$3 outfile=$4
  shift 4
  local idle; idle=$(mem_used)
  local mpid=""
  if [ $have_smi = 1 ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$TMPD/mem_$name" 2>/dev/null &
    mpid=$!
  fi
  log ""
  log "=== $name (limit ${limit}s): $*"
  local t0; t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$outfile" 2>&1
  local rc=$?
  local t1; t1=$(date +%s.%N)
  [ -n "$mpid" ] && { kill "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; }
  local peak=0
  [ -s "$TMPD/mem_$name" ] && peak=$(sort -n "$TMPD/mem_$name" | tail -1)
  local secs; secs=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
  tail -n 60 "$outfile" >>"$LOG"
  log "=== $name: exit $rc after ${secs}s, peak device memory ${peak} MiB (idle ${idle} MiB)"
  [ $rc = 124 ] && log "=== $name: TIMED OUT (raise the limit or shrink the step)"
  echo "$name,$ctx,$peak,$idle,$secs,$rc" >>"$OUT/memory.csv"
  return $rc
}

log "bench_cuda_sweep: $(date -u +%FT%TZ), git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
[ $have_smi = 1 ] && nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv | tee -a "$LOG" >&2

# 1. The model.
if [ "$LAYERS" = auto ]; then
  free_mib=$([ $have_smi = 1 ] && nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | head -1 || echo 0)
  if [ "${free_mib:-0}" -ge 122880 ]; then LAYERS=43; else LAYERS=30; fi
  log "layers: $LAYERS (device free memory ${free_mib} MiB)"
fi
MODEL="$MODEL_DIR/flash-q2-route-all-L$LAYERS.gguf"
if [ ! -f "$MODEL" ]; then
  step generate 0 600 "$TMPD/generate.log" "$GGUF" generate --profile flash --quant q2 --sparse-experts 8 \
    --route-all --layers "$LAYERS" -q -o "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL"
  [ -f "$MODEL" ] || { log "bench_cuda_sweep: generating the model failed"; exit 1; }
fi
log "model: $MODEL ($(du -h --apparent-size "$MODEL" | cut -f1) apparent, $(du -h "$MODEL" | cut -f1) on disk)"

# 2. The roofline probe.
want roofline && step roofline 0 120 "$TMPD/roofline.log" "$PROBE" --roofline --csv "$OUT/roofline.csv"

# 3. Decode frontier sweep (the longest context's memory peak).
if want decode; then
  step decode_sweep "$CTX_MAX" 300 "$TMPD/decode.log" "$BENCH" --cuda -v -m "$MODEL" --prompt-file "$PROMPT" \
    --ctx-start "$CTX_START" --ctx-max "$CTX_MAX" --step-mul 2 --gen-tokens "$GEN" --csv "$OUT/decode.csv"
  grep -h "weights on cuda" "$TMPD/decode.log" | tail -1 | sed 's/^/weights: /' | tee -a "$LOG" >&2
fi

# 4. verify(r) sweep.
want verify && step verify_sweep "$VERIFY_CTX" 240 "$TMPD/verify.log" "$VERIFY" --backend=cuda --model="$MODEL" \
  --ctx="$VERIFY_CTX" --rounds="$ROUNDS" --csv_out="$OUT/verify.csv"

# 5. Op profiles (the 1K frontier's memory peak, events included).
if want profiles; then
  step profile_decode 1024 240 "$TMPD/profile_decode.log" env DS4_CUDA_GAP_PROFILE=1 "$BENCH" --cuda -m "$MODEL" \
    --prompt-file "$PROMPT" --ctx-start 1024 --ctx-max 1024 --gen-tokens "$GEN" --csv "$TMPD/profile_decode.csv"
  step profile_verify "$VERIFY_CTX" 240 "$TMPD/profile_verify.log" "$VERIFY" --backend=cuda --cuda_profile \
    --model="$MODEL" --ctx="$VERIFY_CTX" --only_r=0,6 --only_calls="$PROFILE_CALLS"
  {
    echo "##### ds4-bench --cuda, DS4_CUDA_GAP_PROFILE=1: frontier 1024, $GEN greedy tokens (model $MODEL)"
    cat "$TMPD/profile_decode.log"
    echo
    echo "##### bench_verify --backend=cuda --cuda_profile: decode(1) then verify(6), $PROFILE_CALLS calls each," \
      "from a $VERIFY_CTX-token frontier (each call followed by a sync and a rollback)"
    cat "$TMPD/profile_verify.log"
  } >"$OUT/profiles.log"
fi

# 6. Long context (synthetic fill, timing only; the largest context's memory peak). One process:
# the sessions are made, measured and freed in list order, so a context that does not fit is
# skipped (its CSV row says why) and the others still run.
if want longctx; then
  step longctx "$(max_ctx "$LONG_CTX")" 420 "$TMPD/longctx.log" "$BENCH" --cuda -v -m "$MODEL" \
    --fill-ctx "$LONG_CTX" --gen-tokens "$LONG_GEN" --csv "$OUT/longctx.csv"
  grep -h "fill-ctx" "$TMPD/longctx.log" | sed 's/^/longctx: /' | tee -a "$LOG" >&2
  want decode || grep -h "weights on cuda" "$TMPD/longctx.log" | tail -1 | sed 's/^/weights: /' | tee -a "$LOG" >&2
fi

# 7. DSpark at full shape: the oracle rows, and the drafter's (MTP=FILE, else a generated random
# one; MTP=none: no drafter rows).
if want spec && [ -z "$SPEC" ]; then
  log "spec_oracle: ds4-bench-spec not found under $BUILD (it needs nlohmann_json at configure time): skipped"
elif want spec; then
  DRAFTER=""
  if [ "$MTP" = none ]; then
    log "spec: MTP=none: the oracle rows only"
  elif [ -n "$MTP" ]; then
    DRAFTER=$MTP
  elif [ -z "$DSPARK_GGUF" ]; then
    log "spec: ds4-dspark-gguf not found under $BUILD: no drafter, the oracle rows only"
  else
    DRAFTER="${MODEL%.gguf}-dspark-random.gguf"
    if [ ! -f "$DRAFTER" ]; then
      # The writer renames its temp file into place, so a killed run leaves no partial DRAFTER.
      step spec_drafter_gen 0 300 "$TMPD/spec_drafter_gen.log" "$DSPARK_GGUF" generate --target "$MODEL" \
        --fill random --seed 0 -o "$DRAFTER"
      rm -f "$DRAFTER".tmp.*
      [ -f "$DRAFTER" ] || { log "spec: generating the drafter failed: the oracle rows only"; DRAFTER=""; }
    fi
    [ -n "$DRAFTER" ] && log "drafter: $DRAFTER ($(du -h --apparent-size "$DRAFTER" | cut -f1))"
  fi
  if [ -n "$DRAFTER" ]; then
    SPEC_DRAFTER=(--mtp "$DRAFTER" --policies "$SPEC_POLICIES" --calibrate --calibrate-reps 10)
  else
    SPEC_DRAFTER=(--policies none)
  fi
  step spec_oracle "$((SPEC_MAX_PROMPT + SPEC_GEN))" 600 "$OUT/spec.log" "$SPEC" --cuda -m "$MODEL" "${SPEC_DRAFTER[@]}" \
    --oracle "$ORACLE" --prompts-dir "$ROOT/data/prompts" -n "$SPEC_PROMPTS" --gen-tokens "$SPEC_GEN" \
    --max-prompt-tokens "$SPEC_MAX_PROMPT" --csv "$OUT/spec.csv"
fi

# A. Whole-token A/B of the kernel switches (only when named).
if named ab; then
  IFS=';' read -r -a ab_list <<<"$AB_CONFIGS"
  [[ "$AB_CONFIGS" == *';' ]] && ab_list+=("")  # a trailing ';' is one more "" (the defaults)
  echo "config,ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend" \
    >"$OUT/ab.csv"
  ab_hashes=""
  for i in "${!ab_list[@]}"; do
    cfg=${ab_list[$i]}
    # shellcheck disable=SC2086  # the config is a list of flags
    step "ab_$i" "$AB_CTX" 240 "$TMPD/ab_$i.log" "$BENCH" --cuda $cfg -m "$MODEL" --prompt-file "$PROMPT" \
      --ctx-start "$AB_CTX" --ctx-max "$AB_CTX" --gen-tokens "$AB_GEN" --csv "$TMPD/ab_$i.csv"
    if [ -s "$TMPD/ab_$i.csv" ]; then
      tail -n +2 "$TMPD/ab_$i.csv" | sed "s|^|\"${cfg:-defaults}\",|" >>"$OUT/ab.csv"
      ab_hashes+="$(tail -n +2 "$TMPD/ab_$i.csv" | awk -F, '{ print $7 }') "
    fi
  done
  n_distinct=$(echo "$ab_hashes" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)
  log "ab: ${#ab_list[@]} configs, $n_distinct distinct frontier hash(es) (1 = every switch kept the bits)"
fi

# S. The process-wide switches in one process (only when named).
if named switches; then
  step switches "$AB_CTX" 300 "$OUT/switches.txt" "$VERIFY" --backend=cuda --model="$MODEL" --ctx="$AB_CTX" \
    --rounds="$SWITCH_ROUNDS" --ab="$SWITCHES"
  grep -A12 "bench_verify --ab" "$OUT/switches.txt" | tee -a "$LOG" >&2 || true
fi

# K. A decoded token's device time per kernel (only when named; needs ncu): ncu times every
# kernel of a 64-token prefill and KERNEL_GEN greedy tokens one at a time, then
# tools/ncu_kernel_table.py tables the last forward.
if named kernels; then
  if command -v ncu >/dev/null 2>&1; then
    # shellcheck disable=SC2086  # KERNEL_FLAGS is a list of flags
    step kernels 64 300 "$OUT/kernels_ncu.csv" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      "$BENCH" --cuda $KERNEL_FLAGS -m "$MODEL" --prompt-file "$PROMPT" --ctx-start 64 --ctx-max 64 \
      --gen-tokens "$KERNEL_GEN"
    python3 "$ROOT/tools/ncu_kernel_table.py" "$OUT/kernels_ncu.csv" --csv "$OUT/kernels.csv" >"$OUT/kernels.txt" 2>&1
    head -n 14 "$OUT/kernels.txt" | tee -a "$LOG" >&2
  else
    log "kernels: ncu is not installed here (the CUDA toolkit's Nsight Compute)"
  fi
fi

# 8. Plots and the summary, where matplotlib is installed.
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 "$ROOT/tools/bench_plots.py" "$OUT" 2>&1 | tee -a "$LOG" >&2
else
  log "plots: matplotlib is not installed here; run: python3 tools/bench_plots.py $OUT"
fi
log "bench_cuda_sweep: done: $OUT ($(ls "$OUT" | tr '\n' ' '))"
