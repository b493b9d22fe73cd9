#!/usr/bin/env bash
# The main job on a fresh machine: installs, builds, and pretrains the tiny BERT config
# on the CPU, printing MLM/NSP loss and MLM accuracy. Extra arguments go to 'bertpre train'
# (for example --set train.steps=50).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/tools/setup.sh"
"$root/tools/build.sh"
exec "$root/build/bertpre" train configs/demo-tiny.json "$@"
