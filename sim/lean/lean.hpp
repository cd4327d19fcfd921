// LeanAttention (Sanovar et al.) and fixed split-KV decoding (FlashDecoding, FlashInfer, FlashMLA)
// as one split/merge implementation on the attention pipeline (sim/pipeline): the partition
// (sim/lean/schedule.hpp) says which CTA runs which n-tiles of which (batch, head, m-block); every
// segment is the pipeline's FA2 tile loop (`attend_tile`) over that range; what is LeanAttention's
// (or a peer's) own is the per-split normalization and the reduction. sim/lean/README.md names
// the ONNX Runtime / peer code line behind every numeric choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/dot.hpp"
#include "sim/lean/schedule.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// The special functions of the kernel:
//  kApprox  as ONNX Runtime's build compiles lean_fwd_kernel.h (see README: exp2f -> ex2.approx,
//           __logf -> lg2.approx · ln 2, expf / logf -> libdevice sequences, 1.f/x IEEE), the
//           H100 models of numerics/special.hpp
//  kExact   exp2, exp, log correctly rounded to FP32 (the attribution baseline)
enum class LeanExp : std::uint8_t { kApprox, kExact };

// How the host CTA combines the splits of a block.
//  kKernel  the public kernel: every split normalized (O_i / l_i, lse_i = m_i·scale + log l_i),
//           lse_max, Σ exp(lse_i − lse_max), lse_logsum, O = Σ exp(lse_i − lse_logsum)·O_i in split
//           order (ORT lean_fwd_kernel.h; FA2 combine_attn_seqk_parallel for FlashDecoding)
//  kPaper   Appendix E Algorithm 2 lines 27-38: the host merges the unnormalized (O, m, l) of the
//           CTAs g+1 .. last one by one (m_new = max, both sides rescaled by e^{m − m_new}), then
//           O / l once
enum class LeanReduce : std::uint8_t { kKernel, kPaper };

// The partition and the merge family.
//  kLean           stream-K (ORT), natural-log LSE merge
//  kFlashDecoding  fixed splits, FA2's combine (natural-log LSE, the same formulas)
//  kFlashInfer     fixed splits, base-2 LSE, sequential state merge (flashinfer state.cuh merge:
//                  m = max, d = d·2^(m_old−m) + 2^(s−m), o likewise; o / d, lse = m + log2 d)
//  kFlashMla       fixed splits, base-2 LSE, FlashMLA's combine (max, Σ 2^(lse_i − max),
//                  log2, scale_i = 2^(lse_i − global), O = Σ scale_i·O_i)
enum class SplitStyle : std::uint8_t { kLean, kFlashDecoding, kFlashInfer, kFlashMla };

struct LeanOptions {
  SplitStyle style = SplitStyle::kLean;
  int splits = 0;                  // fixed-split styles: 0 = FA2's num_splits_heuristic
  int sms = 132;                   // H100 SXM
  Encoding dtype = Encoding::kFp16;  // Q, K, V, P and O: fp16 or bf16 (ORT: both)
  int block_n = 0;                 // 0: the kernel's (256 for d <= 64, 128 for d <= 128)
  LeanExp exp = LeanExp::kApprox;
  LeanReduce reduce = LeanReduce::kKernel;
  // The two products: "mma" = HMMA m16n8k16 with an FP32 accumulator (the kernel's SM80 MMA
  // atom, numerics/mma.hpp, recorded on the H100), or any DotModel (fp32, fp64, exact).
  DotModel product{DotModel::kMma, MmaInstr::kHmmaF16F32, 0};
  // Ragged decode: one context length per batch entry (empty: all len_kv). Keys past an entry's
  // length are not part of its problem.
  std::vector<int> len_kv_per_batch;
  // The build: -1 = the style's public build (lean: ONNX Runtime's flags; the peers:
  // --use_fast_math), 0 = IEEE, 1 = fast math (ex2/lg2/rcp .approx.ftz, __expf/__logf).
  int fast_math = -1;
  // lean: ONNX Runtime's partition (shapes it gets wrong are refused) or the corrected one.
  LeanMBlocks m_blocks = LeanMBlocks::kOrt;
  // The running sum's rescale: fused into each lane's first add (nvcc's contraction of FA2's
  // `row_sum *= scale` and reduce_sum, as ORT's and FA2's builds compile them) or rounded first
  // (our cuda_check kernels, which spell every operation as an _rn intrinsic).
  bool rowsum_fma = true;
  // Keep the FP32 result (no cast to dtype): the reassociation checks see FP32 differences.
  bool out_fp32 = false;
};

// What one split of one block leaves for the reduction (for checks against the GPU's buffers).
struct LeanPartial {
  int batch = 0, head = 0, m_block = 0, split = 0, cta = 0;
  std::vector<float> o;    // [rows][head_dim_v], FP32, normalized by the split's own l
  std::vector<float> lse;  // [rows]: natural-log (or base-2 for the base-2 styles) LSE
};

struct LeanResult {
  std::vector<double> o;  // [batch, heads_q, len_q, head_dim_v], values of the output format
  LeanPlan plan;
  std::vector<LeanPartial> partials;  // filled when asked (keep_partials)
};

// The pipeline every segment runs (FA2 as ORT's fork runs it on SM80+: fp16/bf16 operands, HMMA
// products, exp2 with the folded scale_log2 as one FFMA, quad row sums, P cast RNE, P·V into C,
// n-tiles descending, 1/l then multiply, output cast RNE).
Pipeline lean_pipeline(const LeanOptions& o, int head_dim);
// The shape the partition sees for an input.
LeanShape lean_shape(const AttentionInput& in, const LeanOptions& o);
// Throws std::invalid_argument with one line for options the kernels do not have.
void validate(const LeanOptions& o, const AttentionInput& in);

// Runs the style's partition; style lean with m_blocks = kOrt refuses (std::invalid_argument, one
// line) a shape ONNX Runtime's kernel leaves partly uncomputed (LeanPlan::coverage).
LeanResult lean_attention(const AttentionInput& in, const LeanOptions& o,
                          bool keep_partials = false);
// The same with the segments' pipeline given (lean_pipeline with stage overrides: `attnsim
// attribute` runs its counterfactuals through the same partition and reduction).
LeanResult lean_attention(const AttentionInput& in, const LeanOptions& o, const Pipeline& p,
                          bool keep_partials = false);
// The same on any partition of the blocks (a plan whose every block is cut into contiguous
// splits 0, 1, ... covering its n-tiles; throws std::invalid_argument otherwise): the property
// tests' random partitions. The plan's frame must be lean_plan's or splitkv_plan's for this input.
LeanResult run_partition(const AttentionInput& in, const LeanOptions& o, LeanPlan plan,
                         bool keep_partials = false);

// A first-order bound on |result − exact attention| of every output element of a run on `plan`
// (FP32 output, out_fp32), from the operations the partition changes: P's rounding to the input
// format (relative to each split's own max: 2·u_p on W, u_p = 2^-11 fp16, 2^-8 bf16), the HMMA P·V chain
// (2u per 16-key step of the row's keys, on W = Σ p|v| / l), the lanes' row sums (u per addition,
// K/4 + 2 per lane on |O| + W), each exp's rounding and argument (2 ulp + ln 2·|x|·u per p and
// per rescale, |x| at most the row's largest exponent magnitude, capped at 150), the split
// normalizations and the merge's exp/log of LSEs (8u + 2|lse|u per split), and the final
// scaling. The scores (Q·K on the same HMMA chain over d) are the same in every partition, so
// their error is left out: the bound is for comparing two partitions of one input,
// |a − b| <= bound_a + bound_b (sim/lean/README.md, "Associativity").
std::vector<double> reassociation_bound(const AttentionInput& in, const LeanOptions& o,
                                        const LeanPlan& plan);

// The partition lean_attention runs for an input (validated; the same refusals).
LeanPlan lean_run_plan(const AttentionInput& in, const LeanOptions& o);
// For each output row [batch, heads_q, len_q] (output order), the CTAs whose segments it is made
// of, in split order (one CTA: the row's keys are not split). `attnsim verify` tallies diverging
// rows by split count and CTA.
std::vector<std::vector<int>> plan_row_ctas(const LeanPlan& plan, const AttentionShape& s);

// One line naming the configuration.
std::string describe(const LeanOptions& o);

// ---------------------------------------------------------------------------------------------
// Split-KV as FA2's and FA3's split kernels run it on any attention pipeline (PyTorch's flash SDPA
// backend, FlashAttention-3: sim/sdpa, sim/fa3).

// The merge of one row's split partials (each split's O normalized by its own row sum, FP32, and
// its natural-log LSE, -inf for a split that saw no key):
//  kFa2  flash_fwd_splitkv_combine_kernel of PyTorch's vendored FA2 (IEEE build: libdevice expf
//        and logf), the FlashDecoding reduction of this file (SplitStyle::kFlashDecoding): lse_max
//        (0 if -inf), min(128 / kBlockM, next_pow2(splits)) lanes summing expf(lse_s − lse_max)
//        (lane j: splits j, j + T, ...), an xor butterfly, lse = logf(Σ) + lse_max (+inf when Σ is
//        0 or NaN), O = Σ fma(expf(lse_s − lse), O_s, O) in split order.
//  kFa3  FA3's FlashAttnFwdCombine (--use_fast_math; sim/fa3/README.md step 9): e_s =
//        ex2.ftz(fl(fl(lse_s − mx) · log2 e)), lane s of 32 holds 0 + e_s (splits s, s + 32, ...
//        past 32 splits: UNVERIFIED), butterfly xor 16 ... 1 (FADD.FTZ), lse = fma(lg2.ftz(Σ), ln 2,
//        mx), w_s = fl(e_s · rcp.ftz(Σ)), O = fma.ftz(w_s, O_s, O) in split order, skipping w_s = 0.
//  kCudnnLean  cuDNN's cudnn::fusion::lean_reduction_kernel<false, false, false> after its decode
//        split kernel (SASS read on the H100, sim/sdpa/README.md): the partials are not
//        normalized: each split writes m_s = fmul.ftz(m, ln 2) (its scaled max in natural-log
//        units), l_s (the lanes combined) and O_s (its warps combined); merged sequentially in
//        split order from partial 0: m' = max(m, m_s); a_s = ex2.ftz(fl(fl(m_s − m')·log2 e)),
//        a = ex2.ftz(fl(fl(m − m')·log2 e)) (both 0 when m' = −inf); O = fma.ftz(a, O,
//        fl(O_s·a_s)), l = fma.ftz(a, l, fl(l_s·a_s)); then out = fl(rcp.ftz(l)·O) (rcp only if
//        l != 0, else 1) and LSE = fma.ftz(lg2.ftz(l), ln 2, m) (−inf when l = 0).
enum class SplitCombine : std::uint8_t { kFa2, kFa3, kCudnnLean };

// How the KV blocks are dealt to the splits:
//  kContiguous  split_block_range: split s takes one range of consecutive blocks (FA2, FA3).
//  kStrided     split s takes blocks s, s + S, s + 2S, ... in ascending order (cuDNN's decode
//               split kernel: the tile index steps by the compiled split count, `VIADD R25, R27,
//               0x20` for S = 32); min(S, blocks) splits.
enum class SplitPartition : std::uint8_t { kContiguous, kStrided };

// Merges one row: o[s] the dv values of split s, lse[s] its LSE; `kernel_head_dim` the head dim
// of the kernel's instantiation (FA2's combine sizes its lanes by it). Writes dv FP32 values to
// `out` and returns the merged LSE.
float combine_split_row(SplitCombine c, int kernel_head_dim, const std::vector<const float*>& o,
                        const std::vector<float>& lse, int dv, float* out);

// SplitCombine::kCudnnLean for one row: o[s] the dv unnormalized values of split s, m_nat[s] its
// max in natural-log units, l[s] its row sum. Writes the normalized dv FP32 values to `out` and
// returns the LSE.
float combine_lean_row(const std::vector<const float*>& o, const std::vector<float>& m_nat,
                       const std::vector<float>& l, int dv, float* out);

// The whole attention with every (batch, head, block_q tile) cut into `splits` KV ranges
// (`partition` of the cdiv(len_kv, block_kv) blocks, clamped by the tile's causal limit):
// each split runs the pipeline's tile loop (attend_tile, in the pipeline's block order) and its
// epilogue in FP32 (finish_tile with out = fp32: O / l and the pipeline's LSE model, -inf for an
// empty split; kCudnnLean: the state's max, row sum and O unnormalized), then `combine` merges
// each row and O is cast to the pipeline's output format. splits <= 1 is run_pipeline. Results do
// not depend on the thread count.
PipelineResult split_kv_attention(const PreparedInput& in, const Pipeline& p, int splits,
                                  SplitCombine combine, int kernel_head_dim,
                                  SplitPartition partition = SplitPartition::kContiguous);

}  // namespace attnsim
