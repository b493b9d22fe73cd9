#!/usr/bin/env bash
# Configures (once) and builds into build/. Extra arguments go to 'meson setup'.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/.venv/bin:$PATH"
if [ ! -f build/build.ninja ]; then
  meson setup build "$@" >build-setup.log 2>&1 || { cat build-setup.log; exit 1; }
  grep -A12 '^bertpre' build-setup.log || true
fi
ninja -C build -j2 >build.log 2>&1 || { cat build.log; exit 1; }
