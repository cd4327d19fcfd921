#!/usr/bin/env bash
# Installs what attnsim needs on a fresh Debian 12 machine (apt, PyPI), then configures and builds.
# Sourced by .ci/main and .ci/test; safe to run again (installs only what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

apt_packages=(cmake ninja-build g++ pkg-config libeigen3-dev libboost-dev libhdf5-dev libcli11-dev
              libgtest-dev libgmock-dev openmpi-bin libopenmpi-dev zlib1g-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "attnsim setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python helpers (ml_dtypes cross-check, results loading) from PyPI, into the python3 on PATH.
py_missing=()
for m in numpy ml_dtypes h5py pandas matplotlib; do
  python3 -c "import $m" >/dev/null 2>&1 || py_missing+=("$m")
done
if ((${#py_missing[@]})); then
  echo "attnsim setup: pip installing ${py_missing[*]}" >&2
  python3 -m pip install -q "${py_missing[@]}" >/dev/null 2>&1 ||
    echo "attnsim setup: pip install failed; Python cross-checks will be skipped" >&2
fi

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
