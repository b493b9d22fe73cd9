#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, and pretrains a tiny BERT on the CPU on
# real English text, the reStructuredText sources of the Linux kernel documentation (Debian
# package linux-doc-6.1, without its translations: about 2,800 documents). It trains a
# SentencePiece tokenizer, writes train shards and a held-out eval shard with `bertpre prep`,
# pretrains with `bertpre train` (configs/pretrain-tiny.json: a checkpoint, a metrics file and an
# evaluation on the held-out documents at the end), evaluates the checkpoint with `bertpre
# eval`, exports the model and its tokenizer for transformers, plots the metrics and prints
# where everything is: tools/pretrain.sh with its tiny preset on that text. About 3 minutes
# on 2 cores once bertpre is built.
# Extra arguments go to tools/pretrain.sh (for example --set train.steps=100).
#
# Environment (for smaller runs, e.g. the test of this script):
#   DEMO_WORK       output directory (default build/demo)
#   DEMO_SUBTREES   subtrees of Documentation/ to use, separated by spaces (default: all English ones)
#   DEMO_VOCAB      tokenizer pieces and the model's vocab_size (default 8000)
#   DEMO_EVAL_FRACTION  share of the documents held out for evaluation (default 0.02)
#   DEMO_EVAL_BATCHES   micro-batches of 32 that the evaluation reads (default 50)
#   DEMO_NO_SETUP=1 skip tools/setup.sh and tools/build.sh (bertpre already built)
#   DEMO_BERTPRE    the bertpre binary (default build/bertpre)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PRETRAIN_FROM=$PWD  # the paths printed, as seen from where the demo was started
cd "$root"
say() { echo "demo: $*"; }

if [ -z "${DEMO_NO_SETUP:-}" ]; then
  say "checking the Debian and Python packages (tools/setup.sh; installing what is missing takes minutes, once)"
  tools/setup.sh
  say "building bertpre (tools/build.sh: meson and ninja; minutes the first time, its progress every 10%)"
  tools/build.sh
fi
bertpre=${DEMO_BERTPRE:-$root/build/bertpre}
work=${DEMO_WORK:-build/demo}
vocab=${DEMO_VOCAB:-8000}
eval_fraction=${DEMO_EVAL_FRACTION:-0.02}
eval_batches=${DEMO_EVAL_BATCHES:-50}
# The English documents (every subtree and top-level .rst file except translations/), or DEMO_SUBTREES.
# shellcheck disable=SC2086
list=$(python3 tools/common.py linux-doc ${DEMO_SUBTREES:-}) || exit 1
mapfile -t inputs <<<"$list"
BERTPRE="$bertpre" PRETRAIN_NAME=demo tools/pretrain.sh --out "$work" --preset tiny --vocab "$vocab" \
  --format text --pattern '*.rst.gz' --eval-fraction "$eval_fraction" --eval-batches "$eval_batches" --shards 4 \
  "${inputs[@]}" "$@"
shown() { realpath -s -m --relative-base="$PRETRAIN_FROM" -- "$1"; }
program() { local p; p=$(shown "$1"); [[ "$p" == */* ]] && echo "$p" || echo "./$p"; }
echo "  $(program "$root/tools/finetune.py") $(shown "$work/export")   # the linux-doc task: networking or filesystems paragraphs"
echo "  $(program "$root/tools/demo.sh") --set train.steps=3000   # a longer run (2.5 times the training steps)"
echo "guide: $(shown "$root/docs/GUIDE.md"), from raw text to a fine-tuned model at real scale"
