#!/usr/bin/env bash
# Training throughput on one GPU, bertpre against PyTorch + transformers with AMP, side by
# side on the same shapes (docs/ARCHITECTURE.md §9). Run on a GPU machine after tools/gpu_suite.sh
# has built build-gpu/:
#
#   tools/bench_gpu.sh [MODEL_CONFIG [SEQ MICRO_BATCH]]   default: BERT-large, 128, 64
#
# bertpre trains a few steps of 2 accumulated micro-batches on synthetic data with a
# metrics file; its steady-state sequences/s (first two steps left out), model TFLOP/s and %
# of peak are read from there. PyTorch runs BertForPreTraining under torch.autocast(fp16)
# with a GradScaler on the same micro-batch (tools/bench_torch.py). Results go to $OUT (or
# gpu-results/) and the table is printed last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=${1:-configs/bert-large.json}
seq=${2:-128}
micro=${3:-64}
out=${OUT:-$root/gpu-results}
mkdir -p "$out"
bin=build-gpu/bertpre
[ -x "$bin" ] || { echo "bench_gpu: $bin missing: run tools/gpu_suite.sh run first" >&2; exit 1; }
cat >"$out/bench-config.json" <<JSON
{"model": "$root/$model", "train": {"backend": "cuda", "precision": "fp16", "micro_batch_size": $micro,
 "global_batch_size": $((2 * micro)), "seq_length": $seq, "max_predictions_per_seq": $((seq * 20 / 128)),
 "steps": 12, "learning_rate": 1e-4, "warmup_proportion": 0.1, "log_every": 1,
 "metrics_file": "$out/bertpre-metrics.jsonl"}}
JSON
"$bin" train "$out/bench-config.json" >"$out/bertpre-bench.log" 2>&1 || { tail -20 "$out/bertpre-bench.log"; exit 1; }
python3 tools/bench_torch.py "$model" "$seq" "$micro" >"$out/torch-bench.log" 2>&1 || { tail -20 "$out/torch-bench.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/bertpre-metrics.jsonl")][2:]
ours = sum(r["seq_per_s"] for r in rows) / len(rows)
tflops = sum(r["model_tflops"] for r in rows) / len(rows)
peak = rows[-1]["peak_percent"]
torch_line = [l for l in open(f"{out}/torch-bench.log") if l.startswith("seq_per_s")][-1]
theirs = float(torch_line.split()[1])
table = (f"bertpre  {ours:10.1f} seq/s  {tflops:7.1f} model TFLOP/s  "
         f"{'%.1f%% of peak' % peak if peak is not None else 'peak unknown'}\n"
         f"pytorch  {theirs:10.1f} seq/s  (transformers BertForPreTraining, AMP fp16)\n"
         f"ratio    {ours / theirs:10.2f}\n")
open(f"{out}/bench-summary.txt", "w").write(table)
print(table, end="")
PY
