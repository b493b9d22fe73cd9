#!/usr/bin/env bash
# The GPU suite and the GPU benchmarks, in parts that each finish in a few minutes on a GPU
# machine that starts bare (a fresh build included), for machines that have CUDA, PyTorch,
# meson and ninja but no network and no Debian -dev packages.
#
#   tools/gpu_suite.sh bundle            on a machine with libjansson-dev: copies jansson's
#                                        header and static library into .gpu-deps/ (ignored
#                                        by git, about 200 KB), the one build dependency a
#                                        GPU machine without -dev packages lacks; copy it
#                                        to the GPU machine with the repository
#   tools/gpu_suite.sh run PART OUTDIR   on the GPU machine, from the repository root: builds
#                                        build-gpu/ for the GPU it finds (unless built), runs
#                                        PART, writes OUTDIR/summary.txt (the machine, the
#                                        commit, one PASS/FAIL/SKIP line per check with its time
#                                        and worst error) and OUTDIR/PART.log; goes on past a
#                                        failing check and exits non-zero if any failed
#
# PART is one of
#   ops       every CUDA op forward and backward against the CPU reference, fp32/fp16/bf16,
#             at the emulated tests' shapes and at BERT-base shapes (with per-call times)
#   model     the whole model against the CPU reference in the three precisions, forced
#             FP16 overflow, the BERT-large memory plan
#   resume    bit-exact checkpoint resume on the GPU; the per-op profiler's counts; NCCL on
#             one rank and, where more GPUs are visible, on two (they need Open MPI)
#   sanitize  compute-sanitizer memcheck and racecheck over the op tests (small shapes)
#   bench     bertpre training throughput for BERT-large (seq 128 x 256 fp16 and bf16,
#             seq 512 x 32 fp16) beside PyTorch + transformers with AMP (eager and
#             torch.compile), the FP16/BF16 GEMM rate at 8192^3, and the MFU table
#             (bench.json, bench.txt); BENCH_COMPILE=0 leaves torch.compile out, =2 compiles
#             at the first shape only (each compilation takes minutes)
#   profile   the per-op time of one BERT-large micro-batch (BERTPRE_PROFILE) at seq 128
#             and 512 (profile-128.txt, profile-512.txt)
#   variants  the same profile for builds that differ only in their CUDA compile flags,
#             VARIANTS='FLAGS|FLAGS|...' (e.g. '-DFA_KV_MIN_BLOCKS=3|-DFA_Q_MIN_BLOCKS=1'),
#             the plain build first: profile-I-128.txt and profile-I-512.txt for variant I,
#             its attention and GEMM lines in the summary; each variant rebuilds the CUDA
#             sources (about 30 s on a 16-core machine) and profiles (about 55 s); build-gpu/ is
#             left plain
#   interop   a bertpre export loaded by the machine's transformers: logits equal
#   data      `bertpre bench data` at 1, 2, 4, 8 and 16 threads (needs a build with HDF5
#             and SentencePiece)
#
# BERTPRE_COMMIT names the commit where the tree has no .git. The tests run with
# BERTPRE_REQUIRE_GPU=1: a GPU test that finds no usable GPU fails instead of skipping.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() { sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

fails=0
check() {  # check NAME TIMEOUT_S COMMAND...: runs it, appends to the log, records PASS/FAIL
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    echo "=== $name: $*" >>"$log"
    local first=$(($(wc -l <"$log") + 1))
    timeout "$limit" "$@" >>"$log" 2>&1
    rc=$?
    local status=PASS
    # meson test exits 0 when its test skipped (exit 77): say SKIP, not PASS
    [ $rc -eq 0 ] && tail -n +"$first" "$log" | grep -qE '^Skipped: +[1-9]' && status=SKIP
    [ $rc -eq 0 ] || { status=FAIL; fails=$((fails + 1)); }
    [ $rc -eq 124 ] && status="FAIL (timed out after ${limit}s)"
    printf '%-5s %-40s %4ds  exit %d\n' "$status" "$name" $((SECONDS - t0)) $rc | tee -a "$out/summary.txt"
    return $rc
}

build() {  # build TARGETS...: configures build-gpu/ once for this GPU, then builds
    local arch
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
    if [ -z "$arch" ]; then
        echo "FAIL  no GPU: nvidia-smi found none" | tee -a "$out/summary.txt"
        exit 1
    fi
    local opts=(-Dgpu_archs="$arch" -Dmpi=auto -Dhdf5=auto -Dsentencepiece=auto)
    if [ -f .gpu-deps/lib/libjansson.a ]; then
        opts+=(-Ddeps_prefix="$root/.gpu-deps")
    elif ! pkg-config --exists jansson 2>/dev/null; then
        echo "FAIL  jansson missing: run 'tools/gpu_suite.sh bundle' on a machine with libjansson-dev and copy .gpu-deps/ to this machine" |
            tee -a "$out/summary.txt"
        exit 1
    fi
    if [ ! -f build-gpu/build.ninja ]; then
        check "configure build-gpu (sm_$arch)" 300 meson setup build-gpu "${opts[@]}" || exit 1
    fi
    check "build ${*:-all}" 480 ninja -C build-gpu "$@" || exit 1
}

case "${1:-}" in
bundle)
    mkdir -p .gpu-deps/include .gpu-deps/lib
    inc=$(pkg-config --variable=includedir jansson)
    lib=$(pkg-config --variable=libdir jansson)
    cp "$inc"/jansson.h "$inc"/jansson_config.h .gpu-deps/include/
    cp "$lib"/libjansson.a .gpu-deps/lib/
    du -sh .gpu-deps
    exit 0
    ;;
run) ;;
*) usage ;;
esac

part=${2:-}
out=${3:-}
[ -n "$part" ] && [ -n "$out" ] || usage
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/$part.log"
: >"$log"
export BERTPRE_REQUIRE_GPU=1
{
    echo "part: $part"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
    echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
    echo "python: $(python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
    echo "commit: ${BERTPRE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
} >"$out/summary.txt"
cat "$out/summary.txt"

gpu_test() {  # gpu_test NAME...: meson tests of the suite, each a check
    for t in "$@"; do
        check "$t" 600 meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 -v "$t"
    done
    # The worst relative error of each op/tensor check, and the per-call times.
    grep -E "^(ok|FAIL|time) " "$log" >"$out/checks.txt" 2>/dev/null || true
}

case "$part" in
ops)
    build
    gpu_test cuda_ops_gpu_fp32 cuda_ops_gpu_fp16 cuda_ops_gpu_bf16
    ;;
model)
    build
    gpu_test cuda_model_gpu_fp32 cuda_model_gpu_fp16 cuda_model_gpu_bf16
    ;;
resume)
    build
    # nccl_gpu (mpirun -np 1 with NCCL) needs Open MPI in the build: where the machine has
    # none, meson configured without it and the test says SKIP and why.
    gpu_test checkpoint_resume_gpu profile_gpu nccl_gpu nccl_multi_gpu
    ;;
sanitize)
    build tests/test_cuda_ops_gpu
    san=$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")
    [ -x "$san" ] || san=/usr/local/cuda/compute-sanitizer/compute-sanitizer
    if [ ! -x "$san" ]; then
        echo "FAIL  compute-sanitizer not found (looked on PATH, beside nvcc, in /usr/local/cuda)" | tee -a "$out/summary.txt"
        exit 1
    fi
    for p in fp16 bf16 fp32; do
        check "memcheck test_cuda_ops_gpu $p" 300 "$san" --tool memcheck --leak-check full --error-exitcode 3 \
            build-gpu/tests/test_cuda_ops_gpu "$p"
    done
    for p in fp16 fp32; do
        check "racecheck test_cuda_ops_gpu $p" 420 "$san" --tool racecheck --error-exitcode 3 \
            build-gpu/tests/test_cuda_ops_gpu "$p"
    done
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$log" | tee -a "$out/summary.txt"
    ;;
bench)
    build bertpre
    python3 tools/bench_gpu.py --out "$out" --compile "${BENCH_COMPILE:-1}" >>"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fails=$((fails + 1))
    cat "$out/bench.txt" 2>/dev/null | tee -a "$out/summary.txt"
    ;;
profile)
    build bertpre
    for shape in "128 256" "512 32"; do
        set -- $shape
        python3 tools/bench_gpu.py --out "$out" --profile "$1" "$2" >>"$log" 2>&1 || fails=$((fails + 1))
        grep -E "^(# bertpre|group)" "$out/profile-$1.txt" 2>/dev/null | tee -a "$out/summary.txt"
    done
    ;;
variants)
    build bertpre
    IFS='|' read -r -a flags <<<"|${VARIANTS:-}"  # variant 0: no extra flags
    for i in "${!flags[@]}"; do
        f=${flags[$i]}
        check "variant $i: configure -Dcuda_args='$f'" 120 meson configure build-gpu -Dcuda_args="$f" || continue
        check "variant $i: build" 480 ninja -C build-gpu bertpre || continue
        for shape in "128 256" "512 32"; do
            set -- $shape
            python3 tools/bench_gpu.py --out "$out/variant-$i" --profile "$1" "$2" >>"$log" 2>&1 || fails=$((fails + 1))
            cp "$out/variant-$i/profile-$1.txt" "$out/profile-$i-$1.txt" 2>/dev/null
            grep -E "^(# bertpre|op attention|group GEMMs)" "$out/profile-$i-$1.txt" 2>/dev/null |
                sed "s/^/variant $i, seq $1: /" | tee -a "$out/summary.txt"
        done
    done
    meson configure build-gpu -Dcuda_args= >>"$log" 2>&1
    ;;
interop)
    build bertpre tests/forward_dump
    check "export loads in transformers $(python3 -c 'import transformers; print(transformers.__version__)' 2>/dev/null)" \
        300 python3 tests/test_interop.py build-gpu/bertpre build-gpu/tests/forward_dump export hdf5=0 sentencepiece=0
    grep -E "^(ok|FAIL) " "$log" | tee -a "$out/summary.txt"
    ;;
data)
    build bertpre
    if ! build-gpu/bertpre bench data --help >/dev/null 2>&1 || build-gpu/bertpre bench data 2>&1 | grep -q "built without"; then
        echo "FAIL  this build has no HDF5 or SentencePiece (their development files are not on this machine)" |
            tee -a "$out/summary.txt"
        exit 1
    fi
    corpus=${CORPUS:-/usr/share/doc/linux-doc-6.1/Documentation}
    for th in 1 2 4 8 16; do
        check "bench data --threads $th" 300 build-gpu/bertpre bench data --tokenizer "${TOKENIZER:?set TOKENIZER}" \
            --threads "$th" --format text --pattern '*.rst.gz' --batches 500 "$corpus"
    done
    grep -E "MB/s|batches/s" "$log" | tee -a "$out/summary.txt"
    ;;
*)
    usage
    ;;
esac
echo "failed checks: $fails" | tee -a "$out/summary.txt"
[ $fails -eq 0 ]
