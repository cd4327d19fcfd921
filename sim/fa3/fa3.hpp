// FlashAttention-3's Hopper forward (Dao-AILab/flash-attention hopper/, built with its own
// --use_fast_math for sm_90a) as a preset of the attention pipeline: FP16, BF16 and FP8 e4m3 with
// its descale factors, the split-KV path (num_splits, FA3's heuristic for 0) and its combine.
// sim/fa3/README.md names the source line, SASS or fit behind every stage choice;
// tests/hw/sdpa_h100_test.cpp (a sample) and sdpa_h100_long_test.cpp replay data/hw/h100/fa3/.
#pragma once

#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct Fa3Options {
  // fp16, bf16 or e4m3fn (output bf16). An FP32 input is rounded to `input` (RNE) first; for e4m3
  // it is then quantized per (batch, head) with scale = amax / 448 (cvt.rn.satfinite), the scale
  // being the descale the kernel is given (FA3's API takes one per (batch, KV head): for GQA the
  // per-query-head Q scale is a finer choice than it allows, a quantization choice, not kernel
  // arithmetic).
  Encoding dtype = Encoding::kBf16;
  Encoding input = Encoding::kBf16;  // e4m3: the 16-bit format the activations come in
  // flash_attn_func's num_splits: 1 (its default: no split), 0 (FA3's heuristic), or N.
  int num_splits = 1;
};

// The kernel's (kBlockM, kBlockN) for a head dim (hopper/tile_size.h tile_size_fwd_sm90): recorded
// for head dims <= 64 and 96 < d <= 128; 64 < d <= 96 from the source only (UNVERIFIED).
void fa3_tile(const Fa3Options& o, int head_dim, bool causal, int* block_m, int* block_n);

// The split count the kernel runs: num_splits, or for 0 FA3's heuristic (flash_api get_num_splits,
// heuristics.h num_splits_heuristic; split kernels pack a GQA group's rows: PackGQA).
// s: the launch's dense shape; sms: the GPU's SM count (the H100's 132).
// The mask the kernel runs with: flash_api.cpp mha_fwd turns causal off for a one-query call
// without a window ("causal=true is the same as causal=false in this case"), so such a call takes
// the non-causal tile (kBlockN 176 at d 128, not 128) and its split count. (Paged KV at d 128
// keeps causal; paged KV is not modelled.) Every function below applies it to `causal`.
bool fa3_kernel_causal(const AttentionShape& s, bool causal);
int fa3_num_splits(const Fa3Options& o, const AttentionShape& s, bool causal, int sms = 132);

// What flash_attn_func's host code chooses for the launch an input runs in (`launch`: null = the
// input's own batch; dense only): the tile, the heuristic's inputs and the split count, for
// `attnsim schedule`. Throws std::invalid_argument (one line) for a launch it cannot take.
KernelSchedule fa3_schedule(const Fa3Options& o, const AttentionShape& s, bool causal,
                            const Launch* launch);

// The pipeline for a shape. Throws std::invalid_argument (one line) for a dtype or head dim the
// build does not have (head_dim > 128: RescaleOBeforeGemm, not modelled; head_dim_v != head_dim).
Pipeline fa3_pipeline(const Fa3Options& o, const AttentionShape& s, bool causal);

// The kernel on a prepared input: the pipeline, or with more than one split (of the input's
// launch) the split schedule and FA3's combine (sim/lean split_kv_attention).
PipelineResult fa3_attention(const PreparedInput& in, const Fa3Options& o, const Pipeline& p);
PipelineResult fa3_attention(const AttentionInput& in, const Fa3Options& o, const Pipeline& p);

// FP8 inputs as the kernel receives them: Q, K, V already e4m3 values (the decoded values as
// floats), and the descale factors per (batch, KV head) ([batch][heads_kv] each), as
// flash_attn_func(q_descale=, k_descale=, v_descale=) takes them. The prepared input of the e4m3
// pipeline `p` (fa3_pipeline with dtype e4m3fn).
PreparedInput fa3_prepare_fp8(const AttentionInput& e4m3_values, const Pipeline& p,
                              const std::vector<float>& q_descale,
                              const std::vector<float>& k_descale,
                              const std::vector<float>& v_descale);

// One line per part of this call the recordings do not verify (head dims not built, more than 32
// splits in the combine); empty when every part is covered.
std::vector<std::string> fa3_unverified(const Fa3Options& o, const AttentionShape& s, bool causal);

}  // namespace attnsim
