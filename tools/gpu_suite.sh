#!/usr/bin/env bash
# The GPU suite and the GPU benchmarks, in parts that each finish in a few minutes on a GPU
# machine that starts bare (a fresh build included), for machines that have CUDA, PyTorch,
# meson and ninja but no network and no Debian -dev packages.
#
#   tools/gpu_suite.sh bundle            on a Debian 12 machine after tools/setup.sh: copies
#                                        the build dependencies a GPU machine without -dev
#                                        packages lacks into .gpu-deps/ (ignored by git, 33 MB, 20 of them the corpus):
#                                        headers and static libraries of jansson, HDF5 (with
#                                        libsz, libaec), zlib, libdeflate, utf8proc and zstd, and SentencePiece's headers
#                                        and shared libraries (they need only glibc 2.34 and
#                                        libstdc++ GLIBCXX_3.4.29; bertpre finds them through
#                                        its rpath); copy it to the
#                                        GPU machine with the repository
#   tools/gpu_suite.sh check-bundle [DIR] whether DIR (default .gpu-deps/) holds every file
#                                        this commit's build takes from it: one line naming
#                                        what is missing and exit 1, else exit 0 (run does it
#                                        before configuring)
#   tools/gpu_suite.sh run PART OUTDIR   on the GPU machine, from the repository root: builds
#                                        build-gpu/ for the GPU it finds (unless built), runs
#                                        PART in a work folder under TMPDIR, goes on past a
#                                        failing check; OUTDIR gets at most 5 files, brought up
#                                        to date every PACK_EVERY (15) s and at the end, so
#                                        that a command cut short still returns what it
#                                        measured: summary.txt (the machine, the commit, one
#                                        PASS/FAIL/SKIP/CUT line per check with its time), the
#                                        part's results (below), and PART-rest.tar.gz: PART.log
#                                        and the rest (no shards or checkpoint tensors).
#                                        PART_SECONDS (head: HEAD_SECONDS) is the command's own
#                                        limit: a check it leaves no time for is CUT
#
# PART is one of
#   head      the first run for a commit no GPU has run (docs/GPU-RESULTS.md): one command of
#             at most HEAD_SECONDS (default 460) on a bare machine, build included, under its
#             own limit: the bundle checked and what is stale rebuilt, ops and model as below
#             (the MLM-only model and the unpadded steps included), memcheck on the FP16 op
#             test, then bench: BERT-large at seq 128 x 256 and 512 x 32 in FP16 and BF16
#             beside PyTorch eager, 128 x 256 FP16 at 32 micro-batches per step as well as 2,
#             the GEMM rates and the MFU table, and torch.compile at the first shape when the
#             minutes left allow it: summary.txt, checks.txt, bench.txt, bench.json and
#             head-rest.tar.gz. A PyTorch run that cannot run (out of memory, say) is "baseline
#             unavailable", not a failed check. Every counted failure has its own FAIL line
#   ops       every CUDA op forward and backward against the CPU reference, fp32/fp16/bf16,
#             at the emulated tests' shapes and at BERT-base shapes (with per-call times),
#             and the FP16 attention with the split backward (BERTPRE_ATTN_BACKWARD=split)
#   model     the whole model against the CPU reference in the three precisions, forced
#             FP16 overflow, the BERT-large memory plan; unpadded against padded training
#             steps (test_unpad) in the three precisions
#   resume    bit-exact checkpoint resume on the GPU; the per-op profiler's counts; NCCL on
#             one rank and, where more GPUs are visible, on two (they need Open MPI)
#   sanitize  compute-sanitizer memcheck and racecheck over the op tests (small shapes)
#   bench     bertpre training throughput for BERT-large (seq 128 x 256 fp16 and bf16,
#             seq 512 x 32 fp16; and both fp16 shapes with the tanh GELU, gelu_new, whose
#             bias + GELU run in the FFN GEMMs' epilogues) beside PyTorch + transformers
#             with AMP (eager and torch.compile; eager only for gelu_new), the FP16/BF16
#             GEMM rate at 8192^3, and the MFU table
#             (bench.json, bench.txt); BENCH_COMPILE=0 leaves torch.compile out, =2 compiles
#             at the first shape only (each compilation takes minutes); BENCH_MODEL (a model
#             or training config, e.g. configs/modernbert-base.json) and BENCH_SHAPES
#             (tools/bench_gpu.py --shapes) replace BERT-large and its shapes; with
#             PART_SECONDS the runs stop by that limit (bench_gpu.py --deadline)
#   profile   the per-op time of one BERT-large micro-batch (BERTPRE_PROFILE) at seq 128
#             and 512 (profile-128.txt, profile-512.txt)
#   variants  the same profile for builds that differ only in their CUDA compile flags,
#             VARIANTS='FLAGS|FLAGS|...' (e.g. '-DFA_KV_MIN_BLOCKS=3|-DFA_Q_MIN_BLOCKS=1'),
#             or for the plain build under environment variables ('env:NAME=VALUE ...', no
#             rebuild; docs/PERFORMANCE.md lists the prepared ones),
#             the plain build first: variants.txt holds each variant's profile groups at seq
#             128 and 512 (the whole profiles in the tarball), the summary its attention and
#             GEMM lines; a flag variant rebuilds the CUDA sources (about 30 s on a 16-core
#             machine), each profiles (about 55 s); build-gpu/ is left plain
#   interop   a bertpre export loaded by the machine's transformers: logits equal
#   data      `bertpre bench data` (prep, then the loader) with 1, 2, 4, 8 and 16 prep threads
#             on the linux-doc sources of the bundle's corpus (.gpu-deps/corpus, or CORPUS),
#             with an 8,000-piece tokenizer trained on it (or TOKENIZER); the rows of
#             docs/BENCH-data.md's table in bench-data.md
#   unpad     BERT-large FP16 on real shards (linux-doc of the bundle's corpus, prepared at
#             seq 128 and 512 with an 8,000-piece tokenizer), train.unpad off against on:
#             sequences/s, TFLOP/s on all tokens and on the real tokens, MFU on the real
#             tokens, the speed-up (unpad.txt, unpad.json; tools/bench_gpu.py --unpad);
#             UNPAD_OBJECTIVE=mlm: MLM only on shards packed as RoBERTa's FULL-SENTENCES
#             (prep --packing full-sentences)
#   tta       time to accuracy (tools/tta.py, docs/TIME-TO-ACCURACY.md): tokenizer and shards
#             from the bundle's corpus, then bertpre, PyTorch eager and PyTorch eager with a
#             second seed, TTA_SIZE (default small) for tools/tta.py's default steps; tta/ holds
#             each run's JSON lines, tta.png, summary.json and summary-COMMIT.json (the file
#             for docs/tta/); TTA_COMPILE=1 adds the torch.compile run (minutes more);
#             TTA_SEED (1), TTA_STEPS (the size's) and TTA_SECOND_SEED=0 (no second PyTorch
#             seed) for one seed of a study at several
#   batch     the large-batch study (tools/batch_study.py, docs/LARGE-BATCH.md) at BATCH_SIZE (default
#             mini: BERT-mini, seq 128) on the bundle's corpus: global batches 256, 1K, 4K, 16K,
#             LAMB, AdamW and LARS, 4,194,304 sequences per run, FP16; the part stops by
#             BATCH_SECONDS (default 500) after its start, build included, at a run boundary
#             where it can: run it again with the same OUTDIR (its batch/ folder is read back from there)
#             and the ladder resumes; batch/ holds results.jsonl, the two plots and table.md;
#             BATCH_SWEEP='0.5,2' adds those multiples of the base rates at the largest batch;
#             BATCH_LADDER='256,1024,4096,16384,32768' and BATCH_OPTIMIZERS='lamb,adamw' replace
#             the size's ladder and the three optimizers
#
# BERTPRE_COMMIT names the commit where the tree has no .git. The tests run with
# BERTPRE_REQUIRE_GPU=1: a GPU test that finds no usable GPU fails instead of skipping. The
# summary's last line is the verdict: "failed checks: N", with the CUT and SKIP counts; the
# exit status is 1 when a check failed, else 3 when one was cut, else 0. The functions can be
# sourced (`. tools/gpu_suite.sh`), as the test gpu_suite_verdict does.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }

fails=0 cuts=0 skips=0
limit_s=0    # the command's own limit in seconds from its start (HEAD_SECONDS, PART_SECONDS); 0: none
reserve_s=15 # of it, kept for the last packing and the verdict
packed=""    # the files OUTDIR receives whole; the rest of the work folder goes in one tarball

time_left() {  # seconds left before the command's limit (less the reserve); 999999 without one
    if [ "$limit_s" -gt 0 ]; then echo $((limit_s - reserve_s - SECONDS)); else echo 999999; fi
}

counted_fail() {  # counted_fail TEXT: a counted failure, with its own FAIL line in the summary
    fails=$((fails + 1))
    echo "FAIL  $1" | tee -a "$dest/summary.txt"
}

check() {  # check NAME TIMEOUT_S COMMAND...: runs it, appends to the log, records PASS/FAIL (or
    # SKIP, or CUT where the command's own limit ended it or left no time to start it)
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc left cut=0
    left=$(time_left)
    if [ "$left" -lt 10 ]; then
        cuts=$((cuts + 1))
        printf '%-5s %-40s not run: %ds left of the command'"'"'s %ds\n' CUT "$name" "$((left + reserve_s))" "$limit_s" |
            tee -a "$dest/summary.txt"
        return 124
    fi
    [ "$left" -lt "$limit" ] && { limit=$left; cut=1; }
    echo "=== $name: $*" >>"$log"
    local first=$(($(wc -l <"$log") + 1))
    timeout "$limit" "$@" >>"$log" 2>&1
    rc=$?
    local status=PASS
    # meson test exits 0 when its test skipped (exit 77): say SKIP, not PASS
    [ $rc -eq 0 ] && tail -n +"$first" "$log" | grep -qE '^Skipped: +[1-9]' && { status=SKIP; skips=$((skips + 1)); }
    [ $rc -eq 0 ] || { status=FAIL; fails=$((fails + 1)); }
    if [ $rc -eq 124 ] && [ $cut -eq 1 ]; then
        status="CUT (at the command's ${limit_s}s limit)"
        fails=$((fails - 1)) cuts=$((cuts + 1))
    elif [ $rc -eq 124 ]; then
        status="FAIL (timed out after ${limit}s)"
    fi
    # The split attention kernels standing in for the fused one (flash_attention.cu's notice):
    # the check did not test what it names
    if [ $rc -eq 0 ] && tail -n +"$first" "$log" | grep -q "runs the kernels without clusters"; then
        status="FAIL (the fused attention backward did not run: see the log)"
        fails=$((fails + 1))
        rc=1
    fi
    printf '%-5s %-40s %4ds  exit %d\n' "$status" "$name" $((SECONDS - t0)) $rc | tee -a "$dest/summary.txt"
    return $rc
}

die() {  # die TEXT: a FAIL line in the summary, and the end of the part
    counted_fail "$1"
    exit 1
}

no_fallback() {  # no_fallback WHAT: a FAIL line where the log shows the split attention in the fused one's place
    if grep -q "runs the kernels without clusters" "$log"; then
        counted_fail "$1: the fused attention backward did not run (the split kernels did; see the log)"
    fi
}

publish() {  # publish FILE NAME: FILE's bytes as OUTDIR/NAME, whole or not at all: copied beside it
    # first (a name of this command's own, made afresh: never through a link) and renamed over it
    local staged="$results_dir/.$2.part"
    rm -f "$staged" && cp "$1" "$staged" && mv -f "$staged" "$results_dir/$2"
}

pack() {  # OUTDIR gets the $packed files (one in a subfolder under its own name) and one
    # tarball of the rest of the work folder (a subfolder's files included), without the
    # shards and checkpoints' tensors, which the part makes again
    [ -n "$packed" ] || return 0
    local f keep=(--exclude='*.hdf5' --exclude='*.safetensors')
    for f in $packed; do
        [[ $f == */* ]] || keep+=(--exclude="./$f")
        [ -f "$dest/$f" ] && publish "$dest/$f" "${f##*/}"
    done
    tar -czf "$dest.tar.gz" -C "$dest" "${keep[@]}" . 2>/dev/null && publish "$dest.tar.gz" "$part-rest.tar.gz"
}

finish() {  # the EXIT trap: the verdict line, the last packing, the exit status
    local rc=$1
    trap - EXIT
    [ -n "${packer:-}" ] && touch "$dest.stop" && wait "$packer" 2>/dev/null
    echo "failed checks: $fails (cut: $cuts, skipped: $skips)" | tee -a "$dest/summary.txt"
    pack
    [ -n "$packed" ] && rm -rf "$dest" "$dest.stop" "$dest.tar.gz"
    [ "$fails" -gt 0 ] && exit 1
    [ "$cuts" -gt 0 ] && exit 3
    exit "$rc"
}

# What this commit's build takes from the bundle: without one of them meson fails at
# configure with a message that does not name the bundle.
bundle_files=(include/jansson.h lib/libjansson.a include/hdf5.h lib/libhdf5.a lib/libsz.a lib/libaec.a lib/libz.a
    include/zlib.h include/libdeflate.h lib/libdeflate.a include/utf8proc.h lib/libutf8proc.a
    include/sentencepiece_processor.h lib/libsentencepiece.so.0 lib/libsentencepiece_train.so.0)
bundle_missing() {  # bundle_missing DIR: the bundle files DIR lacks, space-separated
    local f missing=()
    for f in "${bundle_files[@]}"; do [ -e "$1/$f" ] || missing+=("$f"); done
    echo "${missing[*]}"
}

san_check() {  # san_check NAME TIMEOUT COMMAND...: check under compute-sanitizer. Only a sanitizer
    # that says itself that it cannot run here (a "=========" line such as "not supported" or
    # "Unable to ...", and no summary or finding) is a SKIP with that message; a timeout, a
    # finding or a run cut short before its summary stays a failure
    local first=$(($(wc -l <"$log") + 1)) rc section msg
    check "$@" && return 0
    rc=$?
    [ $rc -eq 124 ] && return $rc
    section=$(tail -n +"$first" "$log")
    grep -qE "(ERROR|RACECHECK|LEAK) SUMMARY" <<<"$section" && return $rc
    grep -qE "^=========[[:space:]]+(Invalid|Program hit|Race|Leaked|Uninitialized|Error: Race|Out-of-range|Barrier|Misaligned|Warning)" \
        <<<"$section" && return $rc
    msg=$(grep -E "^========= " <<<"$section" | grep -v "^========= COMPUTE-SANITIZER" |
        grep -m1 -iE "not supported|unable to|could not|cannot|failed to (initialize|attach|start|load)|internal sanitizer error|no attachable" |
        sed 's/^========= *//')
    [ -n "$msg" ] || return $rc
    fails=$((fails - 1)) skips=$((skips + 1))
    sed -i '$d' "$dest/summary.txt"
    printf 'SKIP  %-40s sanitizer unavailable on this machine: %s\n' "$1" "$msg" | tee -a "$dest/summary.txt"
    return 0
}

build() {  # build TARGETS...: configures build-gpu/ once for this GPU, then builds
    local arch
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
    [ -n "$arch" ] || die "no GPU: nvidia-smi found none"
    local opts=(-Dgpu_archs="$arch" -Dmpi=auto -Dhdf5=auto -Dsentencepiece=auto)
    if [ -d .gpu-deps ]; then
        local missing
        missing=$(bundle_missing .gpu-deps)
        [ -z "$missing" ] || die ".gpu-deps/ is older than this commit's build: it lacks $missing; run 'tools/gpu_suite.sh bundle' at this commit and copy it again"
        opts+=(-Ddeps_prefix="$root/.gpu-deps")
    elif ! pkg-config --exists jansson 2>/dev/null; then
        die "jansson missing: run 'tools/gpu_suite.sh bundle' on a machine with libjansson-dev and copy .gpu-deps/ to this machine"
    fi
    if [ ! -f build-gpu/build.ninja ]; then
        check "configure build-gpu (sm_$arch)" 300 meson setup build-gpu "${opts[@]}" || exit 1
    fi
    check "build ${*:-all}" 480 ninja -C build-gpu "$@" || exit 1
}

linux_doc_tokenizer() {  # the data and unpad parts: build, then $corpus (linux-doc) and an 8,000-piece $tokenizer
    build_data_pipeline
    corpus=${CORPUS:-$root/.gpu-deps/corpus/linux-doc}
    tokenizer=${TOKENIZER:-$dest/spm.model}
    if [ ! -f "$tokenizer" ]; then
        check "tokenizer train (8000 pieces)" 300 build-gpu/bertpre tokenizer train --format text --pattern '*.rst.gz' \
            --vocab-size 8000 --input-sentence-size 100000 --model-prefix "${tokenizer%.model}" "$corpus" || exit 1
    fi
}

bundle_corpus() {  # the tta and batch parts: build, then $corpus (the bundle's linux-doc and Python docs)
    build_data_pipeline
    corpus=${CORPUS:-$root/.gpu-deps/corpus}
    [ -d "$corpus" ] || die "no corpus at $corpus: run 'tools/gpu_suite.sh bundle' and copy .gpu-deps/ to this machine"
}

build_data_pipeline() {  # builds bertpre: the data, unpad, tta and batch parts need it with HDF5 and SentencePiece
    build bertpre
    if ! build-gpu/bertpre --version | grep -q "^HDF5: yes" || ! build-gpu/bertpre --version | grep -q "^SentencePiece: yes"; then
        die "this build has no HDF5 or SentencePiece: run 'tools/gpu_suite.sh bundle' and copy .gpu-deps/ to this machine"
    fi
}

# Sourced (by a test): the functions above, nothing run.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case "${1:-}" in
bundle)
    mkdir -p .gpu-deps/include .gpu-deps/lib
    inc=$(pkg-config --variable=includedir jansson)
    lib=$(pkg-config --variable=libdir jansson)
    cp "$inc"/jansson.h "$inc"/jansson_config.h .gpu-deps/include/
    cp "$lib"/libjansson.a .gpu-deps/lib/
    # HDF5, its compressors and zlib: static, so the GPU machine needs none of their shared
    # libraries (Debian's libhdf5 .so also needs libcurl and libcrypto; the static library
    # links without them).
    h5inc=$(pkg-config --cflags-only-I hdf5 | sed 's/^-I//; s/ *$//')
    h5lib=$(pkg-config --libs-only-L hdf5 | sed 's/^-L//; s/ *$//')
    cp -L "$h5inc"/*.h .gpu-deps/include/
    cp -L "$h5lib"/libhdf5.a .gpu-deps/lib/
    cp -L "$lib"/libsz.a "$lib"/libaec.a "$lib"/libz.a .gpu-deps/lib/
    zinc=$(pkg-config --variable=includedir zlib)
    cp "$zinc"/zlib.h "$zinc"/zconf.h .gpu-deps/include/
    # libdeflate, the shards' compressor (prep falls back to zlib without it).
    # (Debian 12's libdeflate.pc names /usr/lib as its libdir; the library is in jansson's.)
    cp "$(pkg-config --variable=includedir libdeflate)"/libdeflate.h .gpu-deps/include/
    cp -L "$lib"/libdeflate.a .gpu-deps/lib/
    # utf8proc, WordPiece's Unicode data (categories, case mapping, normalization).
    cp "$(pkg-config --variable=includedir libutf8proc)"/utf8proc.h .gpu-deps/include/
    cp -L "$(pkg-config --variable=libdir libutf8proc)"/libutf8proc.a .gpu-deps/lib/
    # libzstd, for zstd-compressed input text (optional: prep reads gzip and plain without it).
    # (Debian 12's libzstd.pc, like libdeflate's, names /usr/lib; the library is in jansson's.)
    if [ -f "$lib/libzstd.a" ]; then
        cp "$(pkg-config --variable=includedir libzstd)"/zstd.h .gpu-deps/include/
        cp -L "$lib"/libzstd.a .gpu-deps/lib/
    fi
    # SentencePiece: Debian ships no static library; the shared ones need libstdc++ and glibc.
    spinc=$(pkg-config --variable=includedir sentencepiece) splib=$(pkg-config --variable=libdir sentencepiece)
    cp "$spinc"/sentencepiece_processor.h "$spinc"/sentencepiece_trainer.h .gpu-deps/include/
    for l in sentencepiece sentencepiece_train; do
        cp -L "$splib/lib$l.so.0" .gpu-deps/lib/
        ln -sf "lib$l.so.0" ".gpu-deps/lib/lib$l.so"
    done
    # The corpus of the data and tta parts (linux-doc and Python documentation sources).
    rm -rf .gpu-deps/corpus
    python3 tools/tta.py corpus .gpu-deps/corpus || exit 1
    du -sh .gpu-deps
    exit 0
    ;;
check-bundle)
    dir=${2:-.gpu-deps}
    [ -d "$dir" ] || { echo "check-bundle: $dir: no such directory (tools/gpu_suite.sh bundle makes it)"; exit 1; }
    missing=$(bundle_missing "$dir")
    [ -z "$missing" ] || { echo "check-bundle: $dir lacks $missing: run 'tools/gpu_suite.sh bundle' at this commit"; exit 1; }
    echo "check-bundle: $dir holds the ${#bundle_files[@]} files this build takes from it"
    exit 0
    ;;
run) ;;
*) usage ;;
esac

part=${2:-}
results_dir=${3:-}
[ -n "$part" ] && [ -n "$results_dir" ] || usage
mkdir -p "$results_dir"
results_dir=$(cd "$results_dir" && pwd)
# Every part works in a folder under TMPDIR and keeps OUTDIR to a few files, brought up to
# date as it goes: its summary, its results, and PART-rest.tar.gz with the log and the rest.
case "$part" in
head) packed="summary.txt checks.txt bench.txt bench.json" ;;
ops | model | resume) packed="summary.txt checks.txt" ;;
bench) packed="summary.txt bench.txt bench.json" ;;
profile) packed="summary.txt profile-128.txt profile-512.txt" ;;
variants) packed="summary.txt variants.txt" ;;
unpad) packed="summary.txt unpad.txt unpad.json" ;;
data) packed="summary.txt bench-data.md" ;;
tta) packed="summary.txt tta/summary.json tta/tta.png" ;;
batch) packed="summary.txt batch/table.md batch/results.jsonl" ;;
*) packed="summary.txt" ;;
esac
limit_s=${PART_SECONDS:-0}
[ "$part" = head ] && limit_s=${HEAD_SECONDS:-460}
dest=$(mktemp -d "${TMPDIR:-/tmp}/gpu-suite-$part.XXXXXX")
# batch resumes its ladder from the folder of the last call, in its tarball in OUTDIR
[ "$part" = batch ] && [ -f "$results_dir/batch-rest.tar.gz" ] && tar -xzf "$results_dir/batch-rest.tar.gz" -C "$dest"
log="$dest/$part.log"
: >"$log"
trap 'finish $?' EXIT
trap 'exit 143' TERM INT
export BERTPRE_REQUIRE_GPU=1
{
    echo "part: $part"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
    echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
    echo "python: $(python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
    echo "commit: ${BERTPRE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
    [ "$limit_s" -gt 0 ] && echo "limit: ${limit_s}s, this command's own"
} >"$dest/summary.txt"
cat "$dest/summary.txt"
if [ -n "$packed" ]; then  # OUTDIR up to date every PACK_EVERY (15) s: a command cut short still returns its results
    (
        i=0
        while [ ! -e "$dest.stop" ] && kill -0 $$ 2>/dev/null; do
            sleep 1
            i=$((i + 1))
            [ $((i % ${PACK_EVERY:-15})) -eq 0 ] && pack
        done
    ) &
    packer=$!
fi

gpu_test() {  # gpu_test NAME...: meson tests of the suite, each a check
    for t in "$@"; do
        check "$t" 600 meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 -v "$t"
        # The worst relative error of each op/tensor check, and the per-call times.
        grep -E "^(ok|FAIL|time) " "$log" >"$dest/checks.txt" 2>/dev/null
    done
}

ops_tests=(cuda_ops_gpu_fp32 cuda_ops_gpu_fp16 cuda_ops_gpu_bf16 cuda_ops_gpu_fp16_attention_split)
model_tests=(cuda_model_gpu_fp32 cuda_model_gpu_fp16 cuda_model_gpu_bf16 unpad_gpu_fp32 unpad_gpu_fp16 unpad_gpu_bf16)

sanitizer() {  # the path of compute-sanitizer, or a FAIL line and exit
    san=$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")
    [ -x "$san" ] || san=/usr/local/cuda/compute-sanitizer/compute-sanitizer
    [ -x "$san" ] || die "compute-sanitizer not found (looked on PATH, beside nvcc, in /usr/local/cuda)"
}

memcheck() {  # memcheck PRECISION...: the op test under compute-sanitizer's memcheck
    for p in "$@"; do
        san_check "memcheck test_cuda_ops_gpu $p" 300 "$san" --tool memcheck --leak-check full --error-exitcode 3 \
            build-gpu/tests/test_cuda_ops_gpu "$p"
    done
}

case "$part" in
head)
    build
    sanitizer
    gpu_test "${ops_tests[@]}" "${model_tests[@]}"
    memcheck fp16
    grep -E "ERROR SUMMARY|LEAK SUMMARY" "$log" | tee -a "$dest/summary.txt"
    left=$(time_left)
    check bench 3000 python3 tools/bench_gpu.py --out "$dest" --compile 2 --deadline $(($(date +%s) + left - 5)) \
        --compile-seconds "${COMPILE_SECONDS:-150}" --shapes 128x256:fp16,512x32:fp16,128x256:bf16,512x32:bf16,128x256x32:fp16
    no_fallback bench
    cat "$dest/bench.txt" 2>/dev/null | tee -a "$dest/summary.txt"
    # bertpre runs the command's limit ended or left no time for: cut, not failed
    if grep -q "^cut: " "$dest/bench.txt" 2>/dev/null; then
        cuts=$((cuts + 1))
        echo "CUT   bench: $(grep -c "^cut: " "$dest/bench.txt") bertpre run(s) at the command's limit" | tee -a "$dest/summary.txt"
    fi
    ;;
ops)
    build
    gpu_test "${ops_tests[@]}"
    ;;
model)
    build
    gpu_test "${model_tests[@]}"
    ;;
resume)
    build
    # nccl_gpu (mpirun -np 1 with NCCL) needs Open MPI in the build: where the machine has
    # none, meson configured without it and the test says SKIP and why.
    gpu_test checkpoint_resume_gpu profile_gpu nccl_gpu nccl_multi_gpu
    ;;
sanitize)
    build tests/test_cuda_ops_gpu
    sanitizer
    memcheck fp16 bf16 fp32
    for p in fp16 fp32; do
        san_check "racecheck test_cuda_ops_gpu $p" 420 "$san" --tool racecheck --error-exitcode 3 \
            build-gpu/tests/test_cuda_ops_gpu "$p"
    done
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$log" | tee -a "$dest/summary.txt"
    ;;
bench)
    build bertpre
    extra=()
    [ "$limit_s" -gt 0 ] && extra+=(--deadline $(($(date +%s) + $(time_left) - 5)))
    [ -n "${BENCH_MODEL:-}" ] && extra+=(--model "$BENCH_MODEL")
    [ -n "${BENCH_SHAPES:-}" ] && extra+=(--shapes "$BENCH_SHAPES")
    check bench 3000 python3 tools/bench_gpu.py --out "$dest" --compile "${BENCH_COMPILE:-1}" "${extra[@]}"
    no_fallback bench
    cat "$dest/bench.txt" 2>/dev/null | tee -a "$dest/summary.txt"
    ;;
profile)
    build bertpre
    for shape in "128 256" "512 32"; do
        set -- $shape
        check "profile, seq $1" 600 python3 tools/bench_gpu.py --out "$dest" --profile "$1" "$2"
        grep -E "^(# bertpre|group)" "$dest/profile-$1.txt" 2>/dev/null | tee -a "$dest/summary.txt"
    done
    no_fallback profile
    ;;
variants)
    build bertpre
    IFS='|' read -r -a flags <<<"|${VARIANTS:-}"  # variant 0: no extra flags
    for i in "${!flags[@]}"; do
        f=${flags[$i]}
        # env:NAME=VALUE ...: the plain build run with those variables (no rebuild)
        cargs=$f envs=()
        if [[ $f == env:* ]]; then
            cargs=
            read -r -a envs <<<"${f#env:}"
        fi
        check "variant $i: configure -Dcuda_args='$cargs'" 120 meson configure build-gpu -Dcuda_args="$cargs" || continue
        check "variant $i: build" 480 ninja -C build-gpu bertpre || continue
        for shape in "128 256" "512 32"; do
            set -- $shape
            check "variant $i: profile, seq $1" 600 env "${envs[@]}" python3 tools/bench_gpu.py --out "$dest/variant-$i" \
                --profile "$1" "$2"
            cp "$dest/variant-$i/profile-$1.txt" "$dest/profile-$i-$1.txt" 2>/dev/null
            grep -E "^(# bertpre|op attention|group GEMMs)" "$dest/profile-$i-$1.txt" 2>/dev/null |
                sed "s/^/variant $i, seq $1: /" | tee -a "$dest/summary.txt"
            { echo "variant $i ($f), seq $1:"; grep -E "^(# bertpre|group)" "$dest/profile-$i-$1.txt" 2>/dev/null; } \
                >>"$dest/variants.txt"
        done
    done
    meson configure build-gpu -Dcuda_args= >>"$log" 2>&1
    ;;
interop)
    build bertpre tests/dump
    check "export loads in transformers $(python3 -c 'import transformers; print(transformers.__version__)' 2>/dev/null)" \
        300 python3 tests/test_interop.py build-gpu/bertpre build-gpu/tests/dump export
    grep -E "^(ok|FAIL) " "$log" | tee -a "$dest/summary.txt"
    ;;
data)
    linux_doc_tokenizer
    for th in 1 2 4 8 16; do
        check "bench data --threads $th" 300 build-gpu/bertpre bench data --tokenizer "$tokenizer" \
            --threads "$th" --format text --pattern '*.rst.gz' "$corpus"
    done
    grep -E "^bench (prep|loader)" "$log" | tee -a "$dest/summary.txt"
    # docs/BENCH-data.md's table: one row per thread count
    grep -E "^bench (prep|loader)" "$log" | python3 -c '
import re, sys
rows, row = [], None
for line in sys.stdin:
    if line.startswith("bench prep"):
        m = re.search(r"with (\d+) threads: ([\d.]+) MB/s; ([\d.]+) CPU s = ([\d.]+) MB per CPU second", line)
        row = [m.group(1), m.group(2) + " MB/s", m.group(3) + " s = " + m.group(4) + " MB per CPU s"]
        rows.append(row)
    elif row is not None:
        m = re.search(r"([\d.]+) batches/s, (\d+) sequences/s = ([\d.]+)x .*; ([\d.]+) us of CPU", line)
        row.append(f"{float(m.group(1)):,.0f} batches/s = {int(m.group(2)):,} seq/s ({float(m.group(3)):.0f}x); "
                   f"{float(m.group(4)):.0f} us CPU/batch")
print("| run | prep workers | prep wall | prep CPU | loader, stored masks | loader, dynamic masks |")
print("|---|---|---|---|---|---|")
for i, r in enumerate(rows, 1):
    print("| " + " | ".join([str(i)] + r) + " |")
' >"$dest/bench-data.md" || counted_fail "bench-data.md: the bench data lines could not be read into the table"
    cat "$dest/bench-data.md" | tee -a "$dest/summary.txt"
    ;;
unpad)
    linux_doc_tokenizer
    packing=()
    [ "${UNPAD_OBJECTIVE:-mlm+nsp}" = mlm ] && packing=(--packing full-sentences)
    # NVIDIA's phase shapes: masked positions 20 at seq 128 and 80 at seq 512.
    for shape in "128 20" "512 80"; do
        set -- $shape
        rm -rf "$dest/shards-$1"
        check "prep --seq-length $1" 300 build-gpu/bertpre prep --tokenizer "$tokenizer" --output "$dest/shards-$1" \
            --format text --pattern '*.rst.gz' --seq-length "$1" --max-predictions "$2" --dupe-factor 1 --no-progress \
            "${packing[@]}" "$corpus" || exit 1
    done
    # BERT-large as the bench part runs it (its 30,522-word vocabulary holds the 8,000 ids).
    check "bench_gpu.py --unpad" 560 python3 tools/bench_gpu.py --out "$dest" --objective "${UNPAD_OBJECTIVE:-mlm+nsp}" \
        --unpad "128x256:$dest/shards-128,512x32:$dest/shards-512"
    cat "$dest/unpad.txt" 2>/dev/null | tee -a "$dest/summary.txt"
    ;;
tta)
    bundle_corpus
    extra=(--seed "${TTA_SEED:-1}")
    [ "${TTA_SECOND_SEED:-1}" = 1 ] && extra+=(--second-seed)
    [ -n "${TTA_STEPS:-}" ] && extra+=(--steps "$TTA_STEPS")
    [ "${TTA_COMPILE:-0}" = 1 ] && extra+=(--compile)
    check "tools/tta.py run --size ${TTA_SIZE:-small} ${extra[*]}" 500 python3 tools/tta.py run --corpus "$corpus" \
        --out "$dest/tta" --size "${TTA_SIZE:-small}" --bertpre build-gpu/bertpre "${extra[@]}"
    commit=${BERTPRE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
    cp "$dest/tta/summary.json" "$dest/tta/summary-$commit.json" 2>/dev/null
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); [print(f"{k}: {v}") for k, v in s.items()
                if k.endswith(("accuracy", "seconds_to_target", "_vs_pytorch", "_vs_compile", "compile_s", "tokens"))]' \
        "$dest/tta/summary.json" 2>/dev/null | tee -a "$dest/summary.txt"
    ;;
batch)
    bundle_corpus
    left=$((${BATCH_SECONDS:-500} - SECONDS))
    [ $left -gt 60 ] || die "only ${left}s of BATCH_SECONDS left after the build"
    extra=()
    [ -n "${BATCH_SWEEP:-}" ] && extra+=(--sweep "$BATCH_SWEEP")
    [ -n "${BATCH_LADDER:-}" ] && extra+=(--batches "$BATCH_LADDER")
    [ -n "${BATCH_OPTIMIZERS:-}" ] && extra+=(--optimizers "$BATCH_OPTIMIZERS")
    echo "=== batch study: --size ${BATCH_SIZE:-mini}, --time-limit $left" >>"$log"
    t0=$SECONDS
    timeout $((left + 30)) python3 tools/batch_study.py run --backend cuda --size "${BATCH_SIZE:-mini}" \
        --corpus "$corpus" --out "$dest/batch" --bertpre build-gpu/bertpre --dynamic-masking --dupe-factor 1 \
        --time-limit "$left" "${extra[@]}" >>"$log" 2>&1
    rc=$?
    # exit 3: cut at the time limit, finished runs kept: the same command again resumes the ladder
    case $rc in
    0) status=PASS ;;
    3) status="CUT (run the part again with the same OUTDIR to resume)"; cuts=$((cuts + 1)) ;;
    *) status=FAIL; fails=$((fails + 1)) ;;  # the printf below is its FAIL line
    esac
    printf '%-5s %-40s %4ds  exit %d\n' "$status" "batch study ${BATCH_SIZE:-mini}" $((SECONDS - t0)) $rc | tee -a "$dest/summary.txt"
    grep -E "^batch_study: .*(accuracy|cut after|seq)" "$log" | tail -20 | tee -a "$dest/summary.txt"
    cat "$dest/batch/table.md" 2>/dev/null | tee -a "$dest/summary.txt"
    ;;
*)
    usage
    ;;
esac
