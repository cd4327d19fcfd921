// vLLM's Triton attention (vLLM 0.26.0 vllm/v1/attention/ops/triton_unified_attention.py:
// `unified_attention`, `kernel_unified_attention` in its 2D and 3D forms, `reduce_segments`) as
// Triton 3.6 compiles it for an H100, as a preset of the attention pipeline: fp16/bf16, GQA, the
// causal mask, sliding windows, softcap, attention sinks and an FP8 (e4m3, per-tensor scale) KV
// cache. sim/vllm/README.md names the PTX/SASS line behind every choice
// (cuda_check/serving/models/VLLM_NOTES.md); data/hw/h100/serving/ holds the recordings the tests
// replay bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct VllmOptions {
  Encoding dtype = Encoding::kBf16;  // Q's (and the output's) dtype: fp16 or bf16
  // The KV cache: the dtype's own (auto), or e4m3 with one scale per tensor (KV_QUANT_MODE 1,
  // `k_scale`/`v_scale` as the layer passes them).
  bool kv_fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
  int num_segments = 16;     // NUM_SEGMENTS_PER_SEQ of the 3D kernel (the only value vLLM uses)
  int seq_threshold_3d = 0;  // 0: vLLM's 128 // heads_kv (triton_attn.py)
  // VLLM_BATCH_INVARIANT=1 (is_batch_invariant): the launcher takes the 2D kernel for every batch.
  bool batch_invariant = false;
  // Attention sinks (gpt-oss): one logit per query head that enters the softmax's denominator
  // only (M starts at the sink, L at 1: triton_attention_helpers.py). Empty: none.
  std::vector<float> sinks;
};

// What the launcher `unified_attention` chooses for a batch of `num_seqs` sequences whose longest
// query has `max_seqlen_q` tokens (triton_unified_attention.py, VLLM_NOTES.md "The launcher").
struct VllmLaunch {
  int qpk = 1;        // query heads per KV head
  int block_m = 16;   // rows of a program: 16, or the next power of two of qpk above 16
  int block_q = 16;   // query tokens of a program (block_m / qpk)
  bool use_3d = false;  // split-KV into num_segments segments and reduce_segments
  int tile = 32;      // keys per KV tile: TILE_SIZE_PREFILL 32 (2D), TILE_SIZE_DECODE (3D)
  int segments = 1;   // 3D: num_segments
};
VllmLaunch vllm_launch(const VllmOptions& o, int heads_q, int heads_kv, int head_dim,
                       int max_seqlen_q, int num_seqs, int window);
// The same for a launch of varlen sequences (sim/launch.hpp; null: `batch` sequences of the
// target's shape s, the input's own batch).
VllmLaunch vllm_launch(const VllmOptions& o, const AttentionShape& s, int window,
                       const Launch* launch);

// What the launcher chooses for the launch an input's sequence runs in, for `attnsim schedule`:
// the path (2D / 3D) with its rule, the tiles, the target's segments. Throws
// std::invalid_argument (one line) for what the kernel does not build.
KernelSchedule vllm_schedule(const VllmOptions& o, const AttentionShape& s, int window,
                             double softcap, const Launch* launch);

// The pipeline of the kernel's tile loop for a launch (block_q = the program's tokens, block_kv =
// TILE). Throws std::invalid_argument (one line) for what the kernel does not build.
Pipeline vllm_pipeline(const VllmOptions& o, const VllmLaunch& l, const AttentionShape& s);

// One uniform batch: every sequence has len_q queries (the last len_q of its len_kv tokens), as
// the launcher runs it inside a batch launched as `l` (2D: one program per q block and KV head
// over its whole KV range; 3D: the segments and reduce_segments). The input must be causal
// (unified_attention asserts it); in.window / in.softcap are the problem's. O in the dtype's
// values; no LSE (the kernel returns none). Results do not depend on the thread count.
PipelineResult vllm_attention(const AttentionInput& in, const Pipeline& p, const VllmOptions& o,
                              const VllmLaunch& l);

// The FP8 KV cache. The recorder's quantization of a value (`(x.float() / scale).to(
// torch.float8_e4m3fn)`: IEEE division, RNE, |x / scale| past 464 -> NaN, as torch's cast).
std::uint8_t vllm_fp8_quantize(float x, float scale);
// _cast_kv_tile: cvt.rn.f16x2.e4m3x2 (exact), times the scale (mul.f32), cvt.rn to the dtype.
float vllm_fp8_dequantize(std::uint8_t e4m3, float scale, Encoding dtype);
// `in` with K and V replaced by what the kernel's MMAs see of an e4m3 cache made from them.
AttentionInput vllm_fp8_cache(const AttentionInput& in, const VllmOptions& o);

// The merge of reduce_segments for one (token, head) (VLLM_NOTES.md "reduce_segments"): acc [16 ·
// dv] (segment-major, unnormalized), M and L per segment (the inactive ones -inf and 0); writes dv
// FP32 values.
void vllm_reduce_segments(const float* acc, const float* m, const float* l, int dv, float* out);

// One line per part of the call no recording verifies; empty when covered.
std::vector<std::string> vllm_unverified(const VllmOptions& o, const VllmLaunch& l,
                                         const AttentionShape& s, int window, double softcap);

}  // namespace attnsim
