#!/usr/bin/env bash
# Builds every probe in cuda_check/, runs it on the GPU, and packs the recordings into $OUT
# (or the directory given as $1). Run on the GPU machine from the repository root:
#   bash cuda_check/run_probes.sh [OUTDIR]
# The recordings are then committed under data/hw/<gpu>/ (see data/hw/README.md).
set -euo pipefail
out="${1:-${OUT:?set OUT or pass an output directory}}"
mkdir -p "$out"
work="$(mktemp -d)"
nvcc --version | tail -2 > "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$out/env.txt"
echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)" >> "$out/env.txt"
echo "dirty: $(git status --porcelain 2>/dev/null | wc -l) files" >> "$out/env.txt"

if [[ "${PROBES:-cvt mma}" == *cvt* ]]; then
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I. cuda_check/cvt_probe.cu -o "$work/cvt_probe"
# Which SASS each probed instruction became (evidence for data/hw/README.md).
cuobjdump -sass "$work/cvt_probe" | grep -oE '\b(F2F|F2I|MUFU|F2FP|I2F|FRND)[A-Z0-9._]*' | sort | uniq -c \
  > "$out/cvt_probe_sass.txt" || true

"$work/cvt_probe" "$work"
cp "$work/cvt_summary.json" "$out/"
python3 cuda_check/pack_cvt_sample.py "$work" "$out/cvt_sample.h5"
fi

if [[ "${PROBES:-cvt mma}" == *mma* ]]; then
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I. cuda_check/mma_probe.cu -o "$work/mma_probe"
# The SASS of the matrix kernels: which instructions each PTX mma became (HMMA, IMMA, QGMMA,
# HGMMA, IGMMA, F2FP conversions, the INT4 helper routine).
cuobjdump -sass "$work/mma_probe" > "$work/mma_probe.sass"
gzip -9 -c "$work/mma_probe.sass" > "$out/mma_probe_sass.txt.gz"
grep -oE '\b(HGMMA|QGMMA|IGMMA|HMMA|IMMA)[A-Z0-9._x]*' "$work/mma_probe.sass" | sort | uniq -c > "$out/mma_probe_log.txt"
# The IGMMA lines themselves (operands and modifiers), as evidence for data/hw/README.md.
grep -E '\bIGMMA' "$work/mma_probe.sass" | sed 's/^ *//' >> "$out/mma_probe_log.txt" || true
# ... and the QGMMA lines (the f16-accumulating FP8 wgmma among them).
grep -E '\bQGMMA' "$work/mma_probe.sass" | sed 's/^ *//' | sort -u >> "$out/mma_probe_log.txt" || true
"$work/mma_probe" "$work" | tee -a "$out/mma_probe_log.txt" || true
# The groups of data/hw/h100/mma_h100.h5 and mma_h100_special.h5 are re-recorded in the same run
# and compared with them (both files come back only if a group differs); INT8 wgmma (IGMMA) goes
# to mma_h100_igmma.h5, FP8 wgmma with f16 accumulation and the two-level (promoted) chains to
# mma_h100_f16acc.h5.
python3 cuda_check/pack_mma.py "$work" "$work/mma_h100.h5" "$work/mma_h100_special.h5" "$out/mma_h100_igmma.h5" \
  --out-f16acc "$out/mma_h100_f16acc.h5" \
  --compare data/hw/h100/mma_h100.h5 --compare-special data/hw/h100/mma_h100_special.h5 \
  | tee -a "$out/mma_probe_log.txt"
if grep -q DIFFERENT "$out/mma_probe_log.txt"; then cp "$work/mma_h100.h5" "$work/mma_h100_special.h5" "$out/"; fi
fi
if [[ "${PROBES:-cvt mma}" == *special* ]]; then
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I. cuda_check/special_probe.cu -o "$work/special_probe"
cuobjdump -sass "$work/special_probe" | grep -oE '\b(MUFU|FMUL|FFMA|FSETP|FCHK)[A-Z0-9._]*' | sort | uniq -c > "$out/special_probe_sass.txt" || true
"$work/special_probe" "$work" | tee "$out/special_probe_log.txt"
python3 -c "import numpy as np, h5py, sys; t=np.fromfile(sys.argv[1], dtype='<u4'); f=h5py.File(sys.argv[2]+'.tmp','w'); f.create_dataset('rcp_table', data=t, compression='gzip', compression_opts=9, shuffle=True); f.attrs['instruction']='rcp.approx.ftz.f32'; f.attrs['inputs']='x = 1.m for m in 0..2^23-1 (bits 0x3F800000 | m)'; f.close()" "$work/rcp_table.bin" "$out/rcp_table_h100.h5"
mv "$out/rcp_table_h100.h5.tmp" "$out/rcp_table_h100.h5"
python3 -c "import numpy as np, h5py, sys; f=h5py.File(sys.argv[3]+'.tmp','w'); [f.create_dataset(n, data=np.fromfile(p, dtype='<u4'), compression='gzip', compression_opts=9, shuffle=True) for n, p in (('ex2_table', sys.argv[1]), ('lg2_table', sys.argv[2]))]; f.attrs['ex2_table']='ex2.approx.ftz.f32(+f * 2^-23) then ex2.approx.ftz.f32(-f * 2^-23), f in 0..2^23-1'; f.attrs['lg2_table']='lg2.approx.ftz.f32(1.m), bits 0x3F800000 | m'; f.close()" "$work/ex2_table.bin" "$work/lg2_table.bin" "$out/ex2_lg2_tables_h100.h5"
mv "$out/ex2_lg2_tables_h100.h5.tmp" "$out/ex2_lg2_tables_h100.h5"
python3 -c "import numpy as np, h5py, sys; f=h5py.File(sys.argv[2]+'.tmp','w'); f.create_dataset('lg2_half_table', data=np.fromfile(sys.argv[1], dtype='<u4'), compression='gzip', compression_opts=9, shuffle=True); f.attrs['lg2_half_table']='lg2.approx.ftz.f32(0.5 * 1.m), bits 0x3F000000 | m'; f.close()" "$work/lg2_half_table.bin" "$out/lg2_half_table_h100.h5"
mv "$out/lg2_half_table_h100.h5.tmp" "$out/lg2_half_table_h100.h5"
cp "$work/lg2_mismatches.bin" "$out/"
fi
ls -l "$out"
