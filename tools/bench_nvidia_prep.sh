#!/usr/bin/env bash
# `bertpre prep` against NVIDIA's create_pretraining_data.py (DeepLearningExamples,
# PyTorch/LanguageModeling/BERT; not part of bertpre: fetch that folder yourself and pass the
# script's path) on the job of docs/BENCH-data.md, with the same WordPiece vocab.txt on both
# sides, CPU seconds (user + system of the whole process) per MB of text, RUNS times each
# (default 2), interleaved: per run bertpre prep --format lines, NVIDIA's script, then, for
# reference, bertpre prep --format text on the original .rst.gz sources (what
# tools/bench_data.sh measures).
#
# The text: linux-doc's .rst.gz sources without translations/, as tools/bench_data.sh
# selects them, written once by tools/text_lines.c as one sentence per line with a blank
# line between documents (NVIDIA's input format): the sentences of bertpre's own splitter
# (data/text.c), a document per file, so both tools read the same file and sentences.
# The vocabulary: VOCAB, or a 30,522-token uncased vocab.txt that the `tokenizers` library
# trains on that file (BertWordPieceTokenizer, as tools/bench_tokenizer.py does).
# Both at seq 128, 20 predictions, masked LM prob 0.15, dupe factor 5, seed 12345; bertpre
# with one worker, 4 shards, gzip level 4 (NVIDIA's script writes one file, gzip level 4).
# Python: $PYTHON, default the project's .venv; NVIDIA's script needs h5py, numpy, tqdm and
# six, and its tokenization.py imports file_utils.py (same folder), which imports boto3 and
# requests for downloading vocabularies by name: where those are missing, empty stand-ins
# are put on PYTHONPATH (the download code is never reached with --vocab_file).
# Work files go to build/nvbench/. Results go to docs/BENCH-data.md by hand.
# usage: tools/bench_nvidia_prep.sh PATH/TO/create_pretraining_data.py [RUNS [VOCAB]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -ge 1 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
nvidia=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
runs=${2:-2}
vocab=${3:-}
[ -f "$nvidia" ] || { echo "bench_nvidia_prep: no file $1" >&2; exit 1; }
[ -f "$(dirname "$nvidia")/tokenization.py" ] || {
  echo "bench_nvidia_prep: no tokenization.py beside $nvidia (it and file_utils.py come from the same folder)" >&2; exit 1; }
python=${PYTHON:-$root/.venv/bin/python}
"$root/tools/build.sh"
work=build/nvbench
mkdir -p "$work"

list=$(python3 tools/common.py linux-doc) || exit 1
mapfile -t inputs <<<"$list"
text=$work/linux-doc.txt
build/tools/text_lines --pattern '*.rst.gz' "${inputs[@]}" >"$text"
mb=$(stat -c %s "$text" | awk '{ printf "%.2f", $1 / 1e6 }')
src_mb=$(for f in $(find "${inputs[@]}" -name '*.rst.gz'); do zcat "$f"; done | wc -c | awk '{ printf "%.2f", $1 / 1e6 }')
if [ -z "$vocab" ]; then
  vocab=$work/vocab.txt
  if [ ! -f "$vocab" ]; then
    TOKENIZERS_PARALLELISM=false "$python" - "$text" "$work" <<'EOF'
import sys
from tokenizers import BertWordPieceTokenizer
t = BertWordPieceTokenizer(lowercase=True)
t.train([sys.argv[1]], vocab_size=30522, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False)
t.save_model(sys.argv[2])
EOF
  fi
fi
stubs=$work/stubs
if ! "$python" -c 'import boto3, botocore, requests' 2>/dev/null; then
  mkdir -p "$stubs/boto3" "$stubs/botocore" "$stubs/requests"
  : >"$stubs/boto3/__init__.py"; : >"$stubs/botocore/__init__.py"; : >"$stubs/requests/__init__.py"
  echo 'class ClientError(Exception): pass' >"$stubs/botocore/exceptions.py"
  "$python" -c 'import requests' 2>/dev/null && rm -r "$stubs/requests"
fi

echo "commit $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "text: $text, $mb MB, $(grep -c . "$text") sentences, $(grep -c '^$' "$text") documents (sources: $src_mb MB)"
echo "vocabulary: $vocab, $(wc -l <"$vocab") tokens; NVIDIA's script: $nvidia"

# cpu NAME MB LOG COMMAND...: runs COMMAND with its output in LOG; prints its user and system
# CPU seconds and MB per CPU second.
cpu() {
  local name=$1 size=$2 log=$3; shift 3
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -f '%U %S' -o "$log.time" "$@" >"$log" 2>&1 || { echo "$name failed:"; tail -20 "$log"; exit 1; }
  read -r u s <"$log.time"
  load="$load; after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "$name: $u user + $s sys = $(awk -v u="$u" -v s="$s" -v mb="$size" \
    'BEGIN { printf "%.2f CPU s = %.3f MB per CPU s", u + s, mb / (u + s) }') (load average before: $load)"
}
instances() {
  "$python" -c '
import sys, h5py
print(sum(h5py.File(f, "r")["next_sentence_labels"].shape[0] for f in sys.argv[1:]))' "$@"
}
common=(--seq-length 128 --max-predictions 20 --dupe-factor 5 --seed 12345 --shards 4 --gzip 4 --threads 1
        --no-progress --tokenizer "$vocab")
for run in $(seq "$runs"); do
  rm -rf "$work/lines" "$work/text" "$work/nvidia.hdf5"
  cpu "run $run bertpre prep --format lines" "$mb" "$work/lines.log" \
    build/bertpre prep --format lines --output "$work/lines" "${common[@]}" "$text"
  echo "  $(instances "$work"/lines/train-*.hdf5) instances"
  cpu "run $run NVIDIA create_pretraining_data.py" "$mb" "$work/nvidia.log" \
    env PYTHONPATH="$stubs${PYTHONPATH:+:$PYTHONPATH}" "$python" "$nvidia" --vocab_file "$vocab" \
    --input_file "$text" --output_file "$work/nvidia.hdf5" --max_seq_length 128 --max_predictions_per_seq 20 \
    --masked_lm_prob 0.15 --dupe_factor 5 --do_lower_case --random_seed 12345
  echo "  $(instances "$work/nvidia.hdf5") instances"
  cpu "run $run bertpre prep --format text (the .rst.gz sources)" "$src_mb" "$work/text.log" \
    build/bertpre prep --format text --pattern '*.rst.gz' --output "$work/text" "${common[@]}" "${inputs[@]}"
  echo "  $(instances "$work"/text/train-*.hdf5) instances"
done
