#!/usr/bin/env bash
# Data-pipeline throughput on the linux-doc corpus: `bertpre prep` MB/s of text on N cores
# (default 2) and loader batches/s (micro-batch 64, seq 128) with stored and dynamic
# masks, compared with the 2,500 sequences/s a GPU consumes. Builds first; trains the
# tokenizer that the demo uses if it is not there yet. Results go to docs/BENCH-data.md by hand.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
"$root/tools/build.sh"
corpus=$(ls -d /usr/share/doc/linux-doc-*/Documentation | sort | tail -1)
model=build/demo/spm.model
if [ ! -f "$model" ]; then
  mkdir -p build/demo
  build/bertpre tokenizer train --format text --pattern '*.rst.gz' --vocab-size 8000 \
    --input-sentence-size 100000 --model-prefix build/demo/spm "$corpus"
fi
echo "commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
build/bertpre bench data --tokenizer "$model" --threads "$threads" --format text --pattern '*.rst.gz' "$corpus"
