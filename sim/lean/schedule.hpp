// LeanAttention's stream-K partition (Sanovar et al., Appendix E Algorithm 2) as ONNX Runtime's
// public implementation computes it: the host sizing of
// onnxruntime/contrib_ops/cuda/bert/lean_attention/lean_api.cc (get_num_splits_and_buffer_sizes,
// lean_griddimz) and the per-CTA tile ranges of lean_fwd_kernel.h (lean_compute_attn). Every
// formula and the code line behind it: sim/lean/README.md. `attnsim lean plan` prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// Which blocks the partition makes.
//  kOrt  ONNX Runtime as written (lean_api.cc, lean_fwd_kernel.h): m-blocks of the unfolded
//        len_q, causal tile counts top-left, a non-causal head one block of tiles_per_head tiles,
//        total tiles counted over heads_kv. Right for MHA decode (the only caller,
//        MultiHeadAttention), folded GQA decode with at most 64 query heads per KV head, and
//        causal prefill with len_q == len_kv; otherwise LeanPlan::coverage says what is lost.
//  kAll  the corrected partition (cuda_check/lean's kernel): ceil(rows / 64) m-blocks of the
//        folded rows, causal tile counts bottom-right (FA2 n_block_max), every head.
enum class LeanMBlocks : std::uint8_t { kOrt, kAll };

// The attention shape the partition sees. len_kv_per_batch (optional) makes a ragged batch: one
// context length per batch entry (the paper's Appendix A ragged decode; ORT sizes every batch
// entry by len_kv, see README), each at most len_kv.
struct LeanShape {
  int batch = 1, heads_q = 1, heads_kv = 1, len_q = 1, len_kv = 1, head_dim = 128;
  bool causal = false;
  int sms = 132;  // H100 SXM
  std::vector<int> len_kv_per_batch;
  int block_n = 0;  // 0: the kernel's rule from head_dim; else this n-tile size (an experiment)
  LeanMBlocks m_blocks = LeanMBlocks::kOrt;
};

// One CTA's work on one (batch, head, m-block): n-tiles [n_begin, n_end) of that block, walked
// from n_end − 1 down to n_begin (lean_fwd_kernel.h, FA2's order).
struct LeanSegment {
  int cta = 0, batch = 0, head = 0, m_block = 0, n_begin = 0, n_end = 0;
  bool host = false;      // n_begin == 0: this CTA reduces the block
  bool finisher = false;  // n_end == the block's n-tile count
  int split = 0;          // the CTA's index among the block's CTAs (n_split_idx)
};

struct LeanPlan {
  int block_m = 64, block_n = 128;
  // Decode with GQA folds the group's query heads into M (ORT's seqlenq_ngroups_swapped):
  // rows = heads_q / heads_kv per KV head, heads = heads_kv.
  bool folded = false;
  int rows = 0;   // query rows per (batch, head) the kernel sees (len_q, or the group when folded)
  int heads = 0;  // heads the kernel iterates
  bool causal = false;  // as the kernel runs it (decode is non-causal)
  int num_m_blocks = 0, num_n_blocks = 0;
  std::vector<int> tiles_of_m_block;  // n-tiles of each m-block (causal m-blocks have fewer)
  long long tiles_per_head = 0, total_tiles = 0;
  int grid = 0;
  long long max_tiles_per_tb = 0, high_load_tbs = 0;
  int num_splits = 0;  // the host's buffer sizing (the most CTAs one block can need)
  std::vector<LeanSegment> segments;  // CTA order, then tile order
  // Ragged: n-tiles per batch entry (empty when every entry has len_kv).
  std::vector<int> n_blocks_per_batch;
  bool ort = true;                    // LeanMBlocks::kOrt
  int host_heads = 0, host_m_blocks = 0;  // what the host sizing counts (ORT: heads_kv, unfolded)
  // Kernel mode kOrt: one line per part of the shape the public kernel does not compute
  // correctly (empty: it computes every output).
  std::vector<std::string> coverage;

  // The n-tile count of one (batch, m-block).
  int tiles_of(int batch, int m_block) const;
};

// Throws std::invalid_argument with one line for a shape the public code rejects or this
// partition cannot express (zero sizes, heads_q not a multiple of heads_kv, head_dim not 64 or
// 128 (lean_api.cc is_supported), sms < 1, a ragged length out of range).
void validate(const LeanShape& s);

// The plan by the host's closed forms and the kernel's per-CTA start rule.
LeanPlan lean_plan(const LeanShape& s);
// The same plan written differently: the tiles enumerated one by one in the kernel's global
// order and dealt to CTAs by a running counter (Algorithm 2's cta_start/cta_end walk), segments
// cut where the block changes. Tests hold the two equal on many shapes.
LeanPlan lean_plan_ref(const LeanShape& s);

// The fixed split-KV partition of FlashDecoding-style kernels: every (batch, head, m-block) is cut
// into `splits` contiguous ranges of ceil(n / splits) n-tiles (FA2 flash_fwd_kernel.h
// compute_attn_splitkv: n_blocks_per_split); empty trailing splits are dropped. One CTA per
// non-empty split; host = split 0. splits = 0 takes FA2's num_splits_heuristic for `sms`.
LeanPlan splitkv_plan(const LeanShape& s, int splits);
// FA2 flash_api.cpp num_splits_heuristic(batch·heads·m_blocks, sms, n_blocks, max_splits = 128).
int fa2_num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks,
                             int max_splits);

// FlashAttention-3's hopper/heuristics.h num_splits_heuristic, as flash_api.cpp get_num_splits
// calls it for num_splits = 0 (sim/fa3/README.md step 9): one split when total_mblocks fill 80 % of
// the SMs (unless one KV head outgrows the 50 MB L2 with many m-blocks, non-causal: ceil(size /
// L2) splits), one when num_n_blocks <= 4, else the fewest splits within 85 % of the best wave
// efficiency among 1 .. min(max_splits, num_sms, num_n_blocks) (no eligibility rule, unlike FA2).
int fa3_num_splits_heuristic(int total_mblocks, int num_sms, int num_n_blocks, int num_m_blocks,
                             long long size_one_kv_head, bool is_causal_or_local, int max_splits);

// The KV blocks split `split` of `splits` covers in FA2's and FA3's split kernels
// (flash_fwd_kernel.h compute_attn_1rowblock_splitkv, FA3 get_n_block_min_max): n_blocks_per_split
// = ceil(n_blocks / splits) counted over the whole KV, [split · per, min((split + 1) · per,
// n_max)) with n_max the tile's causal limit; empty when the bounds cross (the split writes an
// empty partial: O = 0, LSE = -inf).
void split_block_range(int n_blocks, int splits, int split, int* begin, int* end);

// The plan's CSV: `cta,batch,head,m_block,n_tile_begin,n_tile_end,host,finisher,split`, one row
// per segment (a contract: attnsim lean plan --out).
std::string plan_csv(const LeanPlan& p);
// The summary lines `attnsim lean plan` prints.
std::string plan_summary(const LeanPlan& p);

}  // namespace attnsim
