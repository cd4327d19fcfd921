#!/usr/bin/env bash
# Regenerates the results files the notebooks read (data/results/) from the bundled real-model
# dumps (data/real/) with the attnsim executable ($ATTNSIM_EXE or build/experiments/attnsim).
#   real_methods.h5   every method vs golden on every layer and head (experiments/configs/real_models.toml)
#   context_scale.h5  the same methods on SmolLM2 layer 15 cut to 128..1024 tokens, on it (512
#                     tokens) with V scaled by 2^-8..2^8 and with Q and K scaled by 1/4..4, and on
#                     synthetic N(0,1) inputs with 256..4096 keys
#   quant_k.h5        `attnsim quantize` of K (both models, every layer and head): quantizers ×
#                     granularities × smooth-K
#   sage2.h5          `attnsim repro sage2`: SageAttention2's ablations (Tables 4/17, 6/15, 7/16)
#                     and one- vs two-level FP22 accumulation over 1K..64K keys (§3.4, Fig. 17)
#   lean.h5           `attnsim repro lean`: measured vs predicted (timing model) lean and
#                     FlashDecoding times on the 331 H100 configurations of data/hw/h100/lean
#   lean_ragged.h5    `attnsim repro lean-ragged`: LeanAttention Appendix A / Fig. 11 by the model
#   lean_cta.h5       `attnsim repro lean-cta`: per-CTA work of one measured ragged batch
#   turbo.h5          `attnsim repro turbo`: TurboAttention's quantity,ours,paper table, with
#                     turbo_errors.h5 (stages, mixed precision, blocks, KIVI, SAS tiling),
#                     turbo_drift.h5 (every decode step) and turbo_memory.h5 beside it
# Takes about 15 s on two cores, plus about 1.5 min for sage2.h5, 30 s for the lean files and
# 2 min for the turbo files.
# Results are bit-identical for any thread count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exe="${ATTNSIM_EXE:-build/experiments/attnsim}"
out="${1:-data/results}"
mkdir -p "$out"
# Derived dumps (prefixes and scaled copies of SmolLM2 layer 15) under a stable relative path, so
# the results' `input` column is the same on every machine.
tmp=results/derived
mkdir -p "$tmp"

"$exe" sweep --config experiments/configs/real_models.toml --output "$out/real_methods.h5" --quiet

python3 - "$tmp" <<'PY'
import sys
import attnsim.results as ar
tmp = sys.argv[1]
for n in (128, 256, 512, 1024):
    ar.derive_dump("data/real/smollm2_gpl3.h5", "layer_15", f"{tmp}/ctx_n{n:04d}.h5", tokens=n)
for s in (2.0 ** -8, 2.0 ** -4, 1.0, 2.0 ** 4, 2.0 ** 8):
    ar.derive_dump("data/real/smollm2_gpl3.h5", "layer_15", f"{tmp}/scalev_{s:g}.h5", tokens=512, scale_v=s)
for s in (0.25, 0.5, 1.0, 2.0, 4.0):
    ar.derive_dump("data/real/smollm2_gpl3.h5", "layer_15", f"{tmp}/scaleqk_{s:g}.h5", tokens=512, scale_qk=s)
PY
methods="flash,flash:qkv=bf16,p=bf16,out=bf16,flash:qkv=fp16,p=fp16,out=fp16,flash:qkv=e4m3fn,p=e4m3fn,flash:qkv=e5m2,p=e5m2"
synthetic=()
for n in 256 512 1024 2048 4096; do synthetic+=("normal:hq=2,nq=128,nkv=$n,d=64"); done
"$exe" sweep --methods "$methods" --input "$tmp"/ctx_n*.h5 "$tmp"/scalev_*.h5 "$tmp"/scaleqk_*.h5 \
  --synthetic "${synthetic[@]}" --seeds 1 --output "$out/context_scale.h5" --quiet

"$exe" quantize --input data/real/smollm2_gpl3.h5 data/real/minilm_gpl3.h5 --tensor k \
  --quantizers sage_cuda_int8,sage_triton_int4,e4m3fn,e5m2,turbo_bpq4,turbo_bpq2 \
  --granularities per_tensor,per_channel,per_token,per_block:64,sage_sm90_k_per_thread,sage_sm89_k_per_thread \
  --output "$out/quant_k.h5" --quiet
"$exe" repro sage2 --out "$out/sage2.h5" --quiet >/dev/null
"$exe" repro lean --out "$out/lean.h5" --quiet >/dev/null
"$exe" repro lean-ragged --out "$out/lean_ragged.h5" --quiet >/dev/null
"$exe" repro lean-cta --out "$out/lean_cta.h5" --quiet >/dev/null
"$exe" repro turbo --out "$out/turbo.h5" --quiet >/dev/null
echo "wrote $out/real_methods.h5 $out/context_scale.h5 $out/quant_k.h5 $out/sage2.h5 $out/lean.h5 $out/lean_ragged.h5 $out/lean_cta.h5 $out/turbo*.h5"
