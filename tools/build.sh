#!/usr/bin/env bash
# Configures (once) and builds into build/:
#
#   tools/build.sh [--gpu | --no-gpu] [MESON SETUP OPTIONS...]
#
# Device code (the CUDA kernels for the GPUs of meson's gpu_archs, compiled by nvcc: most of a
# first build's time) is built where it can run: when a GPU is present (nvidia-smi lists one)
# or with --gpu (for a GPU elsewhere, or CI, which compiles it once so that a GPU run never meets
# a compile error). On a machine without a GPU the first configuration leaves it out
# (-Dcuda=disabled); everything such a machine runs is built: the CPU backend, and the CUDA
# emulation that compiles the same kernels for the host, for the tests. The choice is kept
# with build/: a later --gpu adds the device code, --no-gpu removes it; a -Dcuda=... of your own
# wins over both. The build summary's last line says which.
#
# The first build compiles every object and test program: about 2 minutes on 2 idle cores
# without device code (docs/TESTING.md); later builds only what changed. Progress is printed
# every 10% of the steps, and at least every 30 s (BUILD_PROGRESS_SECONDS) while a long step
# runs, naming it; ninja's full output goes to build.log. Extra arguments go to 'meson setup'
# the first time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/.venv/bin:$PATH"

flag=""  # enabled / disabled: what --gpu / --no-gpu ask
args=()
for a in "$@"; do
  case "$a" in
    --gpu) flag=enabled ;;
    --no-gpu) flag=disabled ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
  esac
done
own_cuda=0  # a -Dcuda=... of the caller's own
for a in ${args[@]+"${args[@]}"}; do [[ "$a" == -Dcuda=* ]] && own_cuda=1; done
gpu_here() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }
said_flag() { [ "$flag" = enabled ] && echo "--gpu" || echo "--no-gpu"; }

if [ ! -f build/build.ninja ]; then
  opts=()
  if [ "$own_cuda" = 1 ]; then reason="your -Dcuda"
  elif [ -n "$flag" ]; then opts=("-Dcuda=$flag"); reason=$(said_flag)
  elif gpu_here; then opts=("-Dcuda=auto"); reason="a GPU is present"
  else opts=("-Dcuda=disabled"); reason="no GPU here"
  fi
  meson setup build ${args[@]+"${args[@]}"} ${opts[@]+"${opts[@]}"} >build-setup.log 2>&1 ||
    { cat build-setup.log; exit 1; }
  grep -A12 '^bertpre' build-setup.log || true
elif [ -n "$flag" ]; then
  reason=$(said_flag)
  now=$(meson introspect build --buildoptions |
        python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "cuda"))')
  if [ "$now" != "$flag" ]; then
    echo "build: reconfiguring build/ with -Dcuda=$flag (device code $([ "$flag" = enabled ] && echo added ||
      echo removed))"
    meson setup --reconfigure build "-Dcuda=$flag" >build-setup.log 2>&1 || { cat build-setup.log; exit 1; }
  fi
else
  reason="as build/ was configured"
fi

# ninja prints "[N/M] what" as each step starts: every 10% of the M steps is said, and, when
# 30 s passed without a line, the newest step started and how long it has run (to the second
# this loop first saw it).
every=${BUILD_PROGRESS_SECONDS:-30}
ninja -C build -j2 >build.log 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null' INT TERM
shown=-10 said=$SECONDS step="" since=$SECONDS
progress() {  # the last "[N/M] ..." line of build.log, said when due ($1 = 1: at the end)
  local last n m p
  last=$(grep -E '^\[[0-9]+/[0-9]+\]' build.log 2>/dev/null | tail -n 1) || true
  [ -n "$last" ] || return 0
  [ "$last" = "$step" ] || step=$last since=$SECONDS
  n=${last#[}; n=${n%%/*}; m=${last#*/}; m=${m%%]*}; p=$((100 * n / m))
  if [ "$p" -ge $((shown + 10)) ] || { [ "$1" = 1 ] && [ "$n" = "$m" ] && [ "$p" != "$shown" ]; }; then
    echo "build: $n of $m steps ($p%)"
    shown=$p said=$SECONDS
  elif [ $((SECONDS - said)) -ge "$every" ]; then
    echo "build: $n of $m steps ($p%), $((SECONDS - since)) s on: ${last#*] }"
    said=$SECONDS
  fi
}
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  progress 0
done
status=0
wait "$pid" || status=$?
trap - INT TERM
progress 1
[ "$status" -eq 0 ] || { cat build.log; exit 1; }

archs=$(meson introspect build --buildoptions |
        python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "gpu_archs"))')
if grep -q '^#define BERTPRE_HAVE_CUDA 1' build/bertpre_config.h; then
  echo "build: device code compiled for compute capabilities ${archs} (${reason})"
elif command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "build: device code not built (${reason}): the CPU backend and the CUDA emulation only;" \
       "tools/build.sh --gpu builds it"
else
  echo "build: device code not built (nvcc not found: no CUDA Toolkit); the CPU backend and the CUDA emulation only"
fi
