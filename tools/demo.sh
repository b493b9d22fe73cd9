#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, and pretrains a tiny BERT on the CPU on
# real English text, the reStructuredText sources of the Linux kernel documentation (Debian
# package linux-doc-6.1, without its translations: about 2,800 documents). It trains a
# SentencePiece tokenizer, writes train shards and a held-out eval shard with `bertpre prep`,
# pretrains with `bertpre train configs/demo-corpus.json` (a checkpoint, a metrics file and an
# evaluation on the held-out documents at the end), evaluates the checkpoint with `bertpre
# eval`, exports the model and its tokenizer for transformers, plots the metrics and prints
# where everything is. About 5 minutes on 2 cores.
# Extra arguments go to 'bertpre train' (for example --set train.steps=100).
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
cd "$root"
started=$(date +%s)
say() { echo "demo: $*"; }
elapsed() { echo "$(($(date +%s) - started)) s"; }

if [ -z "${DEMO_NO_SETUP:-}" ]; then
  say "checking the Debian and Python packages (tools/setup.sh; installing what is missing takes minutes, once)"
  tools/setup.sh
  say "building bertpre (tools/build.sh: meson and ninja, about a minute the first time)"
  tools/build.sh
fi
export PATH="$root/.venv/bin:$PATH"
# The CPU backend spreads attention and cross-entropy over the cores itself; at the demo's
# sizes OpenBLAS's own threads only compete with it (a 150-step run: 23.5 s with two BLAS
# threads, 19.5 s with one).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
bertpre=${DEMO_BERTPRE:-build/bertpre}
work=${DEMO_WORK:-build/demo}
vocab=${DEMO_VOCAB:-8000}
eval_fraction=${DEMO_EVAL_FRACTION:-0.02}
eval_batches=${DEMO_EVAL_BATCHES:-50}
corpus=$(ls -d /usr/share/doc/linux-doc-*/Documentation 2>/dev/null | sort | tail -1 || true)
if [ -z "$corpus" ]; then
  echo "demo: error: the linux-doc corpus is not installed (tools/setup.sh installs linux-doc-6.1)" >&2
  exit 1
fi

# The English documents: every subtree and top-level .rst file except translations/.
inputs=()
if [ -n "${DEMO_SUBTREES:-}" ]; then
  for s in $DEMO_SUBTREES; do inputs+=("$corpus/$s"); done
else
  for e in "$corpus"/*; do
    case "$(basename "$e")" in translations) continue ;; esac
    if [ -d "$e" ]; then
      [ -n "$(find "$e" -name '*.rst.gz' -print -quit)" ] && inputs+=("$e")
    elif [[ "$e" == *.rst.gz ]]; then
      inputs+=("$e")
    fi
  done
fi
mkdir -p "$work"
rm -rf "$work/shards" "$work/checkpoints" "$work/export" "$work/metrics.jsonl" "$work/metrics.png" "$work/eval.json"

say "training a SentencePiece tokenizer ($vocab pieces) on ${#inputs[@]} inputs from $corpus (about 20 s) [$(elapsed)]"
"$bertpre" tokenizer train --format text --pattern '*.rst.gz' --vocab-size "$vocab" --input-sentence-size 100000 \
  --model-prefix "$work/spm" "${inputs[@]}"
say "writing shards: sequences of 64 tokens, next segments from another document of the whole corpus, a share of $eval_fraction of the documents held out [$(elapsed)]"
# --chunk-mb 64: the whole corpus is one chunk, so that a random next segment comes from any
# document and every shard block mixes all subtrees (prep's pool is the chunk).
"$bertpre" prep --tokenizer "$work/spm.model" --output "$work/shards" --format text --pattern '*.rst.gz' \
  --seq-length 64 --max-predictions 10 --shards 4 --eval-fraction "$eval_fraction" --dupe-factor 1 --chunk-mb 64 \
  --no-progress "${inputs[@]}"
say "pretraining (bertpre train configs/demo-corpus.json) [$(elapsed)]"
"$bertpre" train configs/demo-corpus.json --set "model.vocab_size=$vocab" \
  --set "train.data=$work/shards/train-*.hdf5" --set "train.eval_data=$work/shards/eval-*.hdf5" \
  --set "train.tokenizer=$work/spm.model" --set "train.checkpoint_dir=$work/checkpoints" \
  --set "train.metrics_file=$work/metrics.jsonl" --set "train.eval_batches=$eval_batches" "$@"
say "evaluating the checkpoint on the held-out shard (bertpre eval) [$(elapsed)]"
"$bertpre" eval "$work/checkpoints" --data "$work/shards/eval-*.hdf5" --batches "$eval_batches" \
  --json "$work/eval.json"
say "exporting the newest checkpoint with its tokenizer for transformers [$(elapsed)]"
"$bertpre" export "$work/checkpoints" --out "$work/export"
say "plotting the metrics [$(elapsed)]"
python3 tools/plot_metrics.py "$work/metrics.jsonl" --out "$work/metrics.png"

checkpoint=$(ls -d "$work"/checkpoints/step-* | sort | tail -1)
python3 - "$work" "$checkpoint" "$(elapsed)" <<'PY'
import json, sys
work, checkpoint, took = sys.argv[1:]
lines = [json.loads(l) for l in open(f"{work}/metrics.jsonl") if l.strip()]
train = [l for l in lines if not l.get("eval")]
ev = [json.load(open(f"{work}/eval.json"))]
print(f"\ndemo: done in {took}. Outputs:")
print(f"  checkpoint  {checkpoint}")
print(f"  export      {work}/export  (transformers: AutoModelForPreTraining, AutoTokenizer)")
print(f"  metrics     {work}/metrics.jsonl")
print(f"  plot        {work}/metrics.png")
print(f"  evaluation  {work}/eval.json")
if train:
    t = train[-1]
    print(f"  last steps  (step {t['step']}): MLM loss {t['mlm_loss']:.3f}, MLM accuracy {t['mlm_accuracy']:.3f}, "
          f"NSP accuracy {t['nsp_accuracy']:.3f}")
if ev:
    e = ev[-1]
    print(f"  held out    ({e['sequences']} sequences): MLM accuracy {e['mlm_accuracy']:.3f} (most frequent token "
          f"alone: {e['mlm_baseline_accuracy']:.3f}), NSP accuracy {e['nsp_accuracy']:.3f} (chance: 0.5), "
          f"MLM loss {e['mlm_loss']:.3f}")
print("next:")
print(f"  tools/finetune.py {work}/export      # fine-tune it: tell networking from filesystems paragraphs")
print("  tools/demo.sh --set train.steps=3000   # a longer run (2.5 times the training steps)")
print(f"  build/bertpre export {checkpoint} --out DIR --dtype fp16   # a half-size export")
print(f"  tools/plot_metrics.py {work}/metrics.jsonl OTHER.jsonl --out compare.png   # compare runs")
print("  docs/GUIDE.md: from raw text to a fine-tuned model at real scale")
PY
