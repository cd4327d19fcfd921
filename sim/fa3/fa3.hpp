// FlashAttention-3's Hopper forward (Dao-AILab/flash-attention hopper/, built with its own
// --use_fast_math for sm_90a) as a preset of the attention pipeline: FP16, BF16 and FP8 e4m3 with
// its descale factors, the split-KV path (num_splits, FA3's heuristic for 0) and its combine.
// sim/fa3/README.md names the source line, SASS or fit behind every stage choice;
// tests/hw/sdpa_h100_test.cpp (a sample) and sdpa_h100_long_test.cpp replay data/hw/h100/fa3/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// Which FlashAttention-3 the preset is: the arithmetic is FA3's in both; the fork changes the tile
// table, the decode path (one MMA warpgroup), paged KV and the FP8 accumulation (sim/fa3/README.md).
enum class Fa3Build : std::uint8_t {
  kUpstream,  // Dao-AILab/flash-attention hopper/ at 0251105a: the `fa3` preset
  kVllm,      // vllm-project/flash-attention hopper/ as vLLM 0.26.0's wheel ships it
              // (_vllm_fa3_C): the `vllm_fa3` preset, called as vLLM's FlashAttention backend
              // calls it (varlen, paged KV cache, causal)
};

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
  Fa3Build build = Fa3Build::kUpstream;
  // kVllm: the paged KV cache's block size (vLLM's --block-size, 16 by default); it decides
  // whether K/V come through TMA (a block holding whole kBlockN tiles) and so the tile.
  int page_size = 16;
  // kVllm FP8: 0, the two-level accumulation the fork ships (each KV block's P·V chain from zero,
  // added to O: hopper/utils.h gemm); N >= 1, the interval design it merged and reverted
  // (vllm-project/flash-attention #122, #136: the chain carried as C across N blocks, then merged
  // into a deferred-scale FP32 accumulator; PvStage::flush).
  int fp8_interval = 0;
};

// The kernel's (kBlockM, kBlockN) (hopper/tile_size.h tile_size_fwd_sm90 of each build) for a
// launch of shape `s` (len_q: the launch's max_seqlen_q; the vLLM build's decode path and paged-KV
// TMA rule read it) with the mask the kernel runs (fa3_kernel_causal). Upstream: recorded for head
// dims <= 64 and 96 < d <= 128; 64 < d <= 96 from the source only (UNVERIFIED).
void fa3_tile(const Fa3Options& o, const AttentionShape& s, bool causal, int* block_m,
              int* block_n);

// The vLLM build's decode path (hopper/heuristics.h use_one_mma_wg): head dim 64 or 128, no window,
// max_seqlen_q x (heads_q / heads_kv) <= 64: one consumer warpgroup, its own tiles.
bool fa3_one_mma_wg(const Fa3Options& o, const AttentionShape& s);

// The split count the kernel runs: num_splits, or for 0 FA3's heuristic (flash_api get_num_splits,
// heuristics.h num_splits_heuristic; split kernels pack a GQA group's rows: PackGQA).
// s: the launch's dense shape; sms: the GPU's SM count (the H100's 132).
// The mask the kernel runs with: flash_api.cpp mha_fwd turns causal off for a one-query call
// without a window ("causal=true is the same as causal=false in this case"), so such a call takes
// the non-causal tile (kBlockN 176 at d 128, not 128) and its split count. (Paged KV at d 128
// keeps causal; paged KV is not modelled.) Every function below applies it to `causal`.
// The vLLM build keeps causal at head dims 65-128 with a paged cache ("Special case of hdim 128
// where we want causal to have kBlockN=128").
bool fa3_kernel_causal(const Fa3Options& o, const AttentionShape& s, bool causal);
int fa3_num_splits(const Fa3Options& o, const AttentionShape& s, bool causal, int sms = 132);

// The splits the target sequence runs in its launch (null: its own batch): fa3_num_splits of the
// kernel shape upstream; the vLLM build's per-sequence count (mha_fwd's bound, num_splits or
// get_num_splits for 0 as if the batch were one sequence; then prepare_varlen_num_blocks_kernel:
// ceil(n_blocks / ceil(1.1 x sum of m x n blocks x heads_kv / SMs)) capped by the bound; one split
// beyond 992 sequences).
int fa3_splits(const Fa3Options& o, const AttentionShape& target, bool causal,
               const Launch* launch);

// What flash_attn_func's host code chooses for the launch an input runs in (`launch`: null = the
// input's own batch; dense only): the tile, the heuristic's inputs and the split count, for
// `attnsim schedule`. Throws std::invalid_argument (one line) for a launch it cannot take.
KernelSchedule fa3_schedule(const Fa3Options& o, const AttentionShape& s, bool causal,
                            const Launch* launch);

// The shape the kernel's host code sees for a target sequence in a launch (null: the target's own
// batch): upstream FA3 a dense batch (dense_launch_shape: mixed lengths refused); the vLLM build
// varlen: the launch's sequence count, max_seqlen_q and max_seqlen_k.
AttentionShape fa3_kernel_shape(const Fa3Options& o, const AttentionShape& target,
                                const Launch* launch);

// The pipeline for a kernel shape (fa3_kernel_shape). Throws std::invalid_argument (one line) for a dtype or head dim the
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
