#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian 12 machine: the Debian
# packages (compilers, meson, OpenBLAS, jansson, Python with torch; HDF5, SentencePiece,
# utf8proc for WordPiece, h5py and the linux-doc corpus for the data pipeline; Python's
# documentation sources, the rest of tools/tta.py's corpus), a virtual environment .venv
# with the Python reference packages, and .venv-hf5 with transformers 5 alone (no torch, no
# sentencepiece) for the exports' tokenizer test. Idempotent: when everything is there it
# only checks, in a second or two.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

debs=(gcc g++ meson ninja-build pkg-config libopenblas-dev libjansson-dev
      python3 python3-venv python3-pip python3-torch python3-torchvision python3-numpy python3-matplotlib
      libopenmpi-dev openmpi-bin libhdf5-dev libsentencepiece-dev libutf8proc-dev libzstd-dev zlib1g-dev libdeflate-dev python3-h5py linux-doc-6.1
      python3.11-doc)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv (with Debian's torch from the system site-packages)"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
stamp="$venv/.requirements"
if ! cmp -s "$root/tools/requirements.txt" "$stamp"; then
  echo "setup: installing Python packages from tools/requirements.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/tools/requirements.txt"
  cp "$root/tools/requirements.txt" "$stamp"
fi
hf5="$root/.venv-hf5"
if [ ! -x "$hf5/bin/python" ]; then
  echo "setup: creating $hf5 (transformers 5, without torch: test interop_hf5)"
  /usr/bin/python3 -m venv "$hf5"
fi
if ! cmp -s "$root/tools/requirements-hf5.txt" "$hf5/.requirements"; then
  echo "setup: installing Python packages from tools/requirements-hf5.txt into $hf5"
  "$hf5/bin/pip" install -q --disable-pip-version-check -r "$root/tools/requirements-hf5.txt"
  cp "$root/tools/requirements-hf5.txt" "$hf5/.requirements"
fi
stamp="$venv/.requirements-nodeps"
if ! cmp -s "$root/tools/requirements-nodeps.txt" "$stamp"; then
  echo "setup: installing Python packages from tools/requirements-nodeps.txt (without their dependencies)"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$root/tools/requirements-nodeps.txt"
  cp "$root/tools/requirements-nodeps.txt" "$stamp"
fi
