// FlashAttention-2 forward as a reference kernel: tiled online softmax, in the order the CUDA
// kernel computes, with every numeric choice a configuration field.
#pragma once

#include <string>
#include <vector>

#include "sim/problem.hpp"

namespace attnsim {

// Formats a tensor is stored in before it feeds a matrix product (RNE; FP8 saturates as CUDA's
// __nv_fp8 constructors do, bf16/fp16 overflow to Inf as cvt.rn does; see sim/flash/README.md).
enum class Storage { kFp32, kBf16, kFp16, kE4m3fn, kE5m2 };
// Arithmetic of the inner products and of the softmax state.
//  kFp32  FP32, each product rounded then added in natural k order (no FMA), like a CUDA-core loop
//  kFp64  FP64 throughout (an upper bound on what better accumulation can buy)
// Tensor-core accumulation models (HMMA, FP22) plug into the same stage in a later issue.
enum class Accum { kFp32, kFp64 };
// How P is formed. kExp2 is FA2/FA3: p = exp2(s * scale·log2e - m * scale·log2e); kExp is the
// textbook p = exp((s - m) * scale).
enum class ExpKind { kExp2, kExp };

struct FlashConfig {
  int block_q = 64;
  int block_kv = 64;
  Storage q = Storage::kFp32;
  Storage k = Storage::kFp32;
  Storage v = Storage::kFp32;
  Storage p = Storage::kFp32;   // P is rounded to this before P·V (kernels convert to fp16/bf16)
  Storage out = Storage::kFp32; // O is rounded to this when written
  Accum acc = Accum::kFp32;
  ExpKind exp = ExpKind::kExp2;
  // FA2 compiles `exp2f(s * scale - max_scaled)` with nvcc's default --fmad=true, which fuses the
  // multiply and subtract into one FFMA; fma=false rounds the product first.
  bool fma = true;
};

std::string describe(const FlashConfig& c);
std::string storage_name(Storage s);

struct FlashResult {
  std::vector<float> o;    // [batch, heads_q, len_q, head_dim_v], values of cfg.out
  std::vector<float> lse;  // natural-log LSE per row (+inf for a row with no visible key, as FA2)
};

FlashResult flash_attention(const AttentionInput& in, const FlashConfig& cfg);
std::vector<float> flash_attention_ref(const AttentionInput& in, const FlashConfig& cfg);

// Round-trip of one value through a storage format (RNE; FP8 satfinite; 16-bit IEEE overflow).
float round_to_storage(float x, Storage s);

}  // namespace attnsim
