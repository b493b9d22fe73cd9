#!/usr/bin/env bash
# Continued (domain-adaptive) pretraining of a published BERT on your own text; what
# `tools/pretrain.sh TEXT_DIR --from HF_DIR` runs:
#
#   tools/pretrain.sh TEXT_DIR [TEXT_DIR_OR_FILE ...] --from HF_DIR [--out DIR] [options]
#
# HF_DIR is a transformers BERT directory: config.json, model.safetensors, and its WordPiece
# tokenizer as vocab.txt (with tokenizer_config.json for the casing) or as the fast
# tokenizer's tokenizer.json alone.
# 1. imports the weights (bertpre import -> DIR/start),
# 2. writes train shards and a held-out eval shard with the model's own tokenizer (DIR/shards/;
#    the vocab.txt, or DIR/tokenizer/vocab.txt taken out of tokenizer.json),
# 3. writes DIR/config.json: the model of HF_DIR/config.json and the continued-pretraining
#    preset configs/continue-base.json (below), with absolute paths,
# 4. evaluates the starting model on the held-out shard (DIR/eval-start.json),
# 5. trains from its weights (bertpre train DIR/config.json --init-from DIR/start),
# 6. evaluates the continued model on the same held-out rows (DIR/eval.json) and prints both,
# 7. exports it with the tokenizer for transformers (DIR/export).
#
# The preset: AdamW, 256 sequences of 128 tokens a step, peak learning rate 5e-5 (half of
# BERT-base's 1e-4 pretraining rate at that batch, Devlin et al. 2019), warmup over the first
# 6% of the steps and 12,500 steps (the domain-adaptive pretraining of Gururangan et al. 2020,
# "Don't Stop Pretraining", whose peak, 5e-4 at 2,048 sequences, sits below RoBERTa's 6e-4),
# linear decay. Change any of it with --set (e.g. --set train.steps=2000).
#
# Options:
#   --from HF_DIR         the published model (required)
#   --out DIR             output directory (default continue-out); its shards, checkpoints,
#                         export and evaluations are replaced. One run at a time uses it: a
#                         second (of this script or of tools/pretrain.sh) is refused, naming
#                         the first, before anything there is removed
#   --format text|lines|jsonl|parquet, --doc-per file|block, --pattern GLOB, --text-field NAME
#                         the text, as for `bertpre prep` (default: running text)
#   --eval-fraction F     share of documents held out for evaluation (default 0.05)
#   --eval-batches N      micro-batches each evaluation reads (default 100; 0 = all)
#   --shards N            train shards (default 4)
#   --objective mlm+nsp|mlm   what is trained (train.objective); default: what HF_DIR is, mlm for
#                         a BertForMaskedLM (it has no NSP head), else mlm+nsp; mlm+nsp from a
#                         BertForMaskedLM starts a fresh pooler and NSP head
#   --packing pairs|full-sentences|doc-sentences|contiguous   the shards' rows (bertpre prep
#                         --packing); default pairs with mlm+nsp, full-sentences with mlm
#   --mask-prob F         dynamic masking at rate F (train.dynamic_masking, train.mask_prob);
#                         default: prep's 15%, stored; the held-out rows keep 15% either way
#   --whole-word-mask     mask whole words (prep --whole-word-mask; train.whole_word_mask)
#   --set section.field=value   passed to `bertpre train` (repeatable)
# Environment: BERTPRE (the bertpre binary, default build/bertpre).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${PRETRAIN_NAME:-pretrain}
say() { echo "$name: $*"; }
die() { echo "$name: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }

from="" out=continue-out format=text doc_per=file pattern="" text_field="" eval_fraction=0.05 eval_batches=100 shards=4
objective="" packing="" mask_prob="" whole_words=0
inputs=() sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage 0 ;;
    --whole-word-mask) whole_words=1; shift ;;
    --from|--out|--format|--doc-per|--pattern|--text-field|--eval-fraction|--eval-batches|--shards|--set|--objective|--packing|--mask-prob)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case "$1" in
        --from) from=$2 ;; --out) out=$2 ;; --format) format=$2 ;; --doc-per) doc_per=$2 ;;
        --pattern) pattern=$2 ;; --text-field) text_field=$2 ;; --eval-fraction) eval_fraction=$2 ;;
        --eval-batches) eval_batches=$2 ;; --shards) shards=$2 ;; --set) sets+=(--set "$2") ;;
        --objective) objective=$2 ;; --packing) packing=$2 ;; --mask-prob) mask_prob=$2 ;;
      esac
      shift 2 ;;
    --*) die "unknown option '$1' (tools/pretrain.sh --from HF_DIR --help lists them)" ;;
    *) inputs+=("$1"); shift ;;
  esac
done
[ ${#inputs[@]} -gt 0 ] && [ -n "$from" ] || usage
for i in "${inputs[@]}"; do [ -e "$i" ] || die "input '$i' does not exist"; done
[ -d "$from" ] || die "--from '$from': not a directory"
from=$(cd "$from" && pwd)
[ -f "$from/config.json" ] || die "--from '$from': no config.json (a transformers BERT directory has one)"
[ -f "$from/model.safetensors" ] ||
  die "--from '$from': no model.safetensors (convert a pytorch_model.bin with transformers' save_pretrained)"
[ -f "$from/vocab.txt" ] || [ -f "$from/tokenizer.json" ] ||
  die "--from '$from': no vocab.txt and no tokenizer.json: the model's WordPiece tokenizer is needed"
case "$format" in text|lines|jsonl|parquet) ;; *) die "--format '$format': expected text, lines, jsonl or parquet" ;; esac
case "$doc_per" in file|block) ;; *) die "--doc-per '$doc_per': expected file or block" ;; esac
[[ "$eval_batches" =~ ^[0-9]+$ ]] || die "--eval-batches '$eval_batches': expected a whole number"
case "$objective" in ""|mlm+nsp|mlm) ;; *) die "--objective '$objective': expected mlm+nsp or mlm" ;; esac
case "$packing" in ""|pairs|full-sentences|doc-sentences|contiguous) ;;
  *) die "--packing '$packing': expected pairs, full-sentences, doc-sentences or contiguous" ;; esac
[ "$objective" != mlm+nsp ] || [ -z "$packing" ] || [ "$packing" = pairs ] ||
  die "--packing $packing makes MLM-only rows (no next-sentence pairs) and --objective mlm+nsp trains next-sentence prediction: give --objective mlm, or --packing pairs"
if [ -n "$mask_prob" ]; then
  awk -v f="$mask_prob" 'BEGIN { exit !(f ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && f > 0 && f < 1) }' ||
    die "--mask-prob '$mask_prob': expected a share above 0 and below 1"
fi

bertpre=${BERTPRE:-$root/build/bertpre}
[ -x "$bertpre" ] || die "$bertpre is not built (run tools/build.sh, or set BERTPRE)"
export PATH="$root/.venv/bin:$PATH"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }
preset="$root/configs/continue-base.json"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One run per --out, the lock of tools/pretrain.sh (the same file, so neither kind of run
# takes a folder the other is using), held by this script and all it starts, taken before
# anything there is removed.
exec 9>>"$out/.pretrain-lock"
flock -n 9 || die "$out is in use by another run of tools/pretrain.sh ($(head -1 "$out/.pretrain-lock")): a second run there would remove its checkpoints and shards. Wait for it to end, stop it, or choose another --out; nothing was changed"
echo "host $(hostname), pid $$, started $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >"$out/.pretrain-lock"
rm -rf "$out/start" "$out/shards" "$out/checkpoints" "$out/export" "$out/tokenizer" "$out/metrics.jsonl" \
  "$out/eval-start.json" "$out/eval.json" "$out/config.json"

# The tokenizer: vocab.txt as it is (its tokenizer_config.json gives the casing), or the
# WordPiece vocabulary of tokenizer.json written out as the same two files, with the casing
# transformers' AutoTokenizer gives the directory: tokenizer_config.json's do_lower_case
# (true when absent) and strip_accents, over tokenizer.json's normalizer, unless the config
# names PreTrainedTokenizerFast (which takes tokenizer.json as it is). A disagreement is a
# warning naming both files.
if [ -f "$from/vocab.txt" ]; then
  vocab="$from/vocab.txt"
else
  mkdir -p "$out/tokenizer"
  python3 - "$from/tokenizer.json" "$out/tokenizer" "$from/tokenizer_config.json" "$name" <<'PY' || exit 1
import json, os, sys
path, out, config_path, name = sys.argv[1:5]
t = json.load(open(path, encoding="utf-8"))
model = t.get("model") or {}
if model.get("type") != "WordPiece":
    sys.exit(f"{path}: model type {model.get('type')!r}, not WordPiece: not a BERT tokenizer")
vocab = model["vocab"]
ids = sorted(vocab.values())
if ids != list(range(len(ids))):
    sys.exit(f"{path}: the WordPiece ids are not 0..{len(ids) - 1} without gaps")
norm = t.get("normalizer") or {}
if norm.get("type") != "BertNormalizer":
    sys.exit(f"{path}: normalizer {norm.get('type')!r}, not BertNormalizer: not BERT's text rules")
lower = bool(norm.get("lowercase", True))
strip = norm.get("strip_accents")
config = {}
if os.path.exists(config_path):
    try:
        config = json.load(open(config_path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        sys.exit(f"{config_path}: cannot be read as JSON ({e}): fix or remove it")
    if not isinstance(config, dict):
        sys.exit(f"{config_path}: a JSON {type(config).__name__}, not an object of settings")
if config.get("tokenizer_class") != "PreTrainedTokenizerFast":
    if bool(config.get("do_lower_case", True)) != lower:
        said = (f"do_lower_case {str(config['do_lower_case']).lower()}" if "do_lower_case" in config
                else "no do_lower_case" if config else "nothing (it is absent)")
        print(f"{name}: warning: {path} says lowercase {str(lower).lower()} but {config_path} says {said}: the text "
              f"is {'lower-cased' if not lower else 'kept cased'}, as transformers' AutoTokenizer reads the "
              "directory (tokenizer_config.json's do_lower_case wins, true when absent); set do_lower_case there if "
              "the model was trained otherwise", file=sys.stderr)
    lower = bool(config.get("do_lower_case", True))
    strip = config.get("strip_accents")
with open(f"{out}/vocab.txt", "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(tok + "\n" for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
with open(f"{out}/tokenizer_config.json", "w") as f:
    json.dump({"do_lower_case": lower, "strip_accents": strip, "tokenizer_class": "BertTokenizer"}, f)
    f.write("\n")
print(f"{len(ids)} tokens, do_lower_case {lower}")
PY
  vocab="$out/tokenizer/vocab.txt"
  say "took the WordPiece vocabulary of $from/tokenizer.json into $vocab"
fi
"$bertpre" tokenizer info --model "$vocab" >/dev/null

read -r seq maxpred < <(python3 - "$preset" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["train"]
print(t["seq_length"], t["max_predictions_per_seq"])
PY
)
for s in "${sets[@]}"; do
  case "$s" in train.seq_length=*) seq=${s#*=} ;; train.max_predictions_per_seq=*) maxpred=${s#*=} ;; esac
done

say "importing the weights of $from [$(elapsed)]"
"$bertpre" import "$from" --out "$out/start"
# The objective: what the model is (a BertForMaskedLM has no NSP head), unless given.
arch=BertForPreTraining
grep -q '"BertForMaskedLM"' "$out/start/state.json" && arch=BertForMaskedLM
if [ -z "$objective" ]; then
  objective=mlm+nsp
  case "$packing" in ""|pairs) [ "$arch" = BertForMaskedLM ] && objective=mlm ;; *) objective=mlm ;; esac
  say "objective $objective ($from is a $arch; --objective chooses)"
fi
[ -n "$packing" ] || { [ "$objective" = mlm ] && packing=full-sentences || packing=pairs; }
sets=(--set "train.objective=$objective" "${sets[@]}")
mask_args=()
if [ -n "$mask_prob" ]; then
  maxpred=$(awk -v s="$seq" -v f="$mask_prob" -v m="$maxpred" 'BEGIN { n = s * f; r = int(n + 0.5); if (n + 0.5 == r && r % 2) r--; print (r > m ? r : m) }')
  mask_args=(--set train.dynamic_masking=1 --set "train.mask_prob=$mask_prob" --set "train.max_predictions_per_seq=$maxpred")
  [ "$whole_words" = 0 ] || mask_args+=(--set train.whole_word_mask=1)
fi
sets=("${mask_args[@]}" "${sets[@]}")
say "writing shards with the model's tokenizer ($vocab): sequences of $seq tokens, a share of $eval_fraction of the documents held out [$(elapsed)]"
prep_args=(--format "$format" --doc-per "$doc_per" --packing "$packing")
[ "$whole_words" = 1 ] && prep_args+=(--whole-word-mask)
[ -n "$pattern" ] && prep_args+=(--pattern "$pattern")
[ -n "$text_field" ] && prep_args+=(--text-field "$text_field")
"$bertpre" prep --tokenizer "$vocab" --output "$out/shards" "${prep_args[@]}" --seq-length "$seq" \
  --max-predictions "$maxpred" --shards "$shards" --eval-fraction "$eval_fraction" --dupe-factor 1 --chunk-mb 64 \
  --no-progress "${inputs[@]}"
[ -n "$(ls "$out"/shards/eval-*.hdf5 2>/dev/null)" ] ||
  die "prep held out no document for evaluation: raise --eval-fraction or give more documents"

python3 - "$preset" "$from" "$out" "$vocab" "$eval_batches" <<'PY'
import json, sys
preset, src, out, vocab, eval_batches = sys.argv[1:]
c = json.load(open(preset))
c["model"] = f"{src}/config.json"
c["train"].update(data=f"{out}/shards/train-*.hdf5", eval_data=f"{out}/shards/eval-*.hdf5", tokenizer=vocab,
                  checkpoint_dir=f"{out}/checkpoints", metrics_file=f"{out}/metrics.jsonl",
                  eval_batches=int(eval_batches))
with open(f"{out}/config.json", "w") as f:
    json.dump(c, f, indent=2)
    f.write("\n")
PY
# Both evaluations read the same rows: the same micro-batch, the same number of them.
micro=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['train']['micro_batch_size'])" "$out/config.json")
for s in "${sets[@]}"; do case "$s" in train.micro_batch_size=*) micro=${s#*=} ;; esac; done
eval_args=(--data "$out/shards/eval-*.hdf5" --batches "$eval_batches" --micro-batch "$micro")
say "evaluating the starting model on the held-out shard [$(elapsed)]"
"$bertpre" eval "$out/start" "${eval_args[@]}" --json "$out/eval-start.json"
say "continuing pretraining (bertpre train $out/config.json --init-from $out/start${sets[*]:+ ${sets[*]}}) [$(elapsed)]"
"$bertpre" train "$out/config.json" --init-from "$out/start" "${sets[@]}"
say "evaluating the continued model on the same held-out rows [$(elapsed)]"
"$bertpre" eval "$out/checkpoints" "${eval_args[@]}" --json "$out/eval.json"
say "exporting it with its tokenizer for transformers [$(elapsed)]"
"$bertpre" export "$out/checkpoints" --out "$out/export"

python3 - "$name" "$out" "$from" "$(elapsed)" <<'PY'
import json, sys
name, out, src, took = sys.argv[1:]
a, b = json.load(open(f"{out}/eval-start.json")), json.load(open(f"{out}/eval.json"))
nsp = lambda e: f", NSP accuracy {e['nsp_accuracy']:.3f}" if "nsp_accuracy" in e else ""  # none without the head
print(f"\n{name}: continued {src} in {took}. Held out ({b['sequences']} sequences):")
print(f"  starting model   MLM accuracy {a['mlm_accuracy']:.3f}, MLM loss {a['mlm_loss']:.3f}{nsp(a)}   "
      f"({out}/eval-start.json)")
print(f"  continued model  MLM accuracy {b['mlm_accuracy']:.3f}, MLM loss {b['mlm_loss']:.3f}{nsp(b)}   "
      f"({out}/eval.json)")
auto = "AutoModelForMaskedLM" if b.get("objective") == "mlm" else "AutoModelForPreTraining"
print(f"  export           {out}/export  (transformers: {auto}, AutoTokenizer)")
print(f"  config           {out}/config.json, checkpoints in {out}/checkpoints")
PY
