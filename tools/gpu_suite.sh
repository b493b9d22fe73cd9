#!/usr/bin/env bash
# The GPU test suite (meson suite 'gpu': every CUDA op and the whole model against the CPU
# reference at BERT-base shapes, loss scaling with a forced overflow) on a GPU machine that
# has CUDA, PyTorch, meson and ninja but no network and no Debian -dev packages.
#
#   tools/gpu_suite.sh bundle   on the development machine: copies jansson's header and static
#                               library into .gpu-deps/ (ignored by git, about 200 KB), the
#                               one build dependency such a machine lacks (the CPU reference
#                               falls back to its own GEMM when no BLAS is found)
#   tools/gpu_suite.sh run      on the GPU machine, from the repository root with .gpu-deps/
#                               carried along: builds build-gpu/ for the GPU it finds (its
#                               compute capability) and runs the suite; the log and a summary
#                               go to $OUT (or gpu-results/ when $OUT is unset)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
case "${1:-}" in
bundle)
  mkdir -p .gpu-deps/include .gpu-deps/lib
  inc=$(pkg-config --variable=includedir jansson)
  lib=$(pkg-config --variable=libdir jansson)
  cp "$inc"/jansson.h "$inc"/jansson_config.h .gpu-deps/include/
  cp "$lib"/libjansson.a .gpu-deps/lib/
  du -sh .gpu-deps
  ;;
run)
  out=${OUT:-$root/gpu-results}
  mkdir -p "$out"
  [ -f .gpu-deps/lib/libjansson.a ] || { echo "gpu_suite: .gpu-deps/ missing: run 'tools/gpu_suite.sh bundle' first and carry it" >&2; exit 1; }
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
    echo "nvcc: $(nvcc --version | tail -1)"
    echo "commit: ${BERTPRE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  } | tee "$out/summary.txt"
  if [ ! -f build-gpu/build.ninja ]; then
    meson setup build-gpu -Ddeps_prefix="$root/.gpu-deps" -Dgpu_archs="$arch" -Dmpi=disabled -Dnccl=disabled \
      -Dhdf5=disabled -Dsentencepiece=disabled >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
  fi
  ninja -C build-gpu >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  set +e
  meson test -C build-gpu --suite gpu --print-errorlogs --num-processes 1 -v >"$out/gpu-suite.log" 2>&1
  rc=$?
  set -e
  # Per check: the worst relative error, and the time of each CUDA call at BERT-base shapes.
  grep -E "^(ok|FAIL|time) " "$out/gpu-suite.log" | sort | uniq -c | sort -k2 >"$out/checks.txt" || true
  grep -E "^ *[0-9]+/[0-9]+ " "$out/gpu-suite.log" | tee -a "$out/summary.txt"
  exit $rc
  ;;
*)
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
