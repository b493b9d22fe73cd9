#!/usr/bin/env bash
# Configures (once) and builds into build/. Extra arguments go to 'meson setup'. The first
# build compiles every object (the CUDA ones with nvcc where it is installed) and every test
# program: minutes (8 on 2 busy cores with CUDA); later builds only what changed. Progress is
# printed every 10% of the steps; ninja's full output goes to build.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/.venv/bin:$PATH"
if [ ! -f build/build.ninja ]; then
  meson setup build "$@" >build-setup.log 2>&1 || { cat build-setup.log; exit 1; }
  grep -A12 '^bertpre' build-setup.log || true
fi
# ninja prints "[N/M] ..." per step: every 10% of the M steps is said here.
set +o pipefail
ninja -C build -j2 2>&1 | tee build.log | awk '
  match($0, /^\[[0-9]+\/[0-9]+\]/) {
    split(substr($0, 2, RLENGTH - 2), nm, "/"); p = int(100 * nm[1] / nm[2])
    if (p >= shown + 10 || nm[1] == nm[2]) { printf "build: %d of %d steps (%d%%)\n", nm[1], nm[2], p; shown = p; fflush() }
  }'
status=${PIPESTATUS[0]}
set -o pipefail
[ "$status" -eq 0 ] || { cat build.log; exit 1; }
