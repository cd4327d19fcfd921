#!/usr/bin/env bash
# Builds cuda_check/turbo/turbo_attention.cu, records the five cases (gen_turbo_inputs.py, fixed
# seeds) and times the INT8 prefill against our FP16 FA2-style prefill and one turbo decode step
# against our FP16 decode; packs everything into
# OUTDIR/turbo_h100.h5 (pack_turbo.py). Run on the GPU machine from the repository root:
#   bash cuda_check/turbo/run_turbo.sh OUTDIR
set -uo pipefail
out="${1:-${OUT:?set OUT or pass an output directory}}"
mkdir -p "$out"
work="$(mktemp -d)"
log="$out/turbo_log.txt"
{
  nvcc --version | tail -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git status --porcelain 2>/dev/null | wc -l) files"
} > "$out/turbo_env.txt"
build=(nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -fmad=false -Xptxas -v
       cuda_check/turbo/turbo_attention.cu -o "$work/turbo_attention")
echo "build: ${build[*]}" >> "$out/turbo_env.txt"
if ! "${build[@]}" 2> "$work/ptxas.txt"; then cat "$work/ptxas.txt" | tee -a "$log"; exit 1; fi
grep -E "Compiling entry|registers|spill" "$work/ptxas.txt" > "$log" || true
cuobjdump -sass "$work/turbo_attention" | grep -oE "(MUFU|FFMA|HFMA2|IMMA|HMMA)[.A-Z0-9]*" | sort | uniq -c > "$out/turbo_sass_ops.txt"
status=0
python3 cuda_check/turbo/gen_turbo_inputs.py "$work/in" || exit 1
for f in "$work"/in/*.bin; do
  name=$(basename "$f" .bin)
  timeout 120 "$work/turbo_attention" record "$f" "$work/in/$name.out" 2>&1 | tee -a "$log" || status=1
done
tar czf "$out/turbo_raw.tar.gz" -C "$work/in" . || true
echo "== compute-sanitizer memcheck (d_outliers)" | tee -a "$log"
timeout 90 compute-sanitizer --tool memcheck "$work/turbo_attention" record "$work/in/d_outliers.bin" "$work/san.out" 2>&1 | tail -3 | tee -a "$log" || true
echo "== time" | tee -a "$log"
timeout 300 "$work/turbo_attention" time "$out/turbo_timings.csv" 2>&1 | tee -a "$log" || status=1
python3 cuda_check/turbo/pack_turbo.py "$work/in" "$out/turbo_h100.h5" \
  "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
  "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)" \
  "cuda=$(nvcc --version | grep -o 'release [0-9.]*')" 2>&1 | tee -a "$log" || status=1
exit $status
