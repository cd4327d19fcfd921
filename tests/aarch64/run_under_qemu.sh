#!/usr/bin/env bash
# The aarch64.* tests (tests/aarch64/CMakeLists.txt): runs the cross-built attnsim_portable_tests
# under qemu-aarch64 with the given GoogleTest arguments. Exits 77 (ctest: skipped) when the cross
# compiler, qemu-aarch64 or the cross-built binary is missing, saying which and how to get it.
# Usage: run_under_qemu.sh SYSROOT EXECUTABLE [gtest arguments...]
set -u
sysroot=$1
exe=$2
shift 2
missing=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing+=("aarch64-linux-gnu-g++")
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=("qemu-aarch64")
if ((${#missing[@]})); then
  echo "SKIPPED: no ${missing[*]} on PATH: apt-get install g++-aarch64-linux-gnu qemu-user" \
       "(bash .ci/setup.sh installs them), then configure this build again"
  exit 77
fi
if [[ ! -x $exe ]]; then
  echo "SKIPPED: $exe is not built: the cross build is added when aarch64-linux-gnu-g++ and" \
       "qemu-aarch64 are found at configure time (and ATTNSIM_AARCH64_TESTS is ON): configure" \
       "this build again, then build it (target attnsim_aarch64, part of all)"
  exit 77
fi
echo "qemu-aarch64 -L $sysroot $exe $*"
exec qemu-aarch64 -L "$sysroot" "$exe" "$@"
