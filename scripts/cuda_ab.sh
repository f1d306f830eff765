#!/usr/bin/env bash
# scripts/cuda_ab.sh — a whole-token A/B of the working tree's CUDA code against an earlier
# revision, both built and run on the SAME GPU machine, runs interleaved (docs/CUDA.md, "Where
# the next lease starts"). A leased GPU machine gets a copy of the working tree without .git,
# so the base revision's files travel as a folder made here:
#
#   scripts/cuda_ab.sh prepare REV DIR    (here, in the git checkout) REV's version of every
#                                         tracked file that differs from the working tree, under
#                                         DIR with its path; DIR/.added lists the files REV lacks
#   scripts/cuda_ab.sh overlay DIR DEST   a copy of this tree at DEST (no build folders, no .git)
#                                         with DIR's files put back and DIR/.added's removed: the
#                                         base tree (run does this itself)
#   scripts/cuda_ab.sh run DIR [OUT]      (GPU machine) the base tree at /tmp/ds4-ab-base, both
#                                         trees configured (scripts/offline_deps.sh configure
#                                         DEPS) and built, the generated Flash q2 file (43 layers
#                                         from 120 GiB free, else 30; reused), then RUNS
#                                         interleaved `ds4-bench --cuda` runs of each at a CTX
#                                         frontier, GEN tokens, FLAGS added: one line per run
#                                         (prefill and decode tokens/s, the frontier hash), the
#                                         medians, the ratio new / base and whether every hash is
#                                         the same; with NCU=1 also each build's kernel durations
#                                         of a 64-token frontier + 2 tokens (ncu) and
#                                         tools/ncu_kernel_table.py's table of both. Files in OUT
#                                         (default cuda-ab-out): ab.csv, ab.log, ncu_{base,new}.csv.
# Environment: DEPS (.debs), RUNS (3), CTX (2048), GEN (64), FLAGS (""), NCU (0), LAYERS (auto),
# JOBS (nproc). Exit status 0; 1 on a build or run failure; 2 on bad arguments.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,27p' "$0" >&2; exit 2; }

# The tree without build outputs or VCS data, as the device machine sees it.
copy_tree() {
  local dest=$1
  mkdir -p "$dest"
  (cd "$ROOT" && tar --exclude='./build' --exclude='./build-*' --exclude='./.git' --exclude='./.debs' \
    --exclude='./cuda-ab-out' -cf - .) | tar -xf - -C "$dest"
}

prepare() {
  local rev=$1 dir=$2
  git -C "$ROOT" rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "cuda_ab: '$rev' is not a revision" >&2; exit 2; }
  rm -rf "$dir" && mkdir -p "$dir" && : >"$dir/.added"
  local n=0 st path
  while IFS=$'\t' read -r st path; do
    case $st in
      A) echo "$path" >>"$dir/.added" ;;
      *) mkdir -p "$dir/$(dirname "$path")" && git -C "$ROOT" show "$rev:$path" >"$dir/$path" ;;
    esac
    n=$((n + 1))
  done < <(git -C "$ROOT" diff --name-status --no-renames "$rev" --)
  echo "cuda_ab: $n file(s) differ from $rev; its versions are in $dir ($(wc -l <"$dir/.added") added since)"
}

overlay() {
  local dir=$1 dest=$2
  [ -f "$dir/.added" ] || { echo "cuda_ab: $dir holds no prepared revision (no .added file)" >&2; exit 2; }
  rm -rf "$dest" && copy_tree "$dest"
  (cd "$dir" && find . -type f ! -name .added -print0) | while IFS= read -r -d '' f; do
    mkdir -p "$dest/$(dirname "$f")" && cp "$dir/$f" "$dest/$f"
  done
  while IFS= read -r f; do [ -n "$f" ] && rm -f "$dest/$f"; done <"$dir/.added"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_ab() {
  local dir=$1 out=${2:-cuda-ab-out}
  local deps=${DEPS:-$ROOT/.debs} runs=${RUNS:-3} ctx=${CTX:-2048} gen=${GEN:-64} jobs=${JOBS:-$(nproc)}
  local base=/tmp/ds4-ab-base
  mkdir -p "$out" && out=$(cd "$out" && pwd)
  local log=$out/ab.log
  : >"$log"
  say() { echo "$*" | tee -a "$log"; }
  overlay "$dir" "$base"
  deps=$(cd "$deps" && pwd) || { say "cuda_ab: no dependency folder $deps"; exit 1; }
  local t
  for t in "$ROOT" "$base"; do
    bash "$t/scripts/offline_deps.sh" configure "$deps" build-cuda >>"$log" 2>&1 || { say "cuda_ab: configuring $t failed (see $log)"; exit 1; }
    cmake --build "$t/build-cuda" -j "$jobs" --target ds4-bench ds4-gguf >>"$log" 2>&1 || { say "cuda_ab: building $t failed (see $log)"; exit 1; }
  done
  export LD_LIBRARY_PATH=/tmp/ds4-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local layers=${LAYERS:-auto}
  if [ "$layers" = auto ]; then
    local free; free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
    if [ "${free:-0}" -ge 122880 ]; then layers=43; else layers=30; fi
  fi
  local model=$ROOT/build-cuda/models/flash-q2-route-all-L$layers.gguf
  mkdir -p "$(dirname "$model")"
  if [ ! -f "$model" ]; then
    if ! "$ROOT/build-cuda/tools/ds4-gguf/ds4-gguf" generate --profile flash --quant q2 --sparse-experts 8 \
      --route-all --layers "$layers" -q -o "$model.tmp" >>"$log" 2>&1; then
      say "cuda_ab: generating $model failed (see $log)"
      exit 1
    fi
    mv "$model.tmp" "$model"
  fi
  say "cuda_ab: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1), $layers layers, frontier $ctx, $gen tokens, $runs runs each, flags '${FLAGS:-}'"
  echo "build,run,prefill_tps,decode_tps,logits_sha256" >"$out/ab.csv"
  local i b bin row
  for i in $(seq 1 "$runs"); do
    for b in base new; do
      bin=$ROOT/build-cuda/bin/ds4-bench
      [ $b = base ] && bin=$base/build-cuda/bin/ds4-bench
      # shellcheck disable=SC2086  # FLAGS is a list of flags
      row=$("$bin" --cuda ${FLAGS:-} -m "$model" --prompt-file "$ROOT/data/promessi_sposi.txt" --ctx-start "$ctx" \
        --ctx-max "$ctx" --gen-tokens "$gen" 2>>"$log" | grep -E '^[0-9]+,' | tail -1)
      [ -n "$row" ] || { say "cuda_ab: the $b run $i printed no result (see $log)"; exit 1; }
      echo "$row" | awk -F, -v b=$b -v i="$i" '{ print b "," i "," $3 "," $5 "," $7 }' | tee -a "$out/ab.csv" | tee -a "$log"
    done
  done
  local mb mn
  mb=$(awk -F, '$1 == "base" { print $4 }' "$out/ab.csv" | median)
  mn=$(awk -F, '$1 == "new" { print $4 }' "$out/ab.csv" | median)
  say "cuda_ab: decode median base $mb, new $mn tokens/s, new / base $(awk -v a="$mb" -v b="$mn" 'BEGIN { printf "%.3f", b / a }')"
  if [ "$(tail -n +2 "$out/ab.csv" | cut -d, -f5 | sort -u | wc -l)" = 1 ]; then
    say "cuda_ab: every run's frontier hash is the same"
  else
    say "cuda_ab: THE FRONTIER HASHES DIFFER (the change altered the bits)"
  fi
  if [ "${NCU:-0}" = 1 ]; then
    for b in base new; do
      bin=$ROOT/build-cuda/bin/ds4-bench
      [ $b = base ] && bin=$base/build-cuda/bin/ds4-bench
      # shellcheck disable=SC2086  # FLAGS is a list of flags
      ncu --clock-control none --metrics gpu__time_duration.sum --csv "$bin" --cuda ${FLAGS:-} -m "$model" \
        --prompt-file "$ROOT/data/promessi_sposi.txt" --ctx-start 64 --ctx-max 64 --gen-tokens 2 >"$out/ncu_$b.csv" 2>>"$log" ||
        say "cuda_ab: ncu of the $b build failed (see $log)"
    done
    python3 "$ROOT/tools/ncu_kernel_table.py" "$out/ncu_base.csv" "$out/ncu_new.csv" --top 25 | tee -a "$log"
  fi
}

case "${1:-}" in
  prepare) [ $# = 3 ] || usage; prepare "$2" "$3" ;;
  overlay) [ $# = 3 ] || usage; overlay "$2" "$3" ;;
  run) { [ $# = 2 ] || [ $# = 3 ]; } || usage; run_ab "$2" "${3:-}" ;;
  *) usage ;;
esac
