#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian 12 machine: the Debian
# packages (compilers, meson, OpenBLAS, jansson, Python with torch; HDF5, SentencePiece,
# utf8proc for WordPiece, h5py and the linux-doc corpus for the data pipeline; Python's
# documentation sources, the rest of tools/tta.py's corpus), a virtual environment .venv
# with the Python reference packages, and .venv-hf5 with transformers 5 and torch 2.9 (no
# sentencepiece) for the exports' tokenizer test and the ModernBERT tests. Idempotent: when everything is there it
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
# apt_get ARGS...: apt-get ARGS, waiting while another apt or dpkg (an unattended upgrade, a
# second terminal) holds the package lock: it says so, names the holder apt names, says again
# every 30 s, and gives up after SETUP_APT_WAIT_SECONDS (default 1800) naming the lock.
# Any other failure ends the setup at once with apt's message.
apt_get() {
  local waited=0 limit=${SETUP_APT_WAIT_SECONDS:-1800} poll=${SETUP_APT_POLL_SECONDS:-5} out said=-30
  while :; do
    if out=$(DEBIAN_FRONTEND=noninteractive $sudo apt-get "$@" 2>&1); then
      return 0
    fi
    if ! grep -qE "Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock" <<<"$out"; then
      printf '%s\n' "$out" >&2
      echo "setup: error: apt-get $1 failed (its message is above)" >&2
      return 1
    fi
    local holder
    holder=$(grep -oE "Could not get lock [^ ]+[^.]*\. It is held by process [0-9]+( \([^)]*\))?" <<<"$out" | head -1 ||
             true)
    holder=${holder:-$(grep -m1 -E "lock" <<<"$out")}
    if [ "$waited" -ge "$limit" ]; then
      echo "setup: error: the package lock is still held after ${waited} s (${holder}); let that apt or dpkg" \
           "finish (or stop it), then run tools/setup.sh again" >&2
      return 1
    fi
    if [ $((waited - said)) -ge 30 ]; then
      echo "setup: waiting for the package lock, held by another apt or dpkg (${holder}): ${waited} s so far," \
           "at most ${limit} s"
      said=$waited
    fi
    sleep "$poll"
    waited=$((waited + poll))
  done
}
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "setup: installing Debian packages: ${missing[*]}"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
fi

# make_venv DIR SAID [OPTIONS...]: creates the virtual environment DIR where it is missing.
make_venv() {
  if [ ! -x "$1/bin/python" ]; then
    echo "setup: creating $1 ($2)"
    /usr/bin/python3 -m venv "${@:3}" "$1"
  fi
}
# pip_install DIR FILE STAMP SAID [PIP OPTIONS...]: pip installs tools/FILE into the environment
# DIR unless STAMP, a copy of FILE as last installed, says it is done.
pip_install() {
  local dir=$1 file=$root/tools/$2 stamp=$3 said=$4
  if ! cmp -s "$file" "$stamp"; then
    echo "setup: installing Python packages from tools/$2$said"
    "$dir/bin/pip" install -q --disable-pip-version-check "${@:5}" -r "$file"
    cp "$file" "$stamp"
  fi
}
venv="$root/.venv" hf5="$root/.venv-hf5"
make_venv "$venv" "with Debian's torch from the system site-packages" --system-site-packages
pip_install "$venv" requirements.txt "$venv/.requirements" ""
make_venv "$hf5" "transformers 5 and torch 2.9: tests interop_hf5, modernbert_*"
pip_install "$hf5" requirements-hf5.txt "$hf5/.requirements" " into $hf5"
pip_install "$venv" requirements-nodeps.txt "$venv/.requirements-nodeps" " (without their dependencies)" --no-deps
