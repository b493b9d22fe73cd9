#!/usr/bin/env bash
# Pretrains a BERT on your own text in one command:
#
#   tools/pretrain.sh TEXT_DIR [TEXT_DIR_OR_FILE ...] [--out DIR] [--preset tiny|small|base] [options]
#
# 1. trains a SentencePiece tokenizer on the text (DIR/spm.model),
# 2. writes train shards and a held-out eval shard with `bertpre prep` (DIR/shards/),
# 3. writes DIR/config.json (the preset, configs/pretrain-PRESET.json, with the tokenizer's
#    vocabulary and absolute paths to the shards, the tokenizer, DIR/checkpoints and
#    DIR/metrics.jsonl) and pretrains with `bertpre train DIR/config.json`,
# 4. evaluates the newest checkpoint on the held-out shard (DIR/eval.json),
# 5. exports it with its tokenizer for transformers (DIR/export),
# 6. plots the metrics (DIR/metrics.png),
# 7. prints a summary: where everything is, the held-out numbers, the next commands.
#
# Presets (configs/pretrain-*.json): tiny (2 layers, hidden 64, seq 64, 1,200 AdamW steps of
# 32 sequences: minutes on a CPU; the recipe of tools/demo.sh), small (4 layers, hidden 256,
# seq 128, 10,000 steps of 128 sequences: for one GPU), base (BERT-base, seq 128, 100,000 steps
# of 256 sequences: for GPUs). small and base are starting points (AdamW, linear decay) that
# have not yet been trained to the end; the tiny preset's numbers are in docs/DEMO.md.
#
# Options:
#   --out DIR             output directory (default pretrain-out); its shards, checkpoints,
#                         export, metrics and plot are replaced
#   --preset NAME         tiny, small or base (default tiny)
#   --vocab N             tokenizer pieces = the model's vocab_size (default: the preset's)
#   --format text|lines   text: running text split into sentences (default); lines: a
#                         sentence per line, blank lines between documents
#   --doc-per file|block  text format: a document per file (default) or per blank-line block
#   --pattern GLOB        files to take inside directories (default all)
#   --eval-fraction F     share of documents held out for evaluation (default 0.05)
#   --eval-batches N      micro-batches the evaluation reads (default: the preset's; 0 = all)
#   --shards N            train shards (default 4)
#   --set section.field=value   passed to `bertpre train` (repeatable), e.g. --set train.steps=300
#   --from HF_DIR         continue pretraining a published BERT instead (tools/continue_pretrain.sh)
# Environment: BERTPRE (the bertpre binary, default build/bertpre), PRETRAIN_NAME (the prefix
# of the progress lines, default "pretrain").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${PRETRAIN_NAME:-pretrain}
say() { echo "$name: $*"; }
die() { echo "$name: error: $*" >&2; exit 1; }
usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
# With --from HF_DIR: continued pretraining of a published BERT (tools/continue_pretrain.sh).
for a in "$@"; do [ "$a" != --from ] || exec "$root/tools/continue_pretrain.sh" "$@"; done

out=pretrain-out preset=tiny vocab="" format=text doc_per=file pattern="" eval_fraction=0.05 eval_batches="" shards=4
inputs=() sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage 0 ;;
    --out|--preset|--vocab|--format|--doc-per|--pattern|--eval-fraction|--eval-batches|--shards|--set)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case "$1" in
        --out) out=$2 ;; --preset) preset=$2 ;; --vocab) vocab=$2 ;; --format) format=$2 ;;
        --doc-per) doc_per=$2 ;; --pattern) pattern=$2 ;; --eval-fraction) eval_fraction=$2 ;;
        --eval-batches) eval_batches=$2 ;; --shards) shards=$2 ;; --set) sets+=(--set "$2") ;;
      esac
      shift 2 ;;
    --*) die "unknown option '$1' (tools/pretrain.sh --help lists them)" ;;
    *) inputs+=("$1"); shift ;;
  esac
done
[ ${#inputs[@]} -gt 0 ] || usage
preset_file="$root/configs/pretrain-$preset.json"
[ -f "$preset_file" ] || die "--preset '$preset': no $preset_file (presets: tiny, small, base)"
for i in "${inputs[@]}"; do [ -e "$i" ] || die "input '$i' does not exist"; done
case "$format" in text|lines) ;; *) die "--format '$format': expected text or lines" ;; esac
case "$doc_per" in file|block) ;; *) die "--doc-per '$doc_per': expected file or block" ;; esac
[[ "$vocab" =~ ^[0-9]*$ ]] || die "--vocab '$vocab': expected a whole number"
[[ "$eval_batches" =~ ^[0-9]*$ ]] || die "--eval-batches '$eval_batches': expected a whole number"

bertpre=${BERTPRE:-$root/build/bertpre}
[ -x "$bertpre" ] || die "$bertpre is not built (run tools/build.sh, or set BERTPRE)"
export PATH="$root/.venv/bin:$PATH"
# The CPU backend spreads attention and cross-entropy over the cores itself; at the tiny
# preset's sizes OpenBLAS's own threads only compete with it (a 150-step run: 23.5 s with
# two BLAS threads, 19.5 s with one).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }

# The preset's numbers the data steps need (vocabulary, sequence length, masked positions).
read -r preset_vocab seq maxpred preset_eval_batches < <(python3 - "$preset_file" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
print(c["model"]["vocab_size"], c["train"]["seq_length"], c["train"]["max_predictions_per_seq"],
      c["train"].get("eval_batches", 0))
PY
)
vocab=${vocab:-$preset_vocab}
eval_batches=${eval_batches:-$preset_eval_batches}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/shards" "$out/checkpoints" "$out/export" "$out/metrics.jsonl" "$out/metrics.png" "$out/eval.json" \
  "$out/config.json" "$out/spm.model" "$out/spm.vocab"
pattern_args=()
[ -n "$pattern" ] && pattern_args=(--pattern "$pattern")

say "training a SentencePiece tokenizer ($vocab pieces) on ${#inputs[@]} input(s) [$(elapsed)]"
"$bertpre" tokenizer train --format "$format" "${pattern_args[@]}" --vocab-size "$vocab" \
  --input-sentence-size 100000 --model-prefix "$out/spm" "${inputs[@]}"
say "writing shards: sequences of $seq tokens, a share of $eval_fraction of the documents held out [$(elapsed)]"
# --chunk-mb 64: up to 64 MB of text is one chunk, so that a random next segment comes from any
# document of it and every shard block mixes the inputs (prep's pool is the chunk).
"$bertpre" prep --tokenizer "$out/spm.model" --output "$out/shards" --format "$format" --doc-per "$doc_per" \
  "${pattern_args[@]}" --seq-length "$seq" --max-predictions "$maxpred" --shards "$shards" \
  --eval-fraction "$eval_fraction" --dupe-factor 1 --chunk-mb 64 --no-progress "${inputs[@]}"
[ -n "$(ls "$out"/shards/eval-*.hdf5 2>/dev/null)" ] ||
  die "prep held out no document for evaluation: raise --eval-fraction or give more documents"

# The run's config: the preset with absolute paths, so that it runs from any directory.
python3 - "$preset_file" "$out" "$vocab" "$eval_batches" <<'PY'
import json, sys
preset, out, vocab, eval_batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = json.load(open(preset))
c["model"]["vocab_size"] = vocab
c["train"].update(data=f"{out}/shards/train-*.hdf5", eval_data=f"{out}/shards/eval-*.hdf5",
                  tokenizer=f"{out}/spm.model", checkpoint_dir=f"{out}/checkpoints",
                  metrics_file=f"{out}/metrics.jsonl", eval_batches=eval_batches)
with open(f"{out}/config.json", "w") as f:
    json.dump(c, f, indent=2)
    f.write("\n")
PY
say "pretraining (bertpre train $out/config.json${sets[*]:+ ${sets[*]}}) [$(elapsed)]"
"$bertpre" train "$out/config.json" "${sets[@]}"
say "evaluating the checkpoint on the held-out shard (bertpre eval) [$(elapsed)]"
"$bertpre" eval "$out/checkpoints" --data "$out/shards/eval-*.hdf5" --batches "$eval_batches" --json "$out/eval.json"
say "exporting the newest checkpoint with its tokenizer for transformers [$(elapsed)]"
"$bertpre" export "$out/checkpoints" --out "$out/export"
say "plotting the metrics [$(elapsed)]"
python3 "$root/tools/plot_metrics.py" "$out/metrics.jsonl" --out "$out/metrics.png"

checkpoint=$(ls -d "$out"/checkpoints/step-* | sort | tail -1)
python3 - "$name" "$out" "$checkpoint" "$(elapsed)" "${sets[*]:-}" <<'PY'
import json, sys
name, out, checkpoint, took, sets = sys.argv[1:]
lines = [json.loads(l) for l in open(f"{out}/metrics.jsonl") if l.strip()]
train = [l for l in lines if not l.get("eval")]
e = json.load(open(f"{out}/eval.json"))
print(f"\n{name}: done in {took}. Outputs:")
print(f"  config      {out}/config.json")
print(f"  checkpoint  {checkpoint}")
print(f"  export      {out}/export  (transformers: AutoModelForPreTraining, AutoTokenizer)")
print(f"  metrics     {out}/metrics.jsonl")
print(f"  plot        {out}/metrics.png")
print(f"  evaluation  {out}/eval.json")
if train:
    t = train[-1]
    print(f"  last steps  (step {t['step']}): MLM loss {t['mlm_loss']:.3f}, MLM accuracy {t['mlm_accuracy']:.3f}, "
          f"NSP accuracy {t['nsp_accuracy']:.3f}")
print(f"  held out    ({e['sequences']} sequences): MLM accuracy {e['mlm_accuracy']:.3f} (most frequent token "
      f"alone: {e['mlm_baseline_accuracy']:.3f}), NSP accuracy {e['nsp_accuracy']:.3f} (chance: 0.5), "
      f"MLM loss {e['mlm_loss']:.3f}")
print("next:")
print(f"  tools/finetune.py {out}/export --data LABELLED_DIR_OR_TSV   # fine-tune it on your labelled text")
print(f"  tools/plot_metrics.py {out}/metrics.jsonl OTHER.jsonl --out compare.png   # compare runs")
print(f"  build/bertpre export {checkpoint} --out DIR --dtype fp16   # a half-size export")
print(f"  build/bertpre train {out}/config.json{' ' + sets if sets else ''} --resume auto   # continue a stopped run")
PY
