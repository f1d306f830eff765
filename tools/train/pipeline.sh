#!/usr/bin/env bash
# tools/train/pipeline.sh — the one command that rebuilds the shipped tiny model.
#
#   bash tools/train/pipeline.sh [STAGE...]      stages: corpus tokenizer tokens train quantize eval
#                                                (default: all, in that order)
# Environment: WORK (default build-reference), DS4_GGUF (default $WORK/tools/ds4-gguf/ds4-gguf,
# built with `cmake --build $WORK --target ds4-gguf`), TIME_BUDGET (seconds of training,
# default 400), STEPS (fixed step count; overrides TIME_BUDGET), SEED (default 4), OUT_DIR
# (default $WORK/run).
# The train stage wants a CUDA GPU (bf16 autocast); everything else runs on a CPU.
# Outputs: $OUT_DIR/ds4-tiny-f32.gguf (float), $OUT_DIR/ds4-tiny.gguf (q2 layout, what
# models/ ships), $OUT_DIR/train_log.json, $OUT_DIR/eval_q2.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-build-reference}
OUT_DIR=${OUT_DIR:-$WORK/run}
DS4_GGUF=${DS4_GGUF:-$WORK/tools/ds4-gguf/ds4-gguf}
SEED=${SEED:-4}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(corpus tokenizer tokens train quantize eval)
mkdir -p "$WORK" "$OUT_DIR"
for s in "${stages[@]}"; do
  case $s in
    corpus)    python3 tools/corpus/build_corpus.py ;;
    tokenizer) python3 tools/tokenizer/train_tokenizer.py --vocab-size 8192 --name ds4-tiny \
                 --out "$WORK/tokenizer.gguf" build-corpus/tokenizer_sample.txt ;;
    tokens)    python3 tools/train/tokenize_corpus.py --tokenizer "$WORK/tokenizer.gguf" \
                 --out "$WORK/tokens.npz" ;;
    train)     steps_arg=(--time-budget "${TIME_BUDGET:-400}")
               [ -n "${STEPS:-}" ] && steps_arg=(--steps "$STEPS")
               python3 tools/train/train.py --tokens "$WORK/tokens.npz" \
                 --tokenizer "$WORK/tokenizer.gguf" --out "$OUT_DIR" --seed "$SEED" \
                 "${steps_arg[@]}" ${TRAIN_ARGS:-} ;;
    quantize)  "$DS4_GGUF" quantize "$OUT_DIR/ds4-tiny-f32.gguf" -o "$OUT_DIR/ds4-tiny.gguf" \
                 --quant q2 ;;
    eval)      python3 tools/train/eval_ppl.py --model "$OUT_DIR/ds4-tiny.gguf" \
                 --tokens "$WORK/tokens.npz" ${EVAL_ARGS:-} > "$OUT_DIR/eval_q2.json" ;;
    *) echo "pipeline.sh: unknown stage '$s'" >&2; exit 2 ;;
  esac
done
