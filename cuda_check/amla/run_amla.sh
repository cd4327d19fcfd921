#!/usr/bin/env bash
# Builds cuda_check/amla/amla_decode.cu, probes the FP32 atomicAdd on subnormals, records every
# case of tests/hw/amla_cases.hpp through both kernels (AMLA and Base), times them, and saves the
# SASS with a per-kernel opcode count. Run on the GPU machine from the repository root:
#   bash cuda_check/amla/run_amla.sh [OUTDIR]
# Then, here: python3 cuda_check/amla/pack_amla.py OUTDIR data/hw/h100/amla/amla_h100.h5 ...
# (data/hw/h100/amla/README.md has the exact command).
set -euo pipefail
out="${1:-${OUT:?set OUT or pass an output directory}}"
mkdir -p "$out"
work="$(mktemp -d)"
{
  nvcc --version | tail -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git status --porcelain 2>/dev/null | wc -l) files"
} > "$out/amla_env.txt"

# -fmad=false: no FFMA contraction anywhere (the kernel also spells every operation as _rn);
# -ftz, -prec-div and -prec-sqrt stay at their IEEE defaults.
build=(nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -fmad=false
       -Xcompiler -ffp-contract=off -lineinfo -Xptxas -v -I. cuda_check/amla/amla_decode.cu
       -o "$work/amla_decode")
echo "${build[*]}" >> "$out/amla_env.txt"
"${build[@]}" 2> "$work/ptxas.txt"
grep -E "Compiling entry|registers|spill" "$work/ptxas.txt" > "$out/amla_log.txt" || true

# SASS: the whole listing (gzipped) and, per kernel, how often each opcode family appears.
cuobjdump -sass "$work/amla_decode" > "$work/amla.sass"
gzip -9 -c "$work/amla.sass" > "$out/amla_sass.txt.gz"
awk '/Function :/ { fn = $3 }
     /\/\*[0-9a-f]+\*\// {
       line = $0; sub(/^[^*]*\/\*[0-9a-f]+\*\/ */, "", line); sub(/^@!?U?P[0-9T] */, "", line);
       split(line, w, /[ ;]/); op = w[1];
       if (op ~ /^(MUFU|HMMA|RED|ATOM|FFMA|FMUL|FADD|FCHK|F2F|FRND|F2I|I2F|CALL|LDSM|LDGSTS|FMNMX|FSETP)/)
         count[fn " " op]++ }
     END { for (k in count) print k, count[k] }' "$work/amla.sass" | sort > "$out/amla_sass_summary.txt"

"$work/amla_decode" probe | tee -a "$out/amla_log.txt"
"$work/amla_decode" record "$work" | tee -a "$out/amla_log.txt"
cp "$work/amla_record.bin" "$work/amla_cases.txt" "$out/"
"$work/amla_decode" time "$out/amla_time.txt" | tee -a "$out/amla_log.txt"
# The same timings once more: their spread is the noise floor of the comparison.
echo "repeat:" | tee -a "$out/amla_log.txt"
"$work/amla_decode" time "$work/amla_time_repeat.txt" | tee -a "$out/amla_log.txt"
# Shared-memory races and out-of-bounds accesses on one small case (two KV blocks, 16 rows).
if [[ "${SANITIZE:-1}" == 1 ]]; then
  mkdir -p "$work/san"
  for tool in racecheck memcheck; do
    timeout 150 compute-sanitizer --tool "$tool" "$work/amla_decode" record "$work/san" g16_u20_s1000 \
      2>&1 | tail -4 | sed "s/^/$tool: /" | tee -a "$out/amla_log.txt" || true
  done
fi
cat "$out/amla_time.txt"
