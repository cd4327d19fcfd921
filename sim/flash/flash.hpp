// FlashAttention-2 forward as a reference kernel: tiled online softmax, in the order the CUDA
// kernel computes, with every numeric choice a configuration field.
#pragma once

#include <string>
#include <vector>

#include "numerics/rounding_storage.hpp"
#include "numerics/softmax_state.hpp"
#include "sim/flash/inner_product.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// Arithmetic of the softmax state (m, l, the O accumulator, exp, rescale) and, unless qk_dot /
// pv_dot say otherwise, of both inner products.
//  kFp32  FP32 throughout, like the kernel
//  kFp64  FP64 throughout (an upper bound on what better accumulation can buy)
enum class Accum { kFp32, kFp64 };
// Inner-product model of one GEMM stage: kFollowAcc uses kFp32 when acc = kFp32 and kFp64 when
// acc = kFp64; the others name an InnerProduct model (sim/flash/inner_product.hpp).
enum class DotChoice { kFollowAcc, kFp32, kFp64 };
// Order of the KV blocks. FA2 (flash_fwd_kernel.h compute_attn_1rowblock) and FA3 both start at
// n_block_max - 1 and walk down to 0 (the masked blocks first); kAscending is the textbook order.
enum class KvOrder { kDescending, kAscending };
// Row-sum lanes (numerics/softmax_state.hpp): kQuad is SM80 FA2 (4 partial sums per row, one per
// quad thread, combined (l0 + l2) + (l1 + l3) in the epilogue); kSingle one sum in key order.
enum class RowSum { kQuad, kSingle };

// Defaults: a plain FP32 FA2 kernel (FP32 inputs, FP32 P, FP32 output, nvcc default FMA).
struct FlashConfig {
  int block_q = 64;   // kBlockM
  int block_kv = 64;  // kBlockN
  Storage q = Storage::kFp32;
  Storage k = Storage::kFp32;
  Storage v = Storage::kFp32;
  Storage p = Storage::kFp32;    // P is rounded to this before P·V (FA2 convert_type<Element>)
  Storage out = Storage::kFp32;  // O is rounded to this when written (fp32, bf16, fp16)
  StoragePolicy conversion;      // how each storage format is reached (RNE; fp8 satfinite,
                             // 16-bit overflow to Inf by default; numerics/rounding_storage.hpp)
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

// One line naming every field, e.g.
// "flash2 bq=64 bk=64 q=fp32 k=fp32 v=fp32 p=fp32 out=fp32 fp8=rne/sat half=rne/inf acc=fp32
//  qk=fp32 pv=fp32 exp=exp2 fma=on kv=desc rowsum=quad".
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
