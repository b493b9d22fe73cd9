#!/usr/bin/env bash
# CPU benchmark of train.unpad: `bertpre train` of a small model (BERT-mini's shape by
# default, BENCH_MODEL below; vocabulary 8,000) on linux-doc shards written by `bertpre prep`
# at seq 128 and at seq 512, unpad off against on, in one run; prints sequences/s of each, the speed-up, the shards'
# real-token fraction, the target 0.9 / (real-token fraction), and sum L^2 / (T sum L), the
# share of the CPU attention's work that unpadding keeps (its padded form already skips the
# padding keys, so only the padding queries go). A benchmark, not a test:
# docs/PERFORMANCE.md has its results and the profile behind them.
#
# Environment:
#   BENCH_WORK      output directory (default build/bench-unpad)
#   BENCH_SUBTREES  subtrees of Documentation/ to use (default "admin-guide filesystems")
#   BENCH_STEPS     training steps per run (default 20; the first log window is left out)
#   BENCH_MICRO     micro-batch size (default 16)
#   BENCH_BERTPRE   the bertpre binary (default build/bertpre)
#   BENCH_MODEL     mini (default: BERT-mini's shape, 4 layers, hidden 256, 4 heads, FFN 1024)
#                   or tiny (the demo's: 2 layers, hidden 64, 4 heads, FFN 256)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/.venv/bin:$PATH"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"  # as tools/demo.sh: the CPU backend threads itself
bertpre=${BENCH_BERTPRE:-build/bertpre}
work=${BENCH_WORK:-build/bench-unpad}
steps=${BENCH_STEPS:-20}
micro=${BENCH_MICRO:-16}
case "${BENCH_MODEL:-mini}" in
  mini) shape=(--set model.num_hidden_layers=4 --set model.hidden_size=256 --set model.num_attention_heads=4
               --set model.intermediate_size=1024) ;;
  tiny) shape=() ;;
  *) echo "bench_unpad: error: BENCH_MODEL = '$BENCH_MODEL' is not mini or tiny" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086
list=$(python3 tools/common.py linux-doc ${BENCH_SUBTREES:-admin-guide filesystems}) || exit 1
mapfile -t inputs <<<"$list"
mkdir -p "$work"

if [ ! -f "$work/spm.model" ]; then
  "$bertpre" tokenizer train --format text --pattern '*.rst.gz' --vocab-size 8000 --input-sentence-size 100000 \
    --model-prefix "$work/spm" "${inputs[@]}" > "$work/tokenizer.log" 2>&1
fi
echo "seq  real-token fraction  unpad off seq/s  unpad on seq/s  speed-up  target 0.9/fraction  attention kept"
for seq in 128 512; do
  preds=$((seq == 128 ? 20 : 80))  # NVIDIA's phase 1 and phase 2
  shards="$work/shards-$seq"
  if [ ! -d "$shards" ]; then
    "$bertpre" prep --tokenizer "$work/spm.model" --output "$shards" --format text --pattern '*.rst.gz' \
      --seq-length "$seq" --max-predictions "$preds" --shards 1 --dupe-factor 1 --chunk-mb 64 --no-progress \
      "${inputs[@]}" > "$work/prep-$seq.log" 2>&1
  fi
  for unpad in off on; do
    rm -f "$work/metrics-$seq-$unpad.jsonl"
    "$bertpre" train configs/demo-corpus.json --set model.max_position_embeddings=512 "${shape[@]}" \
      --set "train.seq_length=$seq" --set "train.max_predictions_per_seq=$preds" \
      --set "train.micro_batch_size=$micro" --set "train.steps=$steps" --set train.log_every=5 \
      --set "train.unpad=$unpad" --set "train.data=$shards/train-*.hdf5" --set 'train.eval_data=""' \
      --set "train.tokenizer=$work/spm.model" --set "train.metrics_file=$work/metrics-$seq-$unpad.jsonl" \
      > "$work/train-$seq-$unpad.log" 2>&1
  done
  python3 - "$shards" "$work/metrics-$seq-off.jsonl" "$work/metrics-$seq-on.jsonl" "$seq" <<'EOF'
import glob, json, sys
import h5py
shards, off, on, seq = sys.argv[1:]
real = total = square = 0
for path in glob.glob(shards + "/train-*.hdf5"):
    with h5py.File(path, "r") as f:
        mask = f["input_mask"][:]
        lengths = mask.astype("int64").sum(axis=1)
        real += int(lengths.sum())
        square += int((lengths * lengths).sum())
        total += mask.size
def rate(path):
    # Every log window after the first (start-up and the first reads left out), weighted equally.
    rows = [json.loads(line) for line in open(path)]
    rows = rows[1:] if len(rows) > 1 else rows
    return sum(r["seq_per_s"] for r in rows) / len(rows)
fraction = real / total
a, b = rate(off), rate(on)
kept = square / (int(seq) * real)  # sum L^2 / (T sum L)
print(f"{seq:>3}  {fraction:19.3f}  {a:16.1f}  {b:14.1f}  {b / a:7.2f}x  {0.9 / fraction:18.2f}x  {kept:14.3f}")
EOF
done
