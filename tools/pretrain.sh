#!/usr/bin/env bash
# Pretrains a BERT on your own text in one command:
#
#   tools/pretrain.sh TEXT_DIR [TEXT_DIR_OR_FILE ...] [--out DIR] [--preset tiny|small|base] [options]
#   tools/pretrain.sh --resume DIR      continues a stopped run of DIR, then steps 4 to 7
#
# 1. trains a SentencePiece tokenizer on the text (DIR/spm.model),
# 2. writes train shards and a held-out eval shard with `bertpre prep` (DIR/shards/),
# 3. writes DIR/config.json (the preset, configs/pretrain-PRESET.json, with the tokenizer's
#    vocabulary, every --set, and absolute paths to the shards, the tokenizer, DIR/checkpoints
#    and DIR/metrics.jsonl) and pretrains with `bertpre train DIR/config.json`,
# 4. evaluates the newest checkpoint on the held-out shard (DIR/eval.json),
# 5. exports it with its tokenizer for transformers (DIR/export),
# 6. plots the metrics (DIR/metrics.png),
# 7. prints a summary: where everything is, the held-out numbers, the next commands.
# A training that stops early (Ctrl-C, SIGTERM) or fails ends the script there, with a message:
# a partial model is not evaluated, exported or plotted; `--resume DIR` continues it.
#
# Presets (configs/pretrain-*.json): tiny (2 layers, hidden 64, seq 64, 1,200 AdamW steps of
# 32 sequences: minutes on a CPU; the recipe of tools/demo.sh), small (4 layers, hidden 256,
# seq 128, 10,000 steps of 128 sequences: for one GPU), base (BERT-base, seq 128, 100,000 steps
# of 256 sequences: for GPUs). small and base are starting points (AdamW, linear decay) that
# have not yet been trained to the end; the tiny preset's numbers are in docs/DEMO.md.
#
# Options:
#   --out DIR             output directory (default pretrain-out). One run at a time uses it
#                         (a second is refused, naming the first). A finished run's outputs
#                         there move to DIR/previous when a new run starts and are removed when
#                         it has finished (put back if it fails before training)
#   --preset NAME         tiny, small or base (default tiny)
#   --vocab N             tokenizer pieces = the model's vocab_size (default: the preset's;
#                         lowered, with a notice, to the most the text gives)
#   --seq-length N        tokens per sequence, for the shards and the model (default: the
#                         preset's); masked positions 15% of it
#   --format text|lines   text: running text split into sentences (default); lines: a
#                         sentence per line, blank lines between documents
#   --doc-per file|block  text format: a document per file or per blank-line block (default:
#                         file, or block when the files are too few to hold out two)
#   --pattern GLOB        files to take inside directories (default all)
#   --eval-fraction F     share of documents held out for evaluation (default 0.05; at most 0.5)
#   --eval-batches N      micro-batches the evaluation reads (default: the preset's; 0 = all)
#   --shards N            train shards (default 4)
#   --objective mlm+nsp|mlm   BERT's masked LM and next-sentence prediction (default), or the
#                         masked LM alone (train.objective; a BertForMaskedLM export)
#   --packing pairs|full-sentences|doc-sentences|contiguous   the shards' rows (bertpre prep
#                         --packing): NSP pairs (default with mlm+nsp), or MLM-only rows of
#                         running text (full-sentences, RoBERTa's, is the default with mlm)
#   --mask-prob F         mask a share F of each row afresh every epoch (train.dynamic_masking,
#                         train.mask_prob; e.g. 0.3 as MosaicBERT); default: prep's 15%, stored.
#                         The held-out rows keep prep's 15% either way
#   --whole-word-mask     mask whole words (prep --whole-word-mask; train.whole_word_mask with
#                         --mask-prob)
#   --strict              binary or non-UTF-8 input files, and text that gives poor instances,
#                         are errors (else: reported, binary files left out)
#   --set section.field=value   any config field, written into DIR/config.json (repeatable),
#                         e.g. --set train.steps=300; train.checkpoint_dir and
#                         train.metrics_file may point elsewhere; train.data, train.eval_data
#                         and train.tokenizer are the script's own
#   --from HF_DIR         continue pretraining a published BERT instead (tools/continue_pretrain.sh)
# Every option is checked (the config with `bertpre train --dry-run`) before anything is
# written. Environment: BERTPRE (the bertpre binary, default build/bertpre), PRETRAIN_NAME (the
# prefix of the progress lines, default "pretrain"), PRETRAIN_FROM (the directory the printed
# commands are relative to, default the current one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${PRETRAIN_NAME:-pretrain}
export PRETRAIN_NAME=$name
say() { echo "$name: $*"; }
warn() { echo "$name: warning: $*" >&2; }
die() { echo "$name: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
# A path as a command takes it from where the script was started: relative below it, else absolute.
shown() { realpath -s -m --relative-base="${PRETRAIN_FROM:-$PWD}" -- "$1"; }
program() { local p; p=$(shown "$1"); [[ "$p" == */* ]] && echo "$p" || echo "./$p"; }  # runnable as printed
# With --from HF_DIR: continued pretraining of a published BERT (tools/continue_pretrain.sh).
for a in "$@"; do [ "$a" != --from ] || exec "$root/tools/continue_pretrain.sh" "$@"; done

out=pretrain-out preset=tiny vocab="" seq_length="" format=text doc_per="" pattern="" eval_fraction=0.05
eval_batches="" shards=4 strict=0 resume="" objective="" packing="" mask_prob="" whole_words=0
inputs=() sets=() given=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage 0 ;;
    --strict) strict=1; given+=("$1"); shift ;;
    --whole-word-mask) whole_words=1; given+=("$1"); shift ;;
    --out|--preset|--vocab|--seq-length|--format|--doc-per|--pattern|--eval-fraction|--eval-batches|--shards|--set|--resume|--objective|--packing|--mask-prob)
      [ $# -ge 2 ] || die "option $1 needs a value"
      case "$1" in
        --out) out=$2 ;; --preset) preset=$2 ;; --vocab) vocab=$2 ;; --seq-length) seq_length=$2 ;;
        --format) format=$2 ;; --doc-per) doc_per=$2 ;; --pattern) pattern=$2 ;;
        --eval-fraction) eval_fraction=$2 ;; --eval-batches) eval_batches=$2 ;; --shards) shards=$2 ;;
        --set) sets+=(--set "$2") ;; --resume) resume=$2 ;;
        --objective) objective=$2 ;; --packing) packing=$2 ;; --mask-prob) mask_prob=$2 ;;
      esac
      [ "$1" = --resume ] || given+=("$1")
      shift 2 ;;
    --*) die "unknown option '$1' (tools/pretrain.sh --help lists them)" ;;
    *) inputs+=("$1"); shift ;;
  esac
done

bertpre=${BERTPRE:-$root/build/bertpre}
[ -x "$bertpre" ] || die "$bertpre is not built (run tools/setup.sh, then tools/build.sh; or set BERTPRE)"
steps_py=("$(command -v python3 || die "python3 is not installed (tools/setup.sh installs it)")" "$root/tools/pretrain_steps.py")
export PATH="$root/.venv/bin:$PATH"
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }
tmp=$(mktemp -d)
set_aside=""   # how the outputs of the run before were set aside: moved, dropped (unfinished), or none
training=0
on_exit() {
  local status=$?
  rm -rf "$tmp"
  # A run that failed before training: the run before it is put back as it was.
  if [ "$status" -ne 0 ] && [ "$training" = 0 ] && [ "$set_aside" = moved ]; then
    remove_outputs
    mv "$out"/previous/* "$out"/previous/.[!.]* "$out/" 2>/dev/null || true
    rmdir "$out/previous" 2>/dev/null || true
    echo "$name: the previous run's outputs are back in $(shown "$out")" >&2
  fi
}
trap on_exit EXIT

# The outputs of a run in --out (checkpoints and metrics elsewhere, by --set, stay where they are).
outputs=(shards checkpoints export metrics.png eval.json config.json spm.model spm.vocab metrics.jsonl)
remove_outputs() {
  local o
  for o in "${outputs[@]}"; do rm -rf "${out:?}/$o"; done
  rm -f "$out"/metrics.jsonl.*
}

# One run per --out: a lock held by this script and every process it starts until they end.
lock_out() {
  mkdir -p "$out"
  exec 9>>"$out/.pretrain-lock"
  if ! flock -n 9; then
    die "$(shown "$out") is in use by another run of tools/pretrain.sh ($(head -1 "$out/.pretrain-lock")): a second run there would remove its checkpoints and shards. Wait for it to end, stop it, or choose another --out; nothing was changed"
  fi
  echo "host $(hostname), pid $$, started $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >"$out/.pretrain-lock"
  locked=1
}

# Trains, then (training finished) evaluates, exports, plots and sums up; a run that stopped
# early or failed ends here with what to do next.
train_and_finish() {
  local fields
  fields=$("${steps_py[@]}" fields "$out/config.json") || exit 1
  eval "$fields"
  local interrupted=0 status=0
  training=1
  trap 'interrupted=1' INT
  "$bertpre" train "$out/config.json" --no-next "$@" || status=$?
  trap - INT
  local checkpoint step=0
  checkpoint=$(ls -d "$checkpoint_dir"/step-*/COMPLETE 2>/dev/null | sort | tail -1 || true)
  checkpoint=${checkpoint%/COMPLETE}
  [ -n "$checkpoint" ] && step=$((10#${checkpoint##*step-}))
  local again kept=""
  again=$(printf '%q --resume %q' "$(program "$root/tools/pretrain.sh")" "$(shown "$out")")
  [ -d "$out/previous" ] && kept=" The run before stays in $(shown "$out/previous") until this one has finished."
  if [ "$status" -ne 0 ]; then
    die "training failed (bertpre train exited $status; its messages are above), at step $step of $steps: nothing was evaluated, exported or plotted.$kept Once the cause is fixed, continue it with: $again"
  fi
  if [ "$interrupted" = 1 ] || [ "$step" -lt "$steps" ]; then
    local how=""
    [ "$interrupted" = 1 ] && how=" (Ctrl-C)"
    echo "$name: training stopped at step $step of $steps$how: a partial model is not evaluated, exported or plotted.$kept Continue it with: $again" >&2
    [ "$interrupted" = 1 ] && exit 130 || exit 1
  fi
  say "evaluating the checkpoint on the held-out shard (bertpre eval) [$(elapsed)]"
  "$bertpre" eval "$checkpoint_dir" --data "$eval_data" --batches "$eval_batches" --json "$out/eval.json"
  say "exporting the newest checkpoint with its tokenizer for transformers [$(elapsed)]"
  rm -rf "$out/export"
  "$bertpre" export "$checkpoint_dir" --out "$out/export"
  say "plotting the metrics [$(elapsed)]"
  "$root/tools/plot_metrics.py" "$metrics_file" --labels "$(basename "$out")" --out "$out/metrics.png"
  rm -rf "$out/previous"
  "${steps_py[@]}" summary "$name" "$out/config.json" "$out" "$checkpoint" "$(elapsed)" "$bertpre"
}

if [ -n "$resume" ]; then
  [ ${#given[@]} -eq 0 ] && [ ${#inputs[@]} -eq 0 ] ||
    die "--resume $resume continues a run as its config.json says: it takes no inputs or other options (${given[*]:-}${inputs[*]:-})"
  out=$(realpath -m -- "$resume")
  [ -f "$out/config.json" ] || die "--resume $resume: no $(shown "$out")/config.json: not a run of tools/pretrain.sh"
  lock_out
  say "continuing the run in $(shown "$out") (bertpre train $(shown "$out")/config.json --resume auto) [$(elapsed)]"
  train_and_finish --resume auto
  exit 0
fi

# Every option, before anything is written.
[ ${#inputs[@]} -gt 0 ] || usage
preset_file="$root/configs/pretrain-$preset.json"
[ -f "$preset_file" ] || die "--preset '$preset': no $preset_file (presets: tiny, small, base)"
for i in "${inputs[@]}"; do [ -e "$i" ] || die "input '$i' does not exist"; done
case "$format" in text|lines) ;; *) die "--format '$format': expected text or lines" ;; esac
case "$doc_per" in ""|file|block) ;; *) die "--doc-per '$doc_per': expected file or block" ;; esac
for opt in "--vocab:$vocab" "--seq-length:$seq_length" "--eval-batches:$eval_batches" "--shards:$shards"; do
  [[ "${opt#*:}" =~ ^[0-9]*$ ]] || die "${opt%%:*} '${opt#*:}': expected a whole number"
done
[ "$shards" -ge 1 ] || die "--shards $shards: expected at least 1"
# The objective and its rows: an MLM-only packing has no next-sentence pairs to learn from.
for v in "${sets[@]}"; do  # --set train.objective=X is --objective X
  case "$v" in train.objective=*)
    [ -z "$objective" ] || [ "$objective" = "${v#*=}" ] || die "--objective $objective and --set $v disagree: give one of them"
    objective=${v#*=} ;;
  esac
done
case "$objective" in ""|mlm+nsp|mlm) ;; *) die "--objective '$objective': expected mlm+nsp or mlm" ;; esac
case "$packing" in ""|pairs|full-sentences|doc-sentences|contiguous) ;;
  *) die "--packing '$packing': expected pairs, full-sentences, doc-sentences or contiguous" ;; esac
if [ -z "$objective" ]; then objective=mlm+nsp; case "$packing" in ""|pairs) ;; *) objective=mlm ;; esac; fi
[ -n "$packing" ] || { [ "$objective" = mlm ] && packing=full-sentences || packing=pairs; }
[ "$objective" = mlm ] || [ "$packing" = pairs ] ||
  die "--packing $packing makes MLM-only rows (no next-sentence pairs) and --objective mlm+nsp trains next-sentence prediction: give --objective mlm, or --packing pairs"
sets+=(--set "train.objective=$objective")
if [ -n "$mask_prob" ]; then
  awk -v f="$mask_prob" 'BEGIN { exit !(f ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && f > 0 && f < 1) }' ||
    die "--mask-prob '$mask_prob': expected a share above 0 and below 1"
  sets+=(--set train.dynamic_masking=1 --set "train.mask_prob=$mask_prob")
  [ "$whole_words" = 0 ] || sets+=(--set train.whole_word_mask=1)
fi
awk -v f="$eval_fraction" 'BEGIN { exit !(f ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && f > 0 && f <= 0.5) }' ||
  die "--eval-fraction '$eval_fraction': expected a share above 0 and at most 0.5 of the documents"
out=$(realpath -m -- "$out")
[ ! -e "$out" ] || [ -d "$out" ] || die "--out $out is a file, not a folder"
locked=0
if [ -d "$out" ]; then lock_out; fi  # a run there is named before anything else is said

# The run's config, checked by bertpre itself (fields, values, the memory plan, a checkpoint
# directory held by another run) with the data it does not have yet left out.
make_config() {  # DEST [--vocab-cap N]
  "${steps_py[@]}" config "$preset_file" "$out" --vocab "$vocab" --seq-length "$seq_length" \
    --eval-batches "$eval_batches" "${sets[@]}" --write "$@"
}
fields=$(make_config "$tmp/config.json" --check "$tmp/check.json") || exit 1
eval "$fields"
overwrite=()
if [ "$checkpoint_dir" = "$out/checkpoints" ]; then overwrite=(--overwrite-checkpoints); fi
if ! "$bertpre" train "$tmp/check.json" --dry-run "${overwrite[@]}" >"$tmp/dry-run.log" 2>&1; then
  sed "s|$tmp/check.json|the run's config|g" "$tmp/dry-run.log" | grep -E 'error|warning' >&2 || true
  die "the run's config ($preset_file with --vocab, --seq-length, --eval-batches and --set) is refused by bertpre train --dry-run (above); nothing was changed"
fi
if grep -q "^no GPU visible" "$tmp/dry-run.log"; then  # a dry run plans cuda without one; the run needs one
  die "train.backend=cuda: no CUDA GPU is visible here (bertpre --version); nothing was changed"
fi

[ "$locked" = 1 ] || lock_out

# The inputs: what is not text is reported (and binary files left out) before the tokenizer
# reads them.
fields=$("${steps_py[@]}" scan "$out" "$pattern" "$strict" "$tmp/inputs.txt" "${inputs[@]}") || exit 1
eval "$fields"
text_inputs=("${inputs[@]}")
pattern_args=()
[ -n "$pattern" ] && pattern_args=(--pattern "$pattern")
if [ "$left_out" -gt 0 ]; then  # the files taken, by name
  mapfile -t text_inputs <"$tmp/inputs.txt"
  pattern_args=()
fi
if [ -z "$doc_per" ]; then
  doc_per=file
  if [ "$format" = text ] && awk -v n="$files" -v f="$eval_fraction" 'BEGIN { exit !(n * f < 2) }'; then
    doc_per=block
    say "$files input file(s): too few documents to hold out a share of $eval_fraction, so a document per blank-line block (--doc-per block; --doc-per file keeps a document per file)"
  fi
fi

# The run before: a finished one moves to previous/ until this one has finished; an unfinished
# one (a finished one already in previous/) is replaced.
present=()
for o in "${outputs[@]}"; do [ -e "$out/$o" ] && present+=("$o"); done
if [ ${#present[@]} -gt 0 ]; then
  if [ -d "$out/previous" ] && [ ! -e "$out/eval.json" ]; then
    say "replacing the unfinished run in $(shown "$out") (the finished one before it stays in $(shown "$out/previous") until this run has finished)"
    remove_outputs
    set_aside=dropped
  else
    rm -rf "$out/previous"
    mkdir "$out/previous"
    for o in "${present[@]}"; do mv "$out/$o" "$out/previous/"; done
    mv "$out"/metrics.jsonl.* "$out/previous/" 2>/dev/null || true
    set_aside=moved
    say "the run before in $(shown "$out") is kept in $(shown "$out/previous") until this run has finished"
  fi
fi
cp "$tmp/config.json" "$out/config.json"

say "training a SentencePiece tokenizer ($vocab pieces) on ${#inputs[@]} input(s) [$(elapsed)]"
spm=("$bertpre" tokenizer train --format "$format" "${pattern_args[@]}" --input-sentence-size 100000
     --model-prefix "$out/spm")
if ! "${spm[@]}" --vocab-size "$vocab" "${text_inputs[@]}" 2>"$tmp/spm.log"; then
  most=$(sed -n 's/.*Please set it to a value <= \([0-9]*\).*/\1/p' "$tmp/spm.log")
  [ -n "$most" ] || { cat "$tmp/spm.log" >&2; die "training the tokenizer failed (above)"; }
  say "notice: this text gives at most $most tokenizer pieces, fewer than the $vocab asked for: the tokenizer and the model's vocab_size use $most (--vocab sets it)"
  vocab=$most
  fields=$(make_config "$out/config.json" --vocab-cap "$vocab") || exit 1
  eval "$fields"
  "${spm[@]}" --vocab-size "$vocab" "${text_inputs[@]}"
else
  cat "$tmp/spm.log" >&2  # its warnings, if any
fi

say "writing shards: sequences of $seq tokens, a share of $eval_fraction of the documents held out [$(elapsed)]"
# --chunk-mb 64: up to 64 MB of text is one chunk, so that a random next segment comes from any
# document of it and every shard block mixes the inputs (prep's pool is the chunk).
strict_args=() wwm_args=()
[ "$strict" = 1 ] && strict_args=(--strict)
[ "$whole_words" = 1 ] && wwm_args=(--whole-word-mask)
if ! "$bertpre" prep --tokenizer "$out/spm.model" --output "$out/shards" --format "$format" --doc-per "$doc_per" \
    "${pattern_args[@]}" --seq-length "$seq" --max-predictions "$maxpred" --shards "$shards" \
    --eval-fraction "$eval_fraction" --dupe-factor 1 --chunk-mb 64 --no-progress "${strict_args[@]}" \
    --packing "$packing" "${wwm_args[@]}" \
    "${text_inputs[@]}" >"$tmp/prep.log"; then
  cat "$tmp/prep.log"
  hint="raise --eval-fraction or give more documents"
  [ "$doc_per" = file ] && [ "$format" = text ] && hint="$hint; running text in few files takes --doc-per block (a document per blank-line block)"
  die "bertpre prep failed (above): $hint"
fi
cat "$tmp/prep.log"
[ -n "$(ls "$out"/shards/eval-*.hdf5 2>/dev/null)" ] ||
  die "prep held out no document for evaluation: raise --eval-fraction or give more documents"

# How often the run reads each training sequence: many passes over a small text memorise it.
sequences=$(sed -n 's/.* -> \([0-9]*\) train instances.*/\1/p' "$tmp/prep.log" | head -1)
fields=$("${steps_py[@]}" passes "$out/config.json" "${sequences:-0}") || exit 1
read -r passes steps batch fewer <<<"$fields"
if awk -v p="$passes" 'BEGIN { exit !(p > 4) }'; then
  warn "the run reads each of its $sequences training sequences $passes times ($steps steps of $batch): a model trained this often on the same text memorises it (training accuracy far above held-out). More text, or --set train.steps=$fewer (3 passes), avoids it."
fi

say "pretraining (bertpre train $(shown "$out/config.json")) [$(elapsed)]"
train_and_finish
