#!/usr/bin/env bash
# Builds cuda_check/libm_probe.cu (its kernels three times: plain -O3, -ftz=true,
# --use_fast_math; the host driver with numerics/special.cpp), saves the PTX and SASS of each build,
# and runs the probe: CUDA's expf, logf, __expf, __logf against attnsim's models over all 2^32
# inputs, and the adversarial sample. Run on the GPU machine from the repository root:
#   bash cuda_check/run_libm.sh OUTDIR [CPU_SECONDS]
# OUTDIR gets libm_probe_log.txt, libm_{plain,ftz,fast}.sass.txt, libm_sample.bin,
# libm_digests.bin and libm_mismatches.bin; cuda_check/pack_libm.py packs the sample into
# data/hw/h100/libm/libm_h100.h5 (see data/hw/h100/libm/README.md).
set -euo pipefail
out="${1:?usage: run_libm.sh OUTDIR [CPU_SECONDS]}"
budget="${2:-150}"
mkdir -p "$out"
work="$(mktemp -d)"
log="$out/libm_probe_log.txt"
{
  nvcc --version | tail -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  g++ --version | head -1
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git status --porcelain 2>/dev/null | wc -l) files"
  echo "cpus: $(nproc)"
} > "$log"
gencode=-gencode=arch=compute_90a,code=sm_90a
declare -A flags=([plain]="" [ftz]="-ftz=true" [fast]="--use_fast_math")
for b in plain ftz fast; do
  nvcc -std=c++17 -O3 $gencode ${flags[$b]} -I. -DATTNSIM_LIBM_BUILD=$b \
    -c cuda_check/libm_probe.cu -o "$work/libm_$b.o" &
  nvcc -std=c++17 -O3 -arch=compute_90a ${flags[$b]} -I. -DATTNSIM_LIBM_BUILD=$b -ptx \
    cuda_check/libm_probe.cu -o "$work/libm_$b.ptx" &
done
# The CPU models: the same flags as the CMake build (no contraction, no fast math).
g++ -std=c++20 -O2 -ffp-contract=off -fno-fast-math -I. -DATTNSIM_DATA_DIR="\"$PWD/data\"" \
  -c numerics/special.cpp -o "$work/special.o" &
nvcc -std=c++17 -O3 $gencode -I. -DATTNSIM_LIBM_DRIVER -Xcompiler -ffp-contract=off \
  -c cuda_check/libm_probe.cu -o "$work/libm_driver.o" &
wait
nvcc $gencode "$work/libm_driver.o" "$work/libm_plain.o" "$work/libm_ftz.o" "$work/libm_fast.o" \
  "$work/special.o" -o "$work/libm_probe"
for b in plain ftz fast; do
  {
    echo "# nvcc -O3 $gencode ${flags[$b]}: PTX of the eval kernels"
    sed -n '/\.entry/,$p' "$work/libm_$b.ptx"
    echo "# SASS (cuobjdump -sass)"
    cuobjdump -sass "$work/libm_$b.o"
  } > "$out/libm_$b.sass.txt"
  echo "SASS opcodes, build $b:" >> "$log"
  grep -oE '\b(MUFU|FFMA|FMUL|FADD|FSETP|FSEL|FMNMX|SHF|IMAD|IADD3|LOP3|I2F|FCHK)[A-Z0-9._]*' \
    "$out/libm_$b.sass.txt" | sort | uniq -c >> "$log" || true
done
"$work/libm_probe" "$out" "$budget" | tee -a "$log"
ls -l "$out"
