// PyTorch's torch.nn.functional.scaled_dot_product_attention on the H100 (torch 2.11, CUDA 13.0,
// cuDNN 9.19) as presets of the attention pipeline, one per backend: cuDNN (SDPA's default there;
// its sm90 prefill kernel, and for one query row its sm80 decode kernel with lean_reduction),
// the vendored FlashAttention-2 (split-KV and its combine included), the CUTLASS memory-efficient
// kernel and the math path. sim/sdpa/README.md names the kernel, SASS line or fit behind every
// stage choice; tests/hw/sdpa_h100_test.cpp (a sample) and sdpa_h100_long_test.cpp replay
// data/hw/h100/sdpa/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// SDPBackend: CUDNN_ATTENTION (the default SDPA picks for fp16/bf16 on the H100), FLASH_ATTENTION,
// EFFICIENT_ATTENTION, MATH.
enum class SdpaBackend : std::uint8_t { kCudnn, kFlash, kEfficient, kMath };

struct SdpaOptions {
  SdpaBackend backend = SdpaBackend::kCudnn;
  // The tensors' dtype (Q, K, V and the output; P for the fused kernels): fp16 or bf16. An FP32
  // input is rounded to it first (RNE), as `.to(dtype)` does.
  Encoding dtype = Encoding::kBf16;
};

const char* sdpa_backend_name(SdpaBackend b);

// The head dim of the instantiation a kernel runs for head_dim (FA2 rounds up to a multiple of 32,
// the CUTLASS kernel to 64 or 128, the rest are zero-padding of the reduction, which no product
// model sees).
int sdpa_kernel_head_dim(SdpaBackend b, int head_dim);

// The flash backend's num_splits for a launch of shape s (flash_api.cpp set_params_splitkv:
// num_splits_heuristic over batch·heads·ceil(len_q / 64) blocks, 2 x `sms` (the H100's 132), n
// blocks of 256 / 128 / 64 keys by head dim, with mha_fwd's GQA decode swap: len_q 1 and heads_q >
// heads_kv make the group the rows); cuDNN with len_q = 1: its decode kernel's split count (a rule
// fit on the recorded launches from batch x heads_kv and the 128-key tiles, sim/sdpa/README.md);
// 1 otherwise.
int sdpa_num_splits(const SdpaOptions& o, const AttentionShape& s, int sms = 132);

// The pipeline of a backend for a launch of shape s (tiles by head dim and split; math: one KV
// block holding the row). Throws std::invalid_argument (one line) for a dtype or shape the
// backend refuses.
Pipeline sdpa_pipeline(const SdpaOptions& o, const AttentionShape& s, int sms = 132);

// What the backend's host code chooses for the launch an input runs in (`launch`: null = the
// input's own batch; dense only, as SDPA takes one [B, H, N, D] shape), for `attnsim schedule`:
// the kernel, its tile, the GQA swap and the split count with its rule. Throws
// std::invalid_argument (one line) for a launch SDPA cannot take.
KernelSchedule sdpa_schedule(const SdpaOptions& o, const AttentionShape& s,
                             const Launch* launch);

// Throws std::invalid_argument (one line) for what PyTorch refuses: a dtype other than fp16/bf16,
// head_dim_v != head_dim, flash with is_causal and len_q != len_kv (SDPA's causal mask is
// top-left; the flash backend raises).
void validate(const SdpaOptions& o, const AttentionInput& in);

// The whole call on a prepared input with a given pipeline (the preset's or a counterfactual):
// the pipeline, or with num_splits > 1 (of the input's launch) the split-KV schedule and its
// merge (sim/lean split_kv_attention): FA2's combine for the flash backend, cuDNN's strided tiles
// and lean_reduction for its decode kernel.
PipelineResult sdpa_attention(const PreparedInput& in, const SdpaOptions& o, const Pipeline& p);
PipelineResult sdpa_attention(const AttentionInput& in, const SdpaOptions& o, const Pipeline& p);

// One line per part of this call the H100 recordings do not verify bit for bit (cuDNN decode at
// unrecorded head dims or split counts, math's split-K / gemv / long rows, head dims not
// recorded); empty when every part is covered.
std::vector<std::string> sdpa_unverified(const SdpaOptions& o, const AttentionShape& s);

}  // namespace attnsim
