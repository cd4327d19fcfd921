// SageAttention 1 / 2 / 2++ as presets of the attention pipeline: each public kernel as the H100
// runs it (thu-ml/SageAttention d1a57a5, read off its source and SASS, checked bit for bit against
// recordings, data/hw/h100/sage) and the SageAttention2 paper's algorithm as written.
// sim/sage/README.md names the kernel line or paper section behind every choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// Which code path.
//  kSage1  sageattn_qk_int8_pv_fp16_triton (SageAttention 1: per-block INT8 Q/K, Q prescaled,
//          FP16 P·V on Triton's fp16-accumulating wgmma).
//  kSm80   sageattn_qk_int8_pv_fp16_cuda (qk_int_sv_f16_cuda_sm80.cu).
//  kSm89   sageattn_qk_int8_pv_fp8_cuda (qk_int_sv_f8_cuda_sm89.cuh: FP8 P and V).
//  kSm90   sageattn_qk_int8_pv_fp8_cuda_sm90 (qk_int_sv_f8_cuda_sm90.cu: wgmma).
//  kPaper  SageAttention2 (arXiv 2411.10958) as written: INT4 per-thread Q/K, smooth Q with ΔS,
//          FP8 P and V, two-level accumulation.
enum class SageArch { kSage1, kSm80, kSm89, kSm90, kPaper };

// pv_accum_dtype of the public entry points (and the paper's two-level accumulation).
enum class SagePvAccum { kDefault, kFp32, kFp16PlusFp32, kFp16, kFp32PlusFp32, kFp32PlusFp16 };

// The GPU whose instructions an sm89 kernel runs on: kAda (the sm_89 FP8 mma.sync models,
// UNVERIFIED: no Ada GPU here) or kH100 (the same kernel compiled for sm_90a, where ptxas emulates
// FP8 mma.sync with fp16 HMMAs: recorded).
enum class SageTarget { kAda, kH100 };

// The paper's baselines for outliers in Q and K (SageAttention2 Table 4): none, SmoothQuant-style
// migration with alpha = 0.5 (SmoothAttention), a random Hadamard rotation of Q and K.
enum class SageSmooth { kNone, kSmoothAttn, kHadamard };

struct SageOptions {
  SageArch arch = SageArch::kSm90;
  SagePvAccum pv_accum = SagePvAccum::kDefault;  // kDefault: the entry point's default
  SageTarget target = SageTarget::kAda;          // kSm89 only
  // The 16-bit format the kernels take: a dump in another dtype is rounded to it (RNE).
  Encoding in = Encoding::kBf16;
  // s8 or s4 (the paper's INT4; no public kernel); kFp32: the path's own (s4 for kPaper, else s8).
  Encoding qk = Encoding::kFp32;
  // qk_quant_gran: per_thread, per_warp, per_block, per_token, per_tensor; "" = the path's own
  // (per_block for kSage1, per_thread otherwise).
  std::string qk_gran;
  bool smooth_k = true;  // the public entry points' default
  // The paper's smooth Q (block mean + ΔS; no public kernel does it). -1: the path's default (on
  // for kPaper, off otherwise).
  int smooth_q = -1;
  bool smooth_v = false;  // sm80 "fp16", sm89 "fp32" and the paper
  Encoding pv = Encoding::kFp32;  // kFp32 here means "the path's own" (fp16 or e4m3fn)
  // INT8 P̃ with the static δ_P = 1/127 (§3.3's 1/448 for e4m3, read for int8; pv=int8_static)
  // instead of a scale per row and KV block (pv=int8). Paper only.
  bool pv_int_static = false;
  SageSmooth smooth = SageSmooth::kNone;
  std::uint64_t hadamard_seed = 1;
};

// The pipeline of a configuration for an input shape (the tiles and WARPQ depend on head_dim).
// Throws std::invalid_argument with one line for combinations the path does not have.
Pipeline sage_pipeline(const SageOptions& o, const AttentionShape& shape);

struct SageResult {
  PipelineResult r;    // o in the output dtype's values; lse as the entry point returns it
  Pipeline pipeline;
  // The public kernels' own LSE before the Python wrapper (lse2 = log2(l) + m, base 2 in the
  // exponent's units) and the wrapper's smooth-K term (q·kmᵀ rounded to the input dtype), per
  // row; empty for the paper's natural-log LSE.
  std::vector<double> lse2;
  std::vector<float> lse_corr;
};

// The Python wrapper's LSE (core.py:329/631/824/994): f32(f32(lse2 · 0x3F317218) + f32(corr ·
// f32(sm_scale))), corr = 0 without smooth K.
float sage_wrapper_lse(double lse2, float corr, double sm_scale);

// The whole entry point: head-dim handling, the smoothing baselines, the pipeline, and the
// Python wrapper's LSE (lse2 / 1.44269504 + smooth-K correction · sm_scale).
SageResult sage_attention(const AttentionInput& in, const SageOptions& o);
// The same on a given pipeline (sage_pipeline with stage overrides: `attnsim attribute` runs its
// counterfactuals through the same entry point, smoothing baselines and LSE wrapper included).
SageResult sage_attention(const AttentionInput& in, const SageOptions& o, const Pipeline& pipeline);

// The 16-bit format the kernel computes in for this input: the input's own when it is fp16 or
// bf16 (a dump stored in that dtype), else o.in.
Encoding sage_input_encoding(const AttentionInput& in, const SageOptions& o);

// The names used by method strings and the README.
const char* sage_arch_name(SageArch a);
const char* sage_pv_accum_name(SagePvAccum a);

}  // namespace attnsim
