// FlashAttention-2 forward as a preset of the attention pipeline (sim/pipeline): tiled online
// softmax in the order the CUDA kernel computes, with every numeric choice a configuration field.
#pragma once

#include <string>
#include <vector>

#include "numerics/rounding_storage.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// Arithmetic of the softmax state (m, l, the O accumulator, exp, rescale) and, unless qk_dot /
// pv_dot say otherwise, of both inner products.
//  kFp32  FP32 throughout, like the kernel
//  kFp64  FP64 throughout (an upper bound on what better accumulation can buy)
enum class Accum { kFp32, kFp64 };
// Inner-product model of one GEMM stage: kFollowAcc uses fp32 when acc = kFp32 and fp64 when
// acc = kFp64; kFp32 / kFp64 name a CUDA-core model (numerics/dot.hpp). Tensor-core models are
// pipeline choices (Pipeline::qk, ::pv), reachable from flash_pipeline's result.
enum class DotChoice { kFollowAcc, kFp32, kFp64 };

// Defaults: a plain FP32 FA2 kernel (FP32 inputs, FP32 P, FP32 output, nvcc default FMA).
struct FlashConfig {
  int block_q = 64;   // kBlockM
  int block_kv = 64;  // kBlockN
  Encoding q = Encoding::kFp32;
  Encoding k = Encoding::kFp32;
  Encoding v = Encoding::kFp32;
  Encoding p = Encoding::kFp32;    // P is rounded to this before P·V (FA2 convert_type<Element>)
  Encoding out = Encoding::kFp32;  // O is rounded to this when written (fp32, bf16, fp16)
  StoragePolicy conversion;        // how each storage format is reached (RNE; fp8 satfinite,
                                   // 16-bit overflow to Inf; numerics/rounding_storage.hpp)
  Accum acc = Accum::kFp32;
  DotChoice qk_dot = DotChoice::kFollowAcc;  // S = Q Kᵀ
  DotChoice pv_dot = DotChoice::kFollowAcc;  // O = O·alpha + P V
  ExpKind exp = ExpKind::kExp2;
  // kExp2: FA2 writes exp2f(x * scale - max_scaled), which nvcc's default --fmad=true compiles to
  // one FFMA; fma = false rounds the product first.
  bool fma = true;
  KvOrder kv_order = KvOrder::kDescending;
  RowSum row_sum = RowSum::kQuad;
};

// The pipeline of a FlashConfig: every stage FA2's (sim/flash/README.md), the formats and policies
// from the config.
Pipeline flash_pipeline(const FlashConfig& c);

// One line naming every field, e.g.
// "flash2 bq=64 bk=64 q=fp32 k=fp32 v=fp32 p=fp32 out=fp32 fp8=rne/saturate half=rne/inf acc=fp32
// qk=fp32 pv=fp32 exp=exp2 fma=on kv=desc rowsum=quad".
std::string describe(const FlashConfig& c);

struct FlashResult {
  std::vector<float> o;  // [batch, heads_q, len_q, head_dim_v], values of cfg.out
  // Natural-log LSE per row, FA2's m·sm_scale + log(l) in the state's arithmetic, rounded to
  // FP32; +inf for a row with no visible key (FA2 writes INFINITY there when not split).
  std::vector<float> lse;
};

FlashResult flash_attention(const AttentionInput& in, const FlashConfig& cfg);
std::vector<float> flash_attention_ref(const AttentionInput& in, const FlashConfig& cfg);

}  // namespace attnsim
