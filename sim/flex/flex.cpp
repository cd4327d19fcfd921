// FlexAttention's prefill template as a preset of the attention pipeline (flex.hpp,
// sim/flex/README.md: the source line, PTX or SASS behind each choice).
#include "sim/flex/flex.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

DotModel mma(MmaInstr i) { return DotModel{DotModel::kMma, i, 0}; }

}  // namespace

int flex_decode_splits(const AttentionShape& s, int sms) {
  // flex_decoding.py get_split_k: 2 per SM over batch x KV heads, at least 1.
  const int bh = std::max(s.batch * s.heads_kv, 1);
  return std::max(sms / bh * 2, 1);
}

void flex_decode_tile(const AttentionShape& s, int* block_m, int* block_n) {
  int m = 16;
  while (m < s.len_q * s.group()) m *= 2;
  *block_m = m;
  *block_n = 64;
}

void flex_tile(int d, int* block_m, int* block_n) {
  *block_m = 128;
  *block_n = d <= 64 ? 128 : 64;
}

bool flex_uses_decode(const AttentionShape& s) {
  // _use_flex_decoding: short queries (len_q < 128) with static batch and heads; with GQA the
  // ratio must be a power of two (otherwise the main template runs).
  const int g = s.group();
  return s.len_q < 128 && g > 0 && (g & (g - 1)) == 0;
}

Pipeline flex_pipeline(const FlexOptions& o, const AttentionShape& s, bool causal, int sms) {
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16)
    fail("flex: dtype must be fp16 or bf16");
  if (s.head_dim_v != s.head_dim)
    fail("flex: head_dim_v != head_dim is not modelled (no recording)");
  if (s.head_dim % 16 != 0 || s.head_dim > 256)
    fail("flex: head_dim must be a multiple of 16 up to 256 (QK_HEAD_DIM_ROUNDED = the power of "
         "two Triton pads to is not modelled), got " + std::to_string(s.head_dim));
  const bool decode = flex_uses_decode(s);
  if (decode && causal && s.len_q > 64 && flex_decode_splits(s, sms) > 1)
    fail("flex: len_q " + std::to_string(s.len_q) +
         " (65..127) under a block mask takes the decode template's real split-KV (SPLIT_KV " +
         std::to_string(flex_decode_splits(s, sms)) +
         ": keys beyond the first 64 in a second split, merged by Inductor's autotuned reduction "
         "kernels), which is not modelled");
  Pipeline p;
  if (decode) {
    // flex_decoding.py: BLOCK_M = max(next_pow2(len_q · G), 16) rows of a KV head's G query heads
    // (the rows' arithmetic is independent of the packing), BLOCK_N 64, 2 warps.
    flex_decode_tile(s, &p.tile.block_q, &p.tile.block_kv);
  } else {
    flex_tile(s.head_dim, &p.tile.block_q, &p.tile.block_kv);
  }
  // forward_inner walks KV_IDX (the blocks the mask cuts) and then FULL_KV_IDX; mask_mod
  // `q_idx >= kv_idx` is top-left aligned.
  p.tile.kv_order = KvOrder::kSparse;
  p.tile.sparse_block = 128;
  p.tile.causal = CausalAlign::kTopLeft;
  for (OperandSpec* x : {&p.q, &p.k, &p.v}) {
    x->input = o.dtype;
    x->enc = o.dtype;
    x->cast = kCudaRn;
  }
  // tl.dot on sm_90: wgmma m64nNk16 chains (HGMMA.64x64x16 / 64x128x16 in the SASS), Q·Kᵀ from
  // zero, P·V into the accumulator (`tl.dot(p, v, acc)`).
  // The decode template's tiles of 16 or 64 rows on 2 warps: mma.sync m16n8k16 (HMMA.16816.F32),
  // warpsPerCTA = [1, 2].
  const bool bf16 = o.dtype == Encoding::kBf16;
  const DotModel dot = decode ? mma(bf16 ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32)
                              : mma(bf16 ? MmaInstr::kWgmmaBf16F32 : MmaInstr::kWgmmaF16F32);
  p.qk.dot = p.pv.dot = dot;
  p.pv.acc = PvAccumulate::kIntoC;
  SoftmaxStage& sm = p.softmax;
  // `qk *= SM_SCALE` (FMUL), `post_mod_scores *= RCP_LN2`, the running max over those, exp2 of
  // `post_mod_scores - m_ij` (FMUL then FADD where a mask or bounds select sits between them,
  // FFMA otherwise: fma_blocks), ex2.approx.ftz, l = fma(l, alpha, tl.sum(p)), acc * alpha.
  sm.scale_log2 = ScaleLog2::kScoreFirst;
  sm.max_domain = MaxDomain::kScaled;
  sm.fma = true;
  sm.fma_blocks = FmaBlocks::kFullDivisible;
  sm.row_sum = RowSum::kTritonTree;
  if (decode) {
    // tl.sum over the MMA-v2 layout of 2 warps along N: 8-key tiles alternate between the warps
    // (TTGIR warpsPerCTA = [1, 2]; SASS SHFL.BFLY 2, 1, then STS/LDS and SHFL.BFLY 1).
    sm.row_sum = RowSum::kTritonWarps;
    sm.rowsum_warps = 2;
  }
  sm.lse = LseModel::kLog2LibdeviceLn2;
  sm.softcap = SoftcapFn::kLibdevice;  // score_mod C * tanh(s / C): libdevice.tanh
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  p.rescale.kind = Rescale::kMultiply;
  p.normalize.kind = Normalize::kDivFull;  // `acc / l_i[:, None]`: div.full.f32
  p.p.enc = o.dtype;
  p.p.cast = kCudaRn;
  p.out.enc = o.dtype;
  p.out.cast = kCudaRn;
  validate(p);
  return canonical(p);
}

std::vector<std::string> flex_unverified(const FlexOptions& o, const AttentionShape& s,
                                         bool causal) {
  std::vector<std::string> r;
  (void)o;
  if (s.head_dim != 64 && s.head_dim != 128)
    r.push_back("flex: head_dim " + std::to_string(s.head_dim) +
                " (recorded: 64 and 128; Inductor's configuration for it is assumed)");
  if (!causal && s.len_q % 128 == 0 && s.len_kv % 128 == 0)
    r.push_back("flex: no mask with both lengths multiples of 128 (the exponent's FMA contraction "
                "there is assumed from the causal full blocks; no recording)");
  return r;
}

KernelSchedule flex_schedule(const FlexOptions& o, const AttentionShape& target, bool causal,
                             const Launch* launch) {
  const AttentionShape s = dense_launch_shape(target, launch, "flex");
  const int sms = launch_sms(launch);
  const Pipeline p = flex_pipeline(o, s, causal, sms);  // throws for what is not modelled
  const bool decode = flex_uses_decode(s);
  KernelSchedule k;
  k.family = "flex";
  k.kernel = decode ? "triton flex_decoding" : "triton flex_attention";
  k.items.push_back({"batch", std::to_string(s.batch), false,
                     "the launch's sequences (flex_attention: one dense shape)"});
  k.items.push_back({"template", decode ? "decode" : "prefill", true,
                     "_use_flex_decoding: len_q < 128 and a power-of-two GQA ratio"});
  k.items.push_back({"tile", std::to_string(p.tile.block_q) + "x" + std::to_string(p.tile.block_kv),
                     true,
                     decode ? "BLOCK_M max(next_pow2(len_q·G), 16), BLOCK_N 64"
                            : "Inductor's sm_90 configuration for the head dim"});
  if (decode) {
    const int splits = flex_decode_splits(s, sms);
    k.items.push_back({"split_kv_ctas", std::to_string(splits), false,
                       "get_split_k: max(2 x (" + std::to_string(sms) +
                           " // (batch x heads_kv)), 1) CTAs per (batch, KV head)"});
    // Without a mask the one 2^30-key block puts every key in split 0; under a mask (<= 64
    // queries) TILE_KV = 64 keys per split covers every visible key in split 0: one pass either
    // way (flex.hpp flex_uses_decode, flex_decode_splits).
    k.items.push_back({"keys_split", "split 0 holds every key", true,
                       causal ? "the block mask's TILE_KV: the visible keys of <= 64 queries lie "
                                "in split 0"
                              : "no block mask: one 2^30-key block, so split 0 walks every key"});
  }
  k.unverified = flex_unverified(o, s, causal);
  return k;
}

}  // namespace attnsim
