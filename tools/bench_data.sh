#!/usr/bin/env bash
# Data-pipeline throughput on the demo's linux-doc inputs (every subtree and top-level
# .rst.gz except translations/: 21.4 MB of text), as in issue 23's job: `bertpre bench data`
# (prep at seq 128, 20 predictions, dupe factor 5, gzip level 4, 4 shards, with THREADS
# workers, default 1; then the loader, micro-batch 64, with stored and dynamic masks), run
# RUNS times (default 3). Prints each run, then prep's best CPU seconds (user + system, all
# threads: unlike wall time, not inflated by other work on the cores), its MB of text per
# CPU second and the ratio to 0.384 MB per CPU second, what NVIDIA's
# create_pretraining_data.py needs for the same job. Builds first; trains the demo's
# 8,000-piece tokenizer if it is not there yet; TOKENIZER (a SentencePiece .model or a
# WordPiece vocab.txt, the kind NVIDIA's script uses) replaces it. Results go to
# docs/BENCH-data.md by hand.
# usage: tools/bench_data.sh [THREADS [RUNS [TOKENIZER]]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-1}
runs=${2:-3}
tokenizer=${3:-}
nvidia_mb_per_cpu_s=0.384
"$root/tools/build.sh"
list=$(python3 tools/common.py linux-doc) || exit 1
mapfile -t inputs <<<"$list"
model=${tokenizer:-build/demo/spm.model}
if [ -z "$tokenizer" ] && [ ! -f "$model" ]; then
  mkdir -p build/demo
  build/bertpre tokenizer train --format text --pattern '*.rst.gz' --vocab-size 8000 \
    --input-sentence-size 100000 --model-prefix build/demo/spm "${inputs[@]}"
fi
echo "commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), tokenizer $model"
best=""
for run in $(seq "$runs"); do
  result=$(build/bertpre bench data --tokenizer "$model" --threads "$threads" --format text --pattern '*.rst.gz' \
    "${inputs[@]}")
  echo "run $run: $result"
  # "bench prep: 21.4 MB of text, ...; 7.16 CPU s = 2.99 MB per CPU second"
  line=$(grep '^bench prep:' <<<"$result")
  mb=$(sed -E 's/^bench prep: ([0-9.]+) MB of text.*/\1/' <<<"$line")
  cpu=$(sed -E 's/.*; ([0-9.]+) CPU s = .*/\1/' <<<"$line")
  if [ -z "$best" ] || awk -v a="$cpu" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$cpu; fi
done
awk -v mb="$mb" -v cpu="$best" -v nv="$nvidia_mb_per_cpu_s" -v th="$threads" -v runs="$runs" 'BEGIN {
  printf "prep, %d thread(s), best of %d: %.2f CPU s for %.1f MB = %.2f MB per CPU second = %.1fx NVIDIA'"'"'s %.3f\n",
         th, runs, cpu, mb, mb / cpu, mb / cpu / nv, nv }'
