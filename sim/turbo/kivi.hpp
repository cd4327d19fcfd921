// KIVI (Liu et al., 2024), TurboAttention's KV-cache baseline (§5.3, Table 2): K
// quantized per channel and V per token in groups of g with an FP16 scale and minimum, the last R
// tokens kept in FP16, and decode attention that dequantizes to FP16 and runs FlashAttention-2
// FP16 (sim/flash) on the result. Semantics from jy-yuan/KIVI quant/new_pack.py and
// models/llama_kivi.py (spec §4); the quantizer is numerics/kivi_quant.hpp.
#pragma once

#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {

struct KiviOptions {
  int bits = 4;       // 1..8 (KIVI packs 2, 4, 8; Table 2 also lists KIVI-3)
  int group = 64;     // g: K's tokens per channel group, V's channels per token group (Table 2)
  int residual = 64;  // R: FP16 tokens (§5.3 "residual tokens of length n_b"); a multiple of g
  // kPrefill: every row attends the FP16 K and V (KIVI's prefill never reads its quantized
  // cache). kDecode: rows at positions below `prefill` as kPrefill over the prompt, every later
  // query teacher-forced as one decode step over the cache. kAuto: decode for causal inputs and
  // for a single query (turbo.hpp TurboMode).
  TurboMode mode = TurboMode::kAuto;
  int prefill = -1;                // the prompt length (turbo_prefill_tokens with n_b = group)
  Encoding out = Encoding::kFp16;  // fp16 (KIVI's attn_output), bf16 or fp32
};

// The attention every row runs on: FlashAttention-2 with FP16 Q, K, V and P, FP32 products and
// state, output in o.out (flash_pipeline; the prefill is llama_kivi.py's flash-attn path, the
// decode step our dequantize-then-FP16 reading of its cuda_bmm_fA_qB_outer + matmul pair: the
// scores are not rounded to FP16 before the softmax as its torch.matmul would round them).
Pipeline kivi_pipeline(const KiviOptions& o);

// Which tokens are quantized when the query at position t (after appending token t) attends,
// as llama_kivi.py's cache holds them: K's full-precision tail becomes a quantized chunk once it
// holds R tokens, after that step's attention, so K tokens [0, ⌊t/R⌋·R) are quantized (prefill
// of T tokens: ⌊T/R⌋·R, the same rule); V's oldest window token is quantized once the window holds
// R + 1, after the step's attention, so V tokens [0, max(0, t − R)) are quantized (prefill: the
// last R kept).
int kivi_quantized_keys(int t, int residual);
int kivi_quantized_values(int t, int residual);

// The cache's two versions of every token, [batch, heads_kv, len_kv, dim]: FP16 (the input
// rounded as the pipeline rounds it) and dequantized. Dequantized entries exist for the tokens
// quantized by the last position (kivi_quantized_keys / _values(len_kv − 1)); later tokens hold
// their FP16 values there too. K's groups are g consecutive tokens of one channel from token 0
// (R-token chunks are cut into g-token groups), V's are g consecutive channels of one token.
struct KiviTensors {
  std::vector<float> k16, v16, k_deq, v_deq;
  int k_quantized = 0, v_quantized = 0;  // per slice, as above
};
KiviTensors kivi_tensors(const AttentionInput& in, const KiviOptions& o);

// O [batch, heads_q, len_q, head_dim_v] in o.out's values and the natural-log LSE per row.
// Throws std::invalid_argument with one line on a bad input or option.
PipelineResult kivi_attention(const AttentionInput& in, const KiviOptions& o);
// The same on a given pipeline (kivi_pipeline with stage overrides; the cache's quantization is
// KIVI's own step, outside the pipeline).
PipelineResult kivi_attention(const AttentionInput& in, const KiviOptions& o, const Pipeline& pipe);

}  // namespace attnsim
