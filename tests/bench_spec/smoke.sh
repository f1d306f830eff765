#!/usr/bin/env bash
# tests/bench_spec/smoke.sh CHECK BENCH TARGET DRAFTER SRC WORK — one smoke check of
# ds4-bench-spec (see tests.cmake). Exits non-zero with a message on the first failure.
#   smoke     1 prompt/channel, 16 tokens, the eight default policies, confidence 0 (the random
#             drafter then proposes on every unpaused cycle): exit 0, 32 rows "ok 1/1" + 8 ALL
#             rows, the identity line, a CSV with a header + 40 rows, one outputs file per channel
#             whose records carry the prompt's tokens.
#   bad_flags unknown policy / bad grid / zero tokens exit 2; a missing drafter exits 1;
#             --self-test-corrupt (alters each DSpark output) exits 1 naming the position.
#   calibrate --calibrate --calibrate-reps 1: exit 0, the measured DS4_DSPARK_COST_* lines as
#             '#' comments, and the cost-gate header line shows those values (they are used);
#             --calibrate-reps 0 exits 2.
#   repeat    --repeat 3: exit 0, the header says so, identity holds, one stats report per
#             prompt (the counters of one run); --repeat 0 exits 2; --self-test-corrupt with
#             --repeat 2 still exits 1. With --in-cycle every row (ALL too) is followed by its
#             in-cycle line and the CSV's incycle_decode is > 0 (every run decodes its seeds).
#   oracle    --oracle 1,0.9 beside --policies baseline: rows baseline, oracle1, oracle0.9 with
#             'ok 1/1' (and ALL), oracle1 accepts 100% of its drafts, the CSV has the oracle rows
#             and the verify_rows_per_cycle column; --policies none --oracle 0.9 without --mtp
#             runs with no drafter (header says so) and prints only the oracle row, which does
#             not overlap the seed's decode at 2 threads; the
#             DS4_BENCH_ORACLE mirror works; bad hit rates / unknown --oracle-policy / --policies
#             none alone exit 2, an explicit missing --mtp still exits 1.
#   script    scripts/bench_spec.sh with MODEL/MTP overrides prints the table and the n-gram
#             rates of every channel.
set -uo pipefail
CHECK=$1 BENCH=$2 TARGET=$3 DRAFTER=$4 SRC=$5 WORK=$6
rm -rf "$WORK"; mkdir -p "$WORK"
die() { echo "FAIL [$CHECK]: $*" >&2; [ -f "$WORK/out.txt" ] && cat "$WORK/out.txt" >&2; exit 1; }
COMMON=(-m "$TARGET" --mtp "$DRAFTER" --prompts-dir "$SRC/data/prompts" -n 1 --gen-tokens 16
        --max-prompt-tokens 48 -t 1 --warmup 0)

case "$CHECK" in
  smoke)
    "$BENCH" "${COMMON[@]}" --confidence 0 --csv "$WORK/t.csv" --outputs-dir "$WORK/out" \
      > "$WORK/out.txt" 2> "$WORK/err.txt" || die "exit status $? (stderr: $(cat "$WORK/err.txt"))"
    rows=$(grep -cE '^(structured|code|english|italian) +(baseline|fold|grid|backoff|margin|all|costall|costlookup) +16 .* ok 1/1$' "$WORK/out.txt")
    [ "$rows" = 32 ] || die "expected 32 table rows with 16 tokens and 'ok 1/1', got $rows"
    grep -q '^# identity: every DSpark output equals the plain output' "$WORK/out.txt" || die "no identity line"
    grep -q FAIL "$WORK/out.txt" && die "a FAIL row"
    grep -cE '^ALL +(baseline|fold|grid|backoff|margin|all|costall|costlookup) +64 .* ok 4/4$' "$WORK/out.txt" | grep -qx 8 ||
      die "expected 8 ALL rows with 64 tokens and 'ok 4/4'"
    [ "$(wc -l < "$WORK/t.csv")" = 41 ] || die "CSV should have 41 lines"
    head -1 "$WORK/t.csv" | grep -q '^channel,policy,prompts,gen_tokens,plain_tps,dspark_tps,ratio,' || die "CSV header"
    # confidence 0: the baseline policy proposed drafts (counts parsed from stats_report()).
    awk -F, '$1 != "ALL" && $2 == "baseline" && $9 > 0 {n++} END {exit n == 4 ? 0 : 1}' "$WORK/t.csv" ||
      die "baseline rows should report proposed drafts > 0 in every channel"
    for ch in structured code english italian; do
      python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert len(r)==1 and len(r[0]['output_tokens'])==16 and 2 <= len(r[0]['prompt_tokens']) <= 48" \
        "$WORK/out/$ch.jsonl" || die "outputs file for $ch"
    done
    ;;
  bad_flags)
    "$BENCH" "${COMMON[@]}" --policies baseline,nope > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "unknown policy: exit $rc, want 2"
    grep -q "unknown DSpark policy 'nope'" "$WORK/out.txt" || die "unknown policy message"
    "$BENCH" "${COMMON[@]}" --grid 0.5,x > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "bad grid: exit $rc, want 2"
    "$BENCH" "${COMMON[@]}" --gen-tokens 0 > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "--gen-tokens 0: exit $rc, want 2"
    "$BENCH" -m "$TARGET" --mtp "$WORK/none.gguf" > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 1 ] || die "missing drafter: exit $rc, want 1"
    grep -q "drafter file" "$WORK/out.txt" || die "missing drafter message"
    # The identity checker itself: an altered DSpark output must fail the run.
    "$BENCH" "${COMMON[@]}" --channels code --policies baseline --self-test-corrupt \
      > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 1 ] || die "--self-test-corrupt: exit $rc, want 1"
    grep -q "IDENTITY FAILED" "$WORK/out.txt" || die "no IDENTITY FAILED line"
    grep -q "DSpark output differs from plain at token 15" "$WORK/out.txt" || die "no mismatch position"
    ;;
  calibrate)
    "$BENCH" "${COMMON[@]}" --channels structured --policies costall --calibrate --calibrate-reps 1 \
      > "$WORK/out.txt" 2> "$WORK/err.txt" || die "exit status $? (stderr: $(cat "$WORK/err.txt"))"
    grep -qE '^# dspark calibration: 1 thread\(s\), 1 round\(s\)' "$WORK/out.txt" || die "no calibration header"
    base=$(sed -n 's/^# DS4_DSPARK_COST_VERIFY_BASE=//p' "$WORK/out.txt")
    row=$(sed -n 's/^# DS4_DSPARK_COST_VERIFY_ROW=//p' "$WORK/out.txt")
    [ -n "$base" ] && [ -n "$row" ] || die "no DS4_DSPARK_COST_VERIFY_* lines"
    # The header prints 2 decimals of the same floats (so compare within half a cent, not text).
    used=$(sed -n 's/^# cost gate (cost\* policies): verify(n) ~ \([0-9.]*\) + \([0-9.]*\) n.*/\1 \2/p' "$WORK/out.txt")
    [ -n "$used" ] || die "no cost-gate header line"
    awk -v b="$base" -v r="$row" -v u="$used" 'BEGIN { split(u, x, " ");
        d1 = x[1] - b; d2 = x[2] - r; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2;
        exit (d1 <= 0.0051 && d2 <= 0.0051) ? 0 : 1 }' ||
      die "the measured costs ($base + $row n) are not the ones used ($used)"
    grep -qE '^structured +costall +16 .* ok 1/1$' "$WORK/out.txt" || die "no costall row"
    "$BENCH" "${COMMON[@]}" --calibrate --calibrate-reps 0 > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "--calibrate-reps 0: exit $rc, want 2"
    ;;
  repeat)
    "$BENCH" "${COMMON[@]}" --channels code,italian --policies baseline,costall --repeat 3 --stats \
      --in-cycle --csv "$WORK/t.csv" > "$WORK/out.txt" 2> "$WORK/err.txt" ||
      die "exit status $? (stderr: $(cat "$WORK/err.txt"))"
    n_ic=$(grep -A1 -E '^(code|italian|ALL) +(baseline|costall) ' "$WORK/out.txt" |
           grep -cE '^#   in-cycle / model: decode [0-9.]+  verify [0-9.]+  propose [0-9.]+  outside them [0-9.]+%$')
    [ "$n_ic" = 6 ] || die "expected an in-cycle line under each of the 6 rows, got $n_ic"
    head -1 "$WORK/t.csv" | grep -q ',incycle_decode,incycle_verify,incycle_propose,incycle_other_pct,verify_rows_per_cycle$' ||
      die "CSV header lacks the incycle columns"
    awk -F, 'NR > 1 && $37 > 0 {n++} END {exit n == 6 ? 0 : 1}' "$WORK/t.csv" ||
      die "incycle_decode should be > 0 in every CSV row"
    grep -qE '^# .*plain and DSpark alternate per prompt, 3 pairs each, fastest run per side$' "$WORK/out.txt" ||
      die "no --repeat header"
    rows=$(grep -cE '^(code|italian) +(baseline|costall) +16 .* ok 1/1$' "$WORK/out.txt")
    [ "$rows" = 4 ] || die "expected 4 table rows with 'ok 1/1', got $rows"
    [ "$(grep -c '^--- ' "$WORK/err.txt")" = 4 ] || die "expected one stats report per prompt and policy"
    "$BENCH" "${COMMON[@]}" --repeat 0 > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "--repeat 0: exit $rc, want 2"
    "$BENCH" "${COMMON[@]}" --channels code --policies baseline --self-test-corrupt --repeat 2 \
      > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 1 ] || die "--self-test-corrupt --repeat 2: exit $rc, want 1"
    grep -q "IDENTITY FAILED: 2 run(s) differ" "$WORK/out.txt" || die "both repeats should be counted"
    ;;
  oracle)
    "$BENCH" "${COMMON[@]}" --channels code,italian --policies baseline --oracle 1,0.9 --csv "$WORK/t.csv" \
      > "$WORK/out.txt" 2> "$WORK/err.txt" || die "exit status $? (stderr: $(cat "$WORK/err.txt"))"
    rows=$(grep -cE '^(code|italian) +(baseline|oracle1|oracle0\.9) +16 .* ok 1/1$' "$WORK/out.txt")
    [ "$rows" = 6 ] || die "expected 6 table rows (baseline, oracle1, oracle0.9 per channel), got $rows"
    grep -cE '^ALL +(baseline|oracle1|oracle0\.9) +32 .* ok 2/2$' "$WORK/out.txt" | grep -qx 3 ||
      die "expected 3 ALL rows"
    grep -q '^# oracle<h> rows (MEASUREMENT): policy fold' "$WORK/out.txt" || die "no oracle header line"
    head -1 "$WORK/t.csv" | grep -q ',verify_rows_per_cycle$' || die "CSV header lacks verify_rows_per_cycle"
    # oracle1: every draft accepted (accept_rate 1), some proposed; oracle0.9 accepts fewer.
    awk -F, '$2 == "oracle1" && $9 > 0 && $10 == $9 && $11 == 1 {n++} END {exit n == 3 ? 0 : 1}' "$WORK/t.csv" ||
      die "oracle1 rows should accept every proposed draft"
    awk -F, '$2 == "oracle0.9" && $9 > 0 && $41 > 0 {n++} END {exit n == 3 ? 0 : 1}' "$WORK/t.csv" ||
      die "oracle0.9 rows should propose and verify"
    # No --mtp: the engine opens without a drafter. 2 threads: the oracle rows still never overlap.
    "$BENCH" -m "$TARGET" --prompts-dir "$SRC/data/prompts" -n 1 --gen-tokens 16 --max-prompt-tokens 48 -t 2 \
      --warmup 0 --channels code --policies none --oracle 0.9 --stats \
      > "$WORK/out.txt" 2> "$WORK/err.txt" || die "oracle only: exit status $? (stderr: $(cat "$WORK/err.txt"))"
    grep -q '^# drafter none (oracle rows only)$' "$WORK/out.txt" || die "oracle only: header should say no drafter"
    grep -qE '^dspark: policy fold=1 .* overlap=0 ' "$WORK/err.txt" || die "oracle only: the oracle row overlapped"
    [ "$(grep -cE '^code +[a-z]' "$WORK/out.txt")" = 1 ] || die "oracle only: expected exactly one row"
    grep -qE '^code +oracle0\.9 +16 .* ok 1/1$' "$WORK/out.txt" || die "oracle only: no oracle0.9 row"
    DS4_BENCH_ORACLE=0.7 "$BENCH" "${COMMON[@]}" --channels code --policies none \
      > "$WORK/out.txt" 2>&1 || die "DS4_BENCH_ORACLE: exit status $?"
    grep -qE '^code +oracle0\.7 +16 .* ok 1/1$' "$WORK/out.txt" || die "DS4_BENCH_ORACLE: no oracle0.7 row"
    for bad in 1.5 x 0.5,-1; do
      "$BENCH" "${COMMON[@]}" --oracle "$bad" > "$WORK/out.txt" 2>&1; rc=$?
      [ $rc = 2 ] || die "--oracle $bad: exit $rc, want 2"
      grep -q "not a hit rate" "$WORK/out.txt" || die "--oracle $bad: message"
    done
    "$BENCH" "${COMMON[@]}" --oracle 0.5 --oracle-policy nope > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "--oracle-policy nope: exit $rc, want 2"
    "$BENCH" "${COMMON[@]}" --policies none > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 2 ] || die "--policies none without --oracle: exit $rc, want 2"
    "$BENCH" -m "$TARGET" --mtp "$WORK/none.gguf" --oracle 0.9 > "$WORK/out.txt" 2>&1; rc=$?
    [ $rc = 1 ] || die "--oracle with a missing --mtp: exit $rc, want 1"
    ;;
  script)
    BUILD="$WORK/build"
    mkdir -p "$BUILD/bin"; ln -s "$BENCH" "$BUILD/bin/ds4-bench-spec"
    MODEL="$TARGET" MTP="$DRAFTER" PROMPTS=1 GEN=8 MAX_PROMPT=48 THREADS=1 POLICIES=baseline,costlookup \
      BENCH_ARGS="--calibrate-reps 2" \
      bash "$SRC/scripts/bench_spec.sh" "$BUILD" > "$WORK/out.txt" 2> "$WORK/err.txt" ||
      die "exit status $? (stderr: $(cat "$WORK/err.txt"))"
    rows=$(grep -cE '^(structured|code|english|italian) +(baseline|costlookup) +8 .* ok 1/1$' "$WORK/out.txt")
    [ "$rows" = 8 ] || die "expected 8 table rows, got $rows"
    # The cost policies ran at this machine's measured costs (CALIBRATE defaults to 1).
    grep -qE '^# DS4_DSPARK_COST_VERIFY_BASE=[0-9.]+$' "$WORK/out.txt" || die "no calibration by default"
    for ch in structured code english italian; do
      grep -qE "^$ch +1:[0-9.]+ 2:[0-9.]+ 3:[0-9.]+ 4:[0-9.]+ +1:[0-9.]+ " "$WORK/out.txt" ||
        die "no n-gram line for $ch"
    done
    [ -f "$BUILD/bench/spec_channels.csv" ] || die "no CSV under BUILD/bench"
    ;;
  *) die "unknown check" ;;
esac
echo "ok [$CHECK]"
