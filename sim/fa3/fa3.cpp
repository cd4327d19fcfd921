// FlashAttention-3's Hopper forward as a preset of the attention pipeline (see fa3.hpp and
// sim/fa3/README.md: the hopper/ source line or SASS behind every choice, read / fit / UNVERIFIED).
#include "sim/fa3/fa3.hpp"

#include <stdexcept>
#include <string>

#include "sim/lean/lean.hpp"
#include "sim/lean/schedule.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

DotModel mma(MmaInstr i) { return DotModel{DotModel::kMma, i, 0}; }

bool fp8(const Fa3Options& o) { return o.dtype == Encoding::kE4m3fn; }

void check_dtype(const Fa3Options& o) {
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16 && o.dtype != Encoding::kE4m3fn)
    fail("fa3: dtype must be fp16, bf16 or e4m3fn");
  if (o.input != Encoding::kFp16 && o.input != Encoding::kBf16)
    fail("fa3: the input format is fp16 or bf16");
  if (o.num_splits < 0) fail("fa3: num_splits must be >= 0 (0: FA3's heuristic)");
}

}  // namespace

void fa3_tile(const Fa3Options& o, int d, bool causal, int* block_m, int* block_n) {
  // hopper/tile_size.h tile_size_fwd_sm90 (no local attention, no paged KV, no softcap).
  if (fp8(o)) {
    *block_m = d <= 96 ? 192 : 128;
    *block_n = d <= 64 ? 160 : (d <= 96 ? 128 : 224);
    return;
  }
  if (d <= 64) {
    *block_m = 192;
    *block_n = causal ? 128 : 192;
  } else if (d <= 96) {
    *block_m = 192;
    *block_n = 144;
  } else {
    *block_m = 128;
    *block_n = causal ? 128 : 176;
  }
}

bool fa3_kernel_causal(const AttentionShape& s, bool causal) { return causal && s.len_q != 1; }

int fa3_num_splits(const Fa3Options& o, const AttentionShape& s, bool causal, int sms) {
  if (o.num_splits > 0) return o.num_splits;
  causal = fa3_kernel_causal(s, causal);
  int bm = 0, bn = 0;
  fa3_tile(o, s.head_dim, causal, &bm, &bn);
  // flash_api.cpp get_num_splits: the split kernels pack GQA (rows = len_q · group).
  const int n_blocks = (s.len_kv + bn - 1) / bn;
  const int m_blocks = (s.len_q * s.group() + bm - 1) / bm;
  const long long bytes = fp8(o) ? 1 : 2;
  const long long size_one_kv_head = (long long)s.len_kv * (s.head_dim + s.head_dim_v) * bytes;
  return fa3_num_splits_heuristic(s.batch * s.heads_kv * m_blocks, sms, n_blocks, m_blocks,
                                  size_one_kv_head, causal, 128);
}

Pipeline fa3_pipeline(const Fa3Options& o, const AttentionShape& s, bool causal) {
  check_dtype(o);
  causal = fa3_kernel_causal(s, causal);
  if (s.head_dim > 128)
    fail("fa3: head_dim " + std::to_string(s.head_dim) +
         " > 128 runs the hdim 192/256 kernels (RescaleOBeforeGemm), which were not built or "
         "modelled");
  if (s.head_dim_v != s.head_dim)
    fail("fa3: head_dim_v != head_dim (the hdimdiff kernels were not built)");
  Pipeline p;  // kv_order desc, causal bottom-right, fma on, raw max: FA3 as FA2
  fa3_tile(o, s.head_dim, causal, &p.tile.block_q, &p.tile.block_kv);
  const Encoding in16 = fp8(o) ? o.input : o.dtype;
  for (OperandSpec* x : {&p.q, &p.k, &p.v}) {
    x->input = in16;
    x->enc = o.dtype;
    x->cast = fp8(o) ? kCudaSatfinite : kCudaRn;
  }
  SoftmaxStage& sm = p.softmax;
  sm.row_sum = RowSum::kQuadFma;    // FFMA.FTZ R13, R10, R13, R15: row_sum *= scale fused
  sm.lse = LseModel::kNaturalFmaC;  // max · (softmax_scale_log2 · ln2) + __logf(sum)
  sm.ftz = true;                    // --use_fast_math
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  p.rescale.kind = Rescale::kMultiplyFtz;
  p.normalize.kind = Normalize::kRcpApproxFtz;
  p.p.enc = o.dtype;
  p.p.cast = fp8(o) ? kCudaSatfinite : kCudaRn;
  if (fp8(o)) {
    // FP8: QGMMA chains (k32 FP22 blocks), descales per (batch, head) folded into the exponent's
    // coefficient on the device, Max_offset 8 (p <= 2^8), v_descale into 1/l; output bf16.
    p.qk.dot = p.pv.dot = mma(MmaInstr::kWgmmaE4m3F32);
    for (OperandSpec* x : {&p.q, &p.k, &p.v}) {
      x->scale = ScaleMode::kFloat;
      x->float_max = 448.0f;
      x->groups.kind = Granularity::kPerTensor;
      x->apply = ScaleAt::kProduct;
    }
    p.v.apply = ScaleAt::kReciprocal;
    sm.dequant = Dequant::kDescale;
    sm.max_offset = 8.0;
    p.out.enc = Encoding::kBf16;
  } else {
    p.qk.dot = p.pv.dot =
        mma(o.dtype == Encoding::kBf16 ? MmaInstr::kWgmmaBf16F32 : MmaInstr::kWgmmaF16F32);
    p.out.enc = o.dtype;
  }
  p.out.cast = kCudaRn;
  validate(p);
  return canonical(p);
}

PipelineResult fa3_attention(const PreparedInput& in, const Fa3Options& o, const Pipeline& p) {
  const Launch* l = in.launch.get();
  const int splits =
      fa3_num_splits(o, dense_launch_shape(in.shape, l, "fa3"), in.causal, launch_sms(l));
  if (splits <= 1) return run_pipeline(in, p);
  // The combine takes no head-dim-dependent order (one split per lane).
  return split_kv_attention(in, p, splits, SplitCombine::kFa3, in.shape.head_dim);
}

PipelineResult fa3_attention(const AttentionInput& in, const Fa3Options& o, const Pipeline& p) {
  check_dtype(o);
  return fa3_attention(prepare(in, p), o, p);
}

PreparedInput fa3_prepare_fp8(const AttentionInput& in, const Pipeline& p,
                              const std::vector<float>& q_descale,
                              const std::vector<float>& k_descale,
                              const std::vector<float>& v_descale) {
  const AttentionShape& s = in.shape;
  const std::size_t per = std::size_t(s.batch) * s.heads_kv;
  if (q_descale.size() != per || k_descale.size() != per || v_descale.size() != per)
    fail("fa3: descales are [batch][heads_kv]");
  validate(p);
  PreparedInput r;
  r.shape = s;
  r.causal = in.causal;
  r.launch = in.launch;
  r.sm_scale = in.scale();
  // One scale per slice (GroupMap per tensor): Q's slices are query heads, each takes its KV
  // head's descale.
  std::vector<float> qs(std::size_t(s.batch) * s.heads_q);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h)
      qs[std::size_t(b) * s.heads_q + h] = q_descale[std::size_t(b) * s.heads_kv + h / s.group()];
  r.q = prepared_operand(p, Operand::kQ, s.batch * s.heads_q, s.len_q, s.head_dim, in.q, qs,
                         p.q.groups, 1);
  r.k = prepared_operand(p, Operand::kK, s.batch * s.heads_kv, s.len_kv, s.head_dim, in.k,
                         k_descale, p.k.groups, 1);
  r.v = prepared_operand(p, Operand::kV, s.batch * s.heads_kv, s.len_kv, s.head_dim_v, in.v,
                         v_descale, p.v.groups, 1);
  return r;
}

std::vector<std::string> fa3_unverified(const Fa3Options& o, const AttentionShape& s, bool causal) {
  std::vector<std::string> r;
  const int d = s.head_dim;
  if (d != 64 && d != 128)
    r.push_back(std::string("fa3: head_dim ") + std::to_string(d) + " runs the hdim " +
                (d <= 64   ? "64"
                 : d <= 96 ? "96"
                           : "128") +
                " kernel zero-padded; only head dims 64 and 128 were built and recorded "
                "(UNVERIFIED)");
  if (fa3_num_splits(o, s, causal, 132) > 32)
    r.push_back("fa3: more than 32 splits: the combine's lanes past 32 are UNVERIFIED");
  return r;
}

KernelSchedule fa3_schedule(const Fa3Options& o, const AttentionShape& target, bool causal,
                            const Launch* launch) {
  const AttentionShape s = dense_launch_shape(target, launch, "fa3");
  const int sms = launch_sms(launch);
  const bool masked = fa3_kernel_causal(s, causal);
  int bm = 0, bn = 0;
  fa3_tile(o, s.head_dim, masked, &bm, &bn);
  const int splits = fa3_num_splits(o, s, causal, sms);
  KernelSchedule k;
  k.family = "fa3";
  k.kernel = "flash::FlashAttnFwdSm90";
  k.items.push_back({"batch", std::to_string(s.batch), false,
                     "the launch's sequences (flash_attn_func: one dense shape)"});
  if (causal && !masked)
    k.items.push_back({"causal", "off", true,
                       "flash_api.cpp mha_fwd: one query, no window: causal=true is the same as "
                       "causal=false (the non-causal kernel)"});
  k.items.push_back({"tile", std::to_string(bm) + "x" + std::to_string(bn), true,
                     "tile_size.h tile_size_fwd_sm90 (head dim, causal, dtype)"});
  if (o.num_splits == 0) {
    const int m_blocks = (s.len_q * s.group() + bm - 1) / bm;
    const int n_blocks = (s.len_kv + bn - 1) / bn;
    k.items.push_back({"blocks",
                       std::to_string(s.batch) + "x" + std::to_string(s.heads_kv) + "x" +
                           std::to_string(m_blocks) + " = " +
                           std::to_string(s.batch * s.heads_kv * m_blocks),
                       false, "batch x heads_kv x ceil(len_q·group / kBlockM) (PackGQA)"});
    k.items.push_back({"n_blocks", std::to_string(n_blocks), false,
                       "ceil(len_kv / " + std::to_string(bn) + ")"});
  }
  k.items.push_back({"splits", std::to_string(splits), true,
                     o.num_splits == 0
                         ? "heuristics.h num_splits_heuristic(blocks, " + std::to_string(sms) +
                               " SMs, n_blocks, ...): 1 when blocks >= 0.8 x SMs (L2 rule "
                               "aside), else the fewest splits within 85% of the best"
                         : std::string("num_splits given")});
  if (splits > 1)
    k.items.push_back({"combine", "flash::FlashAttnFwdCombine", true,
                       "the splits merged by their LSEs (PackGQA rows in the split kernel)"});
  k.unverified = fa3_unverified(o, s, causal);
  return k;
}

}  // namespace attnsim
