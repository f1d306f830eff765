#!/usr/bin/env bash
# tests/cli/cli_checks.sh — end-to-end checks of `ds4` and `ds4-bench` on a generated tiny
# model. Usage: cli_checks.sh CHECK DS4 DS4_BENCH MODEL SOURCE_DIR WORK_DIR
# Each CHECK exits 0 on success and prints what differed otherwise.
set -u
check=$1 ds4=$2 bench=$3 model=$4 src=$5 work=$6
mkdir -p "$work"
out="$work/$check.out" err="$work/$check.err"

die() { echo "FAIL [$check]: $*"; echo "--- stdout"; cat "$out" 2>/dev/null | head -40;
        echo "--- stderr"; cat "$err" 2>/dev/null | head -40; exit 1; }

case "$check" in
  oneshot)
    "$ds4" -m "$model" -p "Once upon a time" -n 8 --temp 0 -t 2 >"$out" 2>"$err" ||
      die "exit code $?"
    [ "$(wc -c <"$out")" -gt 1 ] || die "no text on stdout"
    grep -q "generation:" "$err" || die "no speed report on stderr"
    grep -q "prefill:" "$err" || die "no prefill report on stderr"
    ;;
  deterministic)
    "$ds4" -m "$model" -p "La storia comincia" -n 16 --temp 0 -t 1 >"$out" 2>"$err" ||
      die "first run exit $?"
    "$ds4" -m "$model" -p "La storia comincia" -n 16 --temp 0 -t 2 >"$out.2" 2>>"$err" ||
      die "second run exit $?"
    cmp -s "$out" "$out.2" || die "greedy outputs differ: $(od -c "$out" | head -3) vs $(od -c "$out.2" | head -3)"
    # Sampled output with a fixed seed is reproducible too.
    "$ds4" -m "$model" -p "hello" -n 16 --temp 1 --seed 7 >"$out.3" 2>>"$err" || die "seeded run exit $?"
    "$ds4" -m "$model" -p "hello" -n 16 --temp 1 --seed 7 >"$out.4" 2>>"$err" || die "seeded run 2 exit $?"
    cmp -s "$out.3" "$out.4" || die "seeded outputs differ"
    ;;
  unknown_flag)
    "$ds4" -m "$model" -p hi --frobnicate >"$out" 2>"$err" && die "exit 0 on an unknown flag"
    grep -q -- "unknown flag '--frobnicate'" "$err" || die "message does not name the flag"
    "$bench" --no-such-flag >"$out" 2>"$err" && die "ds4-bench: exit 0 on an unknown flag"
    grep -q -- "--no-such-flag" "$err" || die "ds4-bench: message does not name the flag"
    ;;
  help)
    "$ds4" --help >"$out" 2>"$err" || die "--help exit $?"
    for s in --model DS4_MODEL --ctx DS4_CTX --threads DS4_THREADS --nothink --dspark --backend DS4_BACKEND \
             --device DS4_DEVICE --cpu --cuda --isa DS4_CPU_ISA --f32-activations DS4_F32_ACTIVATIONS; do
      grep -q -- "$s" "$out" || die "--help does not mention $s"
    done
    ;;
  repl)
    # Multi-turn chat extends the live session: the second turn prefills only its own
    # tokens (previous EOS + user turn + generation prefix), far fewer than the first.
    printf 'hello there, how are you\n/nothink\nagain\n/bogus\n/ctx 8\nthis turn cannot fit in eight tokens at all\n/quit\n' |
      "$ds4" -m "$model" -i -n 4 --temp 0 >"$out" 2>"$err" || die "exit $?"
    [ "$(grep -o 'ds4> ' "$out" | wc -l)" -ge 7 ] || die "expected 7 prompts"
    grep -q "thinking mode off" "$out" || die "/nothink not acknowledged"
    grep -q "unknown command '/bogus'" "$out" || die "/bogus not reported"
    grep -q "new conversation, context 8 tokens" "$out" || die "/ctx not applied"
    grep -q "context full" "$out" || die "no context-full message for the long turn"
    first=$(grep -m1 '^prefill:' "$err" | sed 's/prefill: \([0-9]*\) tokens.*/\1/')
    second=$(grep '^prefill:' "$err" | sed -n 2p | sed 's/prefill: \([0-9]*\) tokens.*/\1/')
    [ -n "$first" ] && [ -n "$second" ] || die "missing speed reports"
    [ "$second" -lt "$first" ] && [ "$second" -le 8 ] ||
      die "second turn prefilled $second tokens (first: $first): history was re-sent"
    ;;
  missing_model)
    "$ds4" -m "$work/no/such/model.gguf" -p hi >"$out" 2>"$err" && die "exit 0 on a missing model"
    grep -q "$work/no/such/model.gguf" "$err" || die "message does not name the path"
    ;;
  ctx_too_small)
    prompt=$(head -c 2000 "$src/data/promessi_sposi.txt")
    "$ds4" -m "$model" --ctx 16 -p "$prompt" -n 4 >"$out" 2>"$err" && die "exit 0 with prompt > ctx"
    grep -qi "context" "$err" || die "message does not mention the context"
    ;;
  ctx_too_big)
    "$ds4" -m "$model" --ctx 1000000000 -p hi -n 1 >"$out" 2>"$err" && die "exit 0 with a huge context"
    grep -q "ds4: error:" "$err" || die "no error message"
    grep -q "1000000000" "$err" || die "message does not name the requested context"
    [ "$(grep -c . "$err")" -eq 1 ] || die "expected one message line"
    ;;
  not_gguf)
    printf 'this is not a gguf file\n' >"$work/not_a_model.gguf"
    "$ds4" -m "$work/not_a_model.gguf" -p hi >"$out" 2>"$err" && die "exit 0 on a non-GGUF file"
    grep -q "ds4: error:" "$err" || die "no error message"
    ;;
  bench)
    for run in t1 t2 t2b; do
      t=${run#t}; t=${t%b}
      "$bench" -m "$model" --prompt-file "$src/data/promessi_sposi.txt" --ctx-start 64 \
        --ctx-max 192 --step-incr 64 --gen-tokens 8 -t "$t" --csv "$work/bench_$run.csv" \
        >"$out" 2>"$err" || die "ds4-bench -t $t exit $?"
      f="$work/bench_$run.csv"
      [ "$(head -1 "$f")" = "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend" ] ||
        die "bad header: $(head -1 "$f")"
      # The backend column is the start-up line's description, quoted (it holds commas).
      line=$(grep '^ds4-bench: backend ' "$err") || die "no backend line on stderr"
      [ "$(tail -3 "$f" | sed 's/^[^"]*"\(.*\)"$/\1/' | sort -u)" = "${line#ds4-bench: backend }" ] ||
        die "backend column differs from '$line': $(cat "$f")"
      [ "$(wc -l <"$f")" -eq 4 ] || die "expected 3 rows, got: $(cat "$f")"
      [ "$(cut -d, -f1 "$f" | tail -3 | tr '\n' ' ')" = "64 128 192 " ] || die "frontiers: $(cat "$f")"
      [ "$(cut -d, -f4 "$f" | tail -3 | tr '\n' ' ')" = "8 8 8 " ] || die "gen_tokens: $(cat "$f")"
      cut -d, -f7 "$f" | tail -3 | grep -qvE '^[0-9a-f]{64}$' && die "bad sha column: $(cat "$f")"
      cut -d, -f7 "$f" | tail -3 >"$work/sha_$run"
    done
    [ "$(sort -u "$work/sha_t1" | wc -l)" -eq 3 ] || die "frontier hashes should differ per frontier"
    cmp -s "$work/sha_t2" "$work/sha_t2b" || die "logits hashes differ across two runs"
    cmp -s "$work/sha_t1" "$work/sha_t2" || die "logits hashes differ between -t 1 and -t 2"
    ;;
  bench_fill)
    # --fill-ctx on the shipped tiny model: one synthetic row per context (prefill 0, 'synthetic'
    # hash, gen_tokens decoded, state bytes growing with c), a context too large for memory
    # skipped with the bytes needed, and clear errors for bad lists and flag mixes.
    m="$src/models/ds4-tiny.gguf" f="$work/fill.csv"
    "$bench" -m "$m" --fill-ctx 64,1K,4k,1000M --gen-tokens 4 -t 2 --csv "$f" >"$out" 2>"$err" ||
      die "ds4-bench --fill-ctx exit $?"
    [ "$(head -1 "$f")" = "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend" ] ||
      die "bad header: $(head -1 "$f")"
    [ "$(wc -l <"$f")" -eq 5 ] || die "expected 4 rows, got: $(cat "$f")"
    [ "$(cut -d, -f1 "$f" | tail -4 | tr '\n' ' ')" = "64 1024 4096 1048576000 " ] || die "contexts: $(cat "$f")"
    [ "$(cut -d, -f2,4,7 "$f" | sed -n 2,4p | sort -u)" = "0,4,synthetic" ] || die "fill rows: $(cat "$f")"
    awk -F, 'NR >= 2 && NR <= 4 && !($5 > 0) { exit 1 }' "$f" || die "gen_tps not positive: $(cat "$f")"
    # State bytes grow with c; per token they approach the tiny shape's KV growth (780 bytes with
    # f32 rows, 390 with f16, 201 with FP8 compressed and FP4 indexer rows: 3 ratio-4 layers x
    # (194 / 4 + 17) + 3 ratio-128 layers x 194 / 128) + 4 (token id) from above (the raw windows
    # and states are fixed).
    awk -F, 'NR == 3 && !($6 > prev) { exit 1 } NR == 4 && !($6 > prev && $6 / $1 > 205 && $6 / $1 < 1200) { exit 1 }
             { prev = $6 }' "$f" || die "kvcache_bytes: $(cat "$f")"
    line=$(grep '^ds4-bench: backend ' "$err") || die "no backend line on stderr"
    [ "$(tail -4 "$f" | sed 's/^.*,"\([^"]*\)"$/\1/' | sort -u)" = "${line#ds4-bench: backend }" ] ||
      die "backend column differs from '$line': $(cat "$f")"
    tail -1 "$f" | grep -q '^1048576000,0,0.00,0,0.00,0,"skipped: .*needs .*MiB' || die "no skip row: $(tail -1 "$f")"
    grep -q "fill-ctx 1048576000: skipped" "$err" || die "skip not reported on stderr"
    grep -q "fill-ctx 4096: .* tokens/s" "$err" || die "no speed line on stderr"
    "$bench" --help >"$out" 2>"$err" || die "--help exit $?"
    grep -q -- "--fill-ctx" "$out" || die "--help does not list --fill-ctx"
    grep -q "MEANINGLESS" "$out" || die "--help does not say the outputs are meaningless"
    for bad in "--fill-ctx 12x" "--fill-ctx 1K,,2K" "--fill-ctx 0" "--fill-ctx 4000M" \
               "--fill-ctx 1K --gen-tokens 0" "--fill-ctx 1K --prompt-file $src/data/promessi_sposi.txt"; do
      # shellcheck disable=SC2086
      "$bench" -m "$m" $bad >"$out" 2>"$err"
      rc=$?
      [ $rc -ne 0 ] && [ $rc -lt 128 ] || die "'$bad': exit $rc (want a clean error)"
      grep -q -- "--fill-ctx" "$err" || die "'$bad': message does not name --fill-ctx: $(cat "$err")"
    done
    ;;
  bench_dump)
    rm -rf "$work/dump"
    "$bench" -m "$model" --prompt-file "$src/data/promessi_sposi.txt" --ctx-start 32 \
      --ctx-max 64 --step-mul 2 --gen-tokens 0 --dump-frontier-logits-dir "$work/dump" \
      >"$out" 2>"$err" || die "exit $?"
    [ "$(wc -l <"$out")" -eq 3 ] || die "expected 2 rows"
    for ctx in 32 64; do
      f="$work/dump/frontier_0000$ctx.logits.f32"
      [ -f "$f" ] || die "missing $f"
      want=$(grep "^$ctx," "$out" | cut -d, -f7)
      got=$(sha256sum "$f" | cut -d' ' -f1)
      [ "$want" = "$got" ] || die "dump sha $got != CSV sha $want"
    done
    ;;
  dspark_policy)
    # The shipped target + drafter: every preset gives plain greedy's text; the default preset
    # is costall (its cost gate shows in the stats); a bad name is one clear error.
    m="$src/models/ds4-tiny.gguf" d="$src/models/ds4-tiny-dspark.gguf"
    p='{"alpha_2": "IT", "alpha_3": "ITA", "name": "Italy", "numeric": "380"}, {"alpha_2": '
    "$ds4" -m "$m" --raw -p "$p" -n 48 -t 2 --temp 0 >"$out" 2>"$err" || die "plain exit $?"
    "$ds4" -m "$m" --mtp "$d" --dspark --dspark-stats --raw -p "$p" -n 48 -t 2 --temp 0 >"$out.def" 2>"$err.def" ||
      die "default preset exit $?"
    cmp -s "$out" "$out.def" || die "default preset output differs from plain"
    grep -q "dspark: policy fold=1 grid=3 backoff=1 margin=2 cost_gate=1 .*fold_partial=1" "$err.def" ||
      die "default preset is not costall: $(grep 'dspark: policy' "$err.def")"
    # --dspark-fold-partial 0 overrides the preset's fold after partial accepts (same text).
    "$ds4" -m "$m" --mtp "$d" --dspark --dspark-fold-partial 0 --dspark-stats --raw -p "$p" -n 48 -t 2 --temp 0 \
      >"$out.fp0" 2>"$err.fp0" || die "fold-partial 0 exit $?"
    cmp -s "$out" "$out.fp0" || die "--dspark-fold-partial 0 output differs from plain"
    grep -q "dspark: policy fold=1 grid=3 backoff=1 margin=2 cost_gate=1 .*fold_partial=0" "$err.fp0" ||
      die "--dspark-fold-partial 0 not applied: $(grep 'dspark: policy' "$err.fp0")"
    for pol in baseline all; do
      DS4_DSPARK_POLICY=$pol "$ds4" -m "$m" --mtp "$d" --dspark --dspark-stats --raw -p "$p" -n 48 -t 2 --temp 0 \
        >"$out.$pol" 2>"$err.$pol" || die "$pol exit $?"
      cmp -s "$out" "$out.$pol" || die "preset $pol output differs from plain"
    done
    grep -q "dspark: policy fold=0 grid=0 backoff=0 margin=0 cost_gate=0" "$err.baseline" ||
      die "DS4_DSPARK_POLICY=baseline not applied: $(grep 'dspark: policy' "$err.baseline")"
    # A switch adds to the preset.
    "$ds4" -m "$m" --mtp "$d" --dspark --dspark-policy baseline --dspark-cost-gate --dspark-stats --raw \
      -p "$p" -n 8 -t 2 --temp 0 >"$out.sw" 2>"$err.sw" || die "switch exit $?"
    grep -q "dspark: policy fold=0 grid=0 backoff=0 margin=0 cost_gate=1" "$err.sw" ||
      die "--dspark-cost-gate did not add to the preset: $(grep 'dspark: policy' "$err.sw")"
    "$ds4" -m "$m" --mtp "$d" --dspark --dspark-policy bogus -p hi >"$out.bad" 2>"$err.bad" &&
      die "exit 0 on an unknown preset"
    grep -q "unknown DSpark policy 'bogus'" "$err.bad" || die "message does not name the preset: $(cat "$err.bad")"
    grep -q "costall" "$err.bad" || die "message does not list the presets"
    ;;
  dspark_calibrate)
    # --dspark-calibrate prints the six DS4_DSPARK_COST_* lines; a DSpark run under them
    # still gives plain greedy's text; bad input is one clear error (exit 2).
    m="$src/models/ds4-tiny.gguf" d="$src/models/ds4-tiny-dspark.gguf"
    # --cpu: the header names the CPU's thread count (a CUDA build on a GPU machine would pick cuda).
    "$ds4" -m "$m" --mtp "$d" --dspark-calibrate --dspark-calibrate-reps 2 -t 2 --cpu >"$out" 2>"$err" ||
      die "exit code $?"
    grep -q "^dspark calibration: 2 thread(s), 2 round(s)" "$out" || die "no calibration header"
    [ "$(grep -cE '^DS4_DSPARK_COST_[A-Z_]+=[0-9]+\.[0-9]{3}$' "$out")" -eq 6 ] || die "expected 6 cost lines"
    p='{"alpha_2": "DE", "alpha_3": "DEU", "name": "Germany"}, {"alpha_2": '
    "$ds4" -m "$m" --raw -p "$p" -n 32 -t 2 --temp 0 >"$out.plain" 2>"$err.plain" || die "plain exit $?"
    env $(grep '^DS4_DSPARK_COST_' "$out") "$ds4" -m "$m" --mtp "$d" --dspark --raw -p "$p" -n 32 -t 2 --temp 0 \
      >"$out.spark" 2>"$err.spark" || die "calibrated DSpark exit $?"
    cmp -s "$out.plain" "$out.spark" || die "DSpark with the calibrated costs differs from plain"
    "$ds4" -m "$m" --mtp "$d" --dspark-calibrate --dspark-calibrate-reps 0 >"$out.bad" 2>"$err.bad" &&
      die "exit 0 with --dspark-calibrate-reps 0"
    grep -q "dspark-calibrate-reps must be >= 1" "$err.bad" || die "message: $(cat "$err.bad")"
    "$ds4" -m "$m" --dspark-calibrate >"$out.bad" 2>"$err.bad"; rc=$?
    [ $rc = 2 ] || die "no drafter: exit $rc, want 2"
    grep -q "needs the drafter GGUF" "$err.bad" || die "no-drafter message: $(cat "$err.bad")"
    ;;
  backend)
    # --backend / --device / --cpu / --cuda / --f32-activations (engine/backend_flags.h): one
    # start-up line names the backend; bad values are one clear error naming the flag.
    has_gpu=0
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && has_gpu=1
    "$ds4" -m "$model" --backend cpu -p hi -n 4 --temp 0 -t 2 >"$out" 2>"$err" || die "--backend cpu exit $?"
    [ "$(grep -c '^ds4: backend ' "$err")" = 1 ] || die "expected one backend line"
    grep -qE '^ds4: backend cpu: (scalar|avx2|avx512), 2 threads$' "$err" || die "backend line: $(grep backend "$err")"
    DS4_BACKEND=cpu "$ds4" -m "$model" -p hi -n 4 --temp 0 -t 1 >"$out.env" 2>"$err.env" || die "DS4_BACKEND=cpu exit $?"
    grep -qE '^ds4: backend cpu: .*, 1 thread$' "$err.env" || die "DS4_BACKEND=cpu: $(grep backend "$err.env")"
    cmp -s "$out" "$out.env" || die "greedy text differs between --backend cpu and DS4_BACKEND=cpu"
    # --cpu on the command line beats DS4_BACKEND; --f32-activations with auto picks the CPU.
    DS4_BACKEND=cuda "$ds4" -m "$model" --cpu -p hi -n 2 --temp 0 >"$out.sh" 2>"$err.sh" || die "--cpu over env exit $?"
    grep -q '^ds4: backend cpu: ' "$err.sh" || die "--cpu over DS4_BACKEND=cuda: $(cat "$err.sh")"
    "$ds4" -m "$model" --f32-activations -p hi -n 2 --temp 0 >"$out.f32" 2>"$err.f32" || die "--f32-activations exit $?"
    grep -q '^ds4: backend cpu: ' "$err.f32" || die "--f32-activations did not pick the CPU: $(cat "$err.f32")"
    expect_error() {  # expect_error WANT ARGS...: exit non-zero, one error line containing WANT
      local want=$1; shift
      "$@" >"$out.bad" 2>"$err.bad" && die "exit 0 for: $*"
      grep -q "error: .*$want" "$err.bad" || die "message for '$*' lacks '$want': $(cat "$err.bad")"
      grep -q '^ds4[a-z-]*: backend ' "$err.bad" && die "backend line printed for a failed start: $*"
      return 0
    }
    expect_error "--backend must be auto, cpu or cuda, got 'bogus'" "$ds4" -m "$model" --backend bogus -p hi
    expect_error "--backend must be auto, cpu or cuda, got 'gpu' (from DS4_BACKEND)" \
      env DS4_BACKEND=gpu "$ds4" -m "$model" -p hi
    expect_error "--cpu and --cuda are exclusive" "$ds4" -m "$model" --cuda --cpu -p hi
    expect_error "--cuda contradicts --backend cpu" "$ds4" -m "$model" --backend cpu --cuda -p hi
    expect_error "--device must be a GPU index >= 0, got -1" "$ds4" -m "$model" --device -1 -p hi
    expect_error "--f32-activations .*cpu backend only" "$ds4" -m "$model" --backend cuda --f32-activations -p hi
    expect_error "--backend must be auto, cpu or cuda, got 'gpu'" "$bench" -m "$model" --backend gpu \
      --prompt-file "$src/data/promessi_sposi.txt"
    # The other frontends share the table (checked when they are built next to ds4).
    bindir=$(dirname "$ds4")
    for prog in ds4-bench-spec ds4-bench-batch ds4-server; do
      [ -x "$bindir/$prog" ] || continue
      expect_error "--backend must be auto, cpu or cuda, got 'gpu'" "$bindir/$prog" -m "$model" --backend gpu
      expect_error "--cpu and --cuda are exclusive" "$bindir/$prog" -m "$model" --cpu --cuda
      grep -q -- "DS4_BACKEND" <("$bindir/$prog" --help) || die "$prog --help lacks DS4_BACKEND"
    done
    if [ -x "$bindir/ds4-bench-batch" ]; then
      DS4_BACKEND=cpu "$bindir/ds4-bench-batch" -m "$model" --max-k 1 --steps 1 --prompt-tokens 2 --repeat 1 -t 1 \
        >"$out.batch" 2>"$err.batch" || die "ds4-bench-batch exit $?"
      grep -q '^ds4-bench-batch: backend cpu: .*, 1 thread$' "$err.batch" || die "ds4-bench-batch: $(cat "$err.batch")"
    fi
    cuda_build=0
    "$ds4" --help | grep -q "This build has: .*cuda" && cuda_build=1
    if [ $has_gpu = 0 ] || [ $cuda_build = 0 ]; then
      # No GPU here, or no CUDA in this build: the registry's own message reaches the user, for
      # --backend cuda and for an explicit --device with auto.
      expect_error "CUDA" "$ds4" -m "$model" --backend cuda -p hi
      expect_error "CUDA" "$ds4" -m "$model" --device 7 -p hi
      expect_error "CUDA" "$bench" -m "$model" --cuda --prompt-file "$src/data/promessi_sposi.txt"
      # auto without a GPU (or without CUDA in the build) runs on the CPU.
      "$ds4" -m "$model" --backend auto -p hi -n 2 --temp 0 >"$out.auto" 2>"$err.auto" || die "auto exit $?"
      grep -q '^ds4: backend cpu: ' "$err.auto" || die "auto without a GPU or CUDA: $(cat "$err.auto")"
    else
      # A GPU and CUDA: auto runs there; a GPU index that does not exist is an error.
      "$ds4" -m "$model" -p hi -n 2 --temp 0 >"$out.auto" 2>"$err.auto" || die "auto exit $?"
      grep -q '^ds4: backend cuda: device 0, ' "$err.auto" || die "auto with a GPU: $(cat "$err.auto")"
      expect_error "device 99" "$ds4" -m "$model" --device 99 -p hi
    fi
    ;;
  *)
    echo "unknown check '$check'"; exit 2 ;;
esac
echo "ok [$check]"
