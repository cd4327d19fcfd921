// TurboAttention (Kang et al., "TurboAttention: Efficient Attention Approximation for High
// Throughputs LLMs"): FlashQ (INT8 symmetric per-block Q/K/V for the two products, BPQ compression
// of the INT8 K/V cache to 4 or 2 bits per channel in integer arithmetic), head-wise mixed
// precision, the enhanced KV buffer and SAS, as presets of the attention pipeline (sim/pipeline)
// plus what is TurboAttention's own: the compressed cache with its buffer (TurboKvCache) and the
// decode schedule that reads it. sim/turbo/README.md gives the paper line of every choice and
// each ambiguity's literal and intended readings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/quantize.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"
#include "sim/turbo/sas.hpp"

namespace attnsim {

// Which rows the decode schedule (Algorithm 2) computes. kPrefill: Algorithm 1 over the whole
// input (the cache is built but never read). kDecode: the first `prefill` tokens by Algorithm 1,
// every later query as one decode step over the compressed cache plus the buffer, teacher-forced
// (step t appends key/value t, then query t attends). kAuto: decode for causal inputs and for a
// single query, prefill otherwise.
enum class TurboMode : std::uint8_t { kAuto, kPrefill, kDecode };

// The softmax scale 1/√d that Algorithm 1 omits (README item e).
//  kExpArg     (S − m)·sm_scale in FP32 before SAS (Eq. 1-2's softmax of QKᵀ/√d: the intent)
//  kPrescaleQ  Q·sm_scale before its quantization (the scale folded into Q, as kernels often do)
//  kNone       Algorithm 1 as printed: no scale at all
enum class TurboSoftmaxScale : std::uint8_t { kExpArg, kPrescaleQ, kNone };

// Head-wise mixed precision selectors (§3.2 Eq. 11-12, §5.3 Fig. 7b).
enum class HeadSelector : std::uint8_t { kPriority, kEntropy, kMinMax, kVariation };
// Whether K and V of a head share one bit-width (kHead) or are ranked separately (kKvSeparate,
// README item k: "8-head configuration ... 0 to 16 heads").
enum class HeadScope : std::uint8_t { kHead, kKvSeparate };
// Where the buffer's universal INT8 scale comes from (README §buffer).
//  kPrefill  max over the prefill blocks' stage-1 scales (max|X_prefill| / 119)
//  kLast     the last complete prefill block's stage-1 scale
//  kOracle   each buffer block quantized with its own amax / 119 once complete (no clamping: the
//            counterfactual the clamping experiment compares against). Tokens in a buffer that is
//            not yet full use the prefill scale.
enum class BufferScale : std::uint8_t { kPrefill, kLast, kOracle };
// O's update when the max moves (README item d): multiply by SAS(m_old − m_new) (intended), or
// divide by it as Algorithm 1 line 12 prints `diag(SAS(·))^{-1} O` (Rescale::kDivide).
enum class TurboRescale : std::uint8_t { kMultiply, kLiteralInverse };

struct TurboOptions {
  // Algorithm 1's B_r, B_c (§5.1: "we fix block size B_c, B_r, and n_b to 64"). B_c is also the
  // cache block (stage-1 and stage-2 groups) and the buffer size n_b: cache blocks lie on a grid
  // of B_c tokens from token 0, a prompt's last partial block starts the buffer (README §buffer).
  int br = 64, bc = 64;
  TurboMode mode = TurboMode::kAuto;
  int prefill = -1;  // decode: prompt tokens (-1: len_kv − len_q if len_q < len_kv, else half
                     // the tokens rounded down to a multiple of bc, at least bc)
  // FlashQ
  bool flashq = true;  // off: Q, K, V in FP16, P in FP16, FP32 products (FlashAttention FP16)
  SymmetricQuantizer q8 = kTurboInt8Alg;  // stage 1 (119; kTurboInt8Eq4 126; kTurboInt8AlgCeil)
  SymmetricQuantizer p8 = kTurboInt8Alg;  // P̃'s quantizer (round=ceil: kTurboInt8AlgCeil)
  PScale p_scale = PScale::kTile;         // Alg. 1 "max(abs(P̃_i^(j)))": one scale per tile
  int kv_bits = 4;  // 4 or 2; 0 = mixed: n_h heads at 2 bits by `selector`, the rest at 4
  int n_h = 0;
  // Explicit bits per KV head for K and V (4 or 2 each); when non-empty they replace kv_bits and
  // the selector (recorded GPU cases, experiments that fix the heads).
  std::vector<int> head_bits_k, head_bits_v;
  HeadSelector selector = HeadSelector::kPriority;
  HeadScope nh_scope = HeadScope::kHead;
  ProgressiveQuantizer bpq = kBpqOffset;
  bool compress = true;  // off: decode reads the INT8 blocks uncompressed (FlashQ stage 1 only)
  // The buffer (§3.3)
  BufferScale buffer_scale = BufferScale::kPrefill;
  int buffer_clamp = 119;  // |q| of a new token is clamped to this (127: the INT8 range)
  // SAS
  bool sas = true;  // off: exact exp (ExpFn::kExact, FP32)
  SasRule sas_rule;
  TurboRescale rescale = TurboRescale::kMultiply;
  TurboSoftmaxScale softmax_scale = TurboSoftmaxScale::kExpArg;
  Encoding input = Encoding::kFp16;  // Q, K, V arrive as FP16 (the paper's FP16 models)
  Encoding out = Encoding::kFp16;
  bool decode_prefill_rows = true;  // decode mode: rows < prefill come from Algorithm 1 (else 0)
};

// The prefill pipeline (Algorithm 1) of a configuration.
Pipeline turbo_pipeline(const TurboOptions& o);
// The decode pipeline (Algorithm 2) of a prefill pipeline: one query per tile, a per-block Q
// scale per token (line 3); K and V come from the cache (per-block scales).
Pipeline turbo_decode_pipeline(const Pipeline& prefill);

// Per KV head bit-widths of K and V.
struct HeadBits {
  std::vector<int> k, v;  // [heads_kv]
};

// The compressed cache of one (batch, KV head) and its buffer.
struct TurboKvCache {
  int dim_k = 0, dim_v = 0, n_b = 64;
  int bits_k = 4, bits_v = 4;  // 8: uncompressed (compress=off): code = q1 + 128, s = 1, z = −128
  ProgressiveQuantizer bpq = kBpqOffset;
  // Compressed blocks, in token order; block b covers tokens [block_begin[b], block_begin[b+1]).
  std::vector<int> block_begin;  // size blocks + 1
  // Per token and channel: the unsigned b-bit code (stage 2).
  std::vector<std::uint8_t> k_code, v_code;  // [compressed tokens][dim]
  // Per block and channel: INT8 scale s^int and zero point z^int (stage 2).
  std::vector<std::int8_t> k_s, k_z, v_s, v_z;  // [blocks][dim]
  // Per block: the stage-1 FP32 scale (max|X_blk| / 119, or the universal scale for a flushed
  // buffer block).
  std::vector<float> k_scale, v_scale;
  // The buffer: INT8 rows quantized with the universal scale s_u, clamped.
  std::vector<std::int8_t> buf_k, buf_v;  // [buffered tokens][dim]
  int buf_tokens = 0;
  float su_k = 0, su_v = 0;
  long long clamped_k = 0, clamped_v = 0;  // new-token elements clamped so far
  // BPQ stage-2 groups (block, channel) whose INT8 values have min = max (range 0: s^int is 1 by
  // the max(1, ·), every code 0), compressed blocks only (bits 4 or 2).
  long long zero_range_k = 0, zero_range_v = 0;
  // The first clamped element and the first zero-range group, as (token, column) with V's
  // channels after K's (column dim_k + c); -1 when none. Silent-failure counters (prepare stage).
  long long first_clamp_token = -1, first_clamp_col = -1;
  long long first_zero_range_token = -1, first_zero_range_col = -1;
  long long flushes = 0;

  int blocks() const { return int(block_begin.size()) - 1; }
  int compressed_tokens() const { return block_begin.empty() ? 0 : block_begin.back(); }
  int tokens() const { return compressed_tokens() + buf_tokens; }
  // Integer dequantization of block b to INT8 (Alg. 2 "K^q1 = K^q2 · s^int + z"), [len][dim].
  std::vector<std::int32_t> block_int8(bool value, int b) const;
  // Compresses an INT8 block (stage-1 values x [len][dim] with stage-1 scale `scale1`) by BPQ
  // stage 2 per channel and appends it (the prefill's complete blocks and every buffer flush).
  void append_block(bool value, const std::int8_t* x, int len, float scale1);
  // Buffer steps: one new token quantized with the universal scale and clamped; the flush
  // compresses the buffer (stage-1 scale `scale1`: s_u, or the block's own under the oracle).
  void buffer_push(const float* k, const float* v, int clamp);
  void flush(float scale1_k, float scale1_v);
};

struct TurboResult {
  PipelineResult out;            // o [batch, heads_q, len_q, dv] in the output format, lse
  std::vector<TurboKvCache> caches;  // [batch·heads_kv], after the last step
  HeadBits bits;
  int prefill = 0;  // prompt tokens of the decode schedule (len_q in prefill mode)
  bool decode = false;
};

TurboResult turbo_attention(const AttentionInput& in, const TurboOptions& o);
// The same with Algorithm 1's pipeline given (turbo_pipeline with stage overrides: `attnsim
// attribute` runs its counterfactuals through the same decode schedule). The cache feeds a decode
// step's K (V) only while the pipeline prepares K (V) as FlashQ does; otherwise the step reads
// that operand from the input through the pipeline's own preparation.
TurboResult turbo_attention(const AttentionInput& in, const TurboOptions& o, const Pipeline& pre);

// The prompt length the decode schedule uses (the `prefill` rule above); throws
// std::invalid_argument with one line when decode cannot run on the input.
int turbo_prefill_tokens(const AttentionInput& in, int requested, int n_b);

// Head bit-widths of a configuration (kv_bits 4/2, or mixed by the selector over the first
// `prefill` tokens of the layer's K and V; sim/turbo/heads.hpp).
HeadBits turbo_head_bits(const AttentionInput& in, const TurboOptions& o, int prefill);

// `in` restricted to keys [0, len_kv) and the query rows at positions below len_kv (row i is
// position i + len_kv − len_q, bottom-right aligned, so the mask is unchanged): the prompt of a
// decode schedule (turbo, kivi).
AttentionInput prefix_input(const AttentionInput& in, int len_kv);

std::string describe(const TurboOptions& o);

}  // namespace attnsim
