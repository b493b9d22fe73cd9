#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, and pretrains a tiny BERT on the CPU
# on real English text: the reStructuredText sources of the Linux kernel documentation
# (Debian package linux-doc-6.1, about 24 MB in 3,000 documents). It trains a SentencePiece
# tokenizer (8,000 pieces), writes train and eval shards with `bertpre prep`, and runs
# `bertpre train configs/demo-corpus.json`, printing MLM/NSP loss and MLM accuracy, then an
# evaluation on the held-out documents. About 4 minutes on 2 cores. Extra arguments go to
# 'bertpre train' (for example --set train.steps=50).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/tools/setup.sh"
"$root/tools/build.sh"
corpus=$(ls -d /usr/share/doc/linux-doc-*/Documentation | sort | tail -1)
work=build/demo
mkdir -p "$work"
echo "demo: training a tokenizer on $corpus"
build/bertpre tokenizer train --format text --pattern '*.rst.gz' --vocab-size 8000 \
  --input-sentence-size 100000 --model-prefix "$work/spm" "$corpus"
echo "demo: writing shards (seq 64, 2% of the documents held out for evaluation)"
rm -rf "$work/shards"
build/bertpre prep --tokenizer "$work/spm.model" --output "$work/shards" --format text --pattern '*.rst.gz' \
  --seq-length 64 --max-predictions 10 --shards 4 --eval-fraction 0.02 "$corpus"
exec build/bertpre train configs/demo-corpus.json "$@"
