#!/usr/bin/env bash
# Builds cuda_check/lean/lean_decode.cu with ONNX Runtime's flags for its lean kernels, saves the
# SASS (whole listing gzipped, plus per-kernel opcode counts), records the cases (lean and
# FlashDecoding, each run twice and compared bit for bit, checked against FP64), times lean,
# FlashDecoding and FlashDecoding with one split, and runs compute-sanitizer on one small case.
# Run on the GPU machine from the repository root:
#   bash cuda_check/lean/run_lean.sh OUTDIR        (TIME_MAX_CONFIGS=N times a spread subset)
# Then, here: python3 cuda_check/lean/pack_lean.py OUTDIR data/hw/h100/lean/ attr=value ...
# (data/hw/h100/lean/README.md has the exact command). OUTDIR gets at most 8 files.
set -uo pipefail
out="${1:-${OUT:?set OUT or pass an output directory}}"
mkdir -p "$out"
work="$(mktemp -d)"
log="$out/lean_log.txt"
{
  nvcc --version | tail -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty: $(git status --porcelain 2>/dev/null | wc -l) files"
} > "$out/lean_env.txt"

# ORT's CUDA flags for contrib_ops (cmake/onnxruntime_providers_cuda.cmake, CMAKE_CUDA_FLAGS):
# Release -O3, no --use_fast_math, default -fmad=true, --expt-relaxed-constexpr; the kernel spells
# every float operation as an explicit _rn intrinsic, so contraction cannot change it.
build=(nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
       -Xptxas -v -I. cuda_check/lean/lean_decode.cu -o "$work/lean_decode")
echo "build: ${build[*]}" >> "$out/lean_env.txt"
if ! "${build[@]}" 2> "$work/ptxas.txt"; then
  cat "$work/ptxas.txt" | tee -a "$log"
  exit 1
fi
grep -E "Compiling entry|registers|spill|stack" "$work/ptxas.txt" > "$log" || true

# SASS: per kernel, how often each opcode family appears, and the whole listing.
cuobjdump -sass "$work/lean_decode" > "$work/lean.sass"
gzip -9 -c "$work/lean.sass" > "$out/lean_sass.txt.gz"
awk '/Function :/ { fn = $3 }
     /\/\*[0-9a-f]+\*\// {
       line = $0; sub(/^[^*]*\/\*[0-9a-f]+\*\/ */, "", line); sub(/^@!?U?P[0-9T] */, "", line);
       split(line, w, /[ ;]/); op = w[1];
       if (op ~ /^(MUFU|HMMA|FFMA|FMUL|FADD|FMNMX|FCHK|F2F|F2FP|CALL|LDSM|LDGSTS|STL|LDL|RED|ATOM|SHFL|BAR|MEMBAR)/)
         count[fn " " op]++ }
     END { for (k in count) print k, count[k] }' "$work/lean.sass" | sort > "$out/lean_sass_summary.txt"

status=0
echo "== record" | tee -a "$log"
timeout 150 "$work/lean_decode" record "$work" 2>&1 | tee -a "$log" || status=1
cp "$work/lean_record.bin" "$work/lean_manifest.json" "$out/" || status=1

echo "== compute-sanitizer (n_b1_g4_lk777: 4 CTAs, one host waiting on 3 splits)" | tee -a "$log"
mkdir -p "$work/san"
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool "$tool" "$work/lean_decode" record "$work/san" n_b1_g4_lk777 \
    2>&1 | tail -3 | sed "s/^/$tool: /" | tee -a "$log" || true
done

echo "== time" | tee -a "$log"
timeout 330 "$work/lean_decode" time "$out/lean_time_raw.csv" ${TIME_MAX_CONFIGS:-} 2>&1 | tee -a "$log" || status=1
exit $status
