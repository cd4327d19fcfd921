// FlexAttention (torch.nn.attention.flex_attention under torch.compile, torch 2.11 with Triton 3.6,
// as Inductor generates it for sm_90) as a preset of the attention pipeline: the prefill template
// (flex_attention.py.jinja) for fp16/bf16, GQA, the block masks none and causal, and the LSE it
// returns. sim/flex/README.md names the template line, PTX or SASS behind every stage choice;
// data/hw/h100/serving/ holds the recordings the tests replay.
#pragma once

#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct FlexOptions {
  Encoding dtype = Encoding::kBf16;  // fp16 or bf16 (an FP32 input is rounded to it, RNE)
};

// Inductor's default configuration (BLOCK_M, BLOCK_N, num_warps) for the prefill template on an
// sm_90 GPU (torch/_inductor/template_heuristics: the H100 recordings' kernels): d <= 64: 128 x 128
// (4 warps); 64 < d <= 128: 128 x 64 (8 warps). Other head dims: no recording (UNVERIFIED).
void flex_tile(int head_dim, int* block_m, int* block_n);

// Whether torch takes the decode template (flex_decoding.py _use_flex_decoding: fewer than 128
// queries, a power-of-two GQA ratio). Without a block mask the template's SPLIT_KV CTAs (2 per SM
// per batch x KV head) do not split the keys: its TILE_KV comes from the one mask block of 2^30
// keys, so split 0 walks every key and the others none, and Inductor's merge kernels divide split
// 0's accumulator by its row sum (adding exact zeros): the same arithmetic as one pass with
// div.full. With a block mask the splits are real: refused.
bool flex_uses_decode(const AttentionShape& s);
// With a block mask (causal or a window: top-left, so the rows see only keys below len_q) the
// template's TILE_KV is cdiv(cdiv(128, SPLIT_KV), 64)·64 = 64 keys per split when SPLIT_KV > 1:
// for len_q <= 64 every visible key is in split 0 and the merge is again exact (one pass); longer
// short queries under a mask have a real two-split merge: refused. SPLIT_KV = max(2·(sms //
// (batch·heads_kv)), 1) (get_split_k; the H100 has 132 SMs).
int flex_decode_splits(const AttentionShape& s, int sms = 132);
// The decode template's BLOCK_M (max(next_pow2(len_q · G), 16)) and BLOCK_N (64).
void flex_decode_tile(const AttentionShape& s, int* block_m, int* block_n);

// The pipeline for a shape; throws std::invalid_argument (one line) for what the preset cannot run
// (a query length the decode template would take, head_dim_v != head_dim, a dtype).
// s: the launch's dense shape (its batch reaches only the split count).
Pipeline flex_pipeline(const FlexOptions& o, const AttentionShape& s, bool causal, int sms = 132);

// What torch's flex_attention lowering chooses for the launch an input runs in (`launch`: null =
// the input's own batch; dense only): the template, its tile and SPLIT_KV, for `attnsim
// schedule`. Throws std::invalid_argument (one line) for what the preset cannot run.
KernelSchedule flex_schedule(const FlexOptions& o, const AttentionShape& s, bool causal,
                             const Launch* launch);

// One line per part of the call no recording verifies; empty when covered.
std::vector<std::string> flex_unverified(const FlexOptions& o, const AttentionShape& s,
                                         bool causal);

}  // namespace attnsim
