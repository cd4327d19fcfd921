// FlashAttention-3's Hopper forward as a preset of the attention pipeline (see fa3.hpp and
// sim/fa3/README.md: the hopper/ source line or SASS behind every choice, read / fit / UNVERIFIED).
#include "sim/fa3/fa3.hpp"

#include <algorithm>
#include <cmath>
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
  if (o.build == Fa3Build::kVllm) {
    if (o.fp8_interval < 0) fail("vllm_fa3: interval must be >= 0 (0: the shipped two-level)");
    if (o.fp8_interval > 0 && o.dtype != Encoding::kE4m3fn)
      fail("vllm_fa3: interval=N is the FP8 accumulation's: it needs dtype=e4m3");
    if (o.page_size < 16 || o.page_size % 16 != 0)
      fail("vllm_fa3: block_size must be a positive multiple of 16 (vLLM's FlashAttention backend)");
  }
}

}  // namespace

namespace {

bool vllm(const Fa3Options& o) { return o.build == Fa3Build::kVllm; }

// Upstream hopper/tile_size.h tile_size_fwd_sm90 (no local attention, no paged KV, no softcap).
void upstream_tile(const Fa3Options& o, int d, bool causal, int* block_m, int* block_n) {
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

// The fork's tile_size_fwd_sm90 (head dims <= 128, no local attention, no softcap; FP8 with its
// two-level accumulation compiled in, as vLLM builds it).
void vllm_tile(const Fa3Options& o, int d, bool causal, bool paged_non_tma, bool one_wg,
               int* block_m, int* block_n) {
  if (fp8(o)) {
    if (one_wg) {  // "Decode tiles"
      *block_m = 64;
      *block_n = d <= 96 ? 128 : 96;
    } else {  // "Prefill tiles: two-level accumulation needs smaller tiles"
      *block_m = d <= 64 ? 192 : 128;
      *block_n = d <= 96 ? 128 : 192;
    }
    return;
  }
  if (d <= 64) {
    *block_m = one_wg ? 64 : 192;
    *block_n = one_wg ? 192 : (causal ? 128 : (paged_non_tma ? 160 : 192));
  } else if (d <= 96) {
    *block_m = 192;
    *block_n = paged_non_tma ? 128 : 144;
  } else {
    *block_m = one_wg ? 64 : 128;
    *block_n = causal || paged_non_tma ? 128 : (one_wg ? 176 : 160);
  }
}

}  // namespace

bool fa3_one_mma_wg(const Fa3Options& o, const AttentionShape& s) {
  return vllm(o) && (s.head_dim == 128 || s.head_dim == 64) && s.len_q * s.group() <= 64;
}

void fa3_tile(const Fa3Options& o, const AttentionShape& s, bool causal, int* block_m,
              int* block_n) {
  if (!vllm(o)) return upstream_tile(o, s.head_dim, causal, block_m, block_n);
  const bool one_wg = fa3_one_mma_wg(o, s);
  // flash_api.cpp get_pagedkv_tma: TMA for the paged cache when a page holds whole kBlockN tiles
  // (the tile asked without the paged flag) and the packed queries exceed kBlockM.
  int bm = 0, bn = 0;
  vllm_tile(o, s.head_dim, causal, false, one_wg, &bm, &bn);
  const bool tma = o.page_size > 0 && o.page_size % bn == 0 && s.len_q * s.group() > bm;
  vllm_tile(o, s.head_dim, causal, o.page_size > 0 && !tma, one_wg, block_m, block_n);
}

bool fa3_kernel_causal(const Fa3Options& o, const AttentionShape& s, bool causal) {
  if (!causal || s.len_q != 1) return causal;
  // mha_fwd: "causal=true is the same as causal=false in this case"; the fork keeps it at
  // 64 < d <= 128 with a paged cache.
  return vllm(o) && o.page_size > 0 && s.head_dim > 64 && s.head_dim <= 128;
}

namespace {

// flash_api.cpp get_num_splits into heuristics.h num_splits_heuristic with the split kernels'
// PackGQA rows (len_q · group): `batch` sequences of the kernel shape (upstream: the dense batch;
// the fork's varlen launch: 1, "pretending that batch = 1" for an upper bound).
int heuristic_splits(const Fa3Options& o, const AttentionShape& s, bool causal, int sms,
                     int batch) {
  causal = fa3_kernel_causal(o, s, causal);
  int bm = 0, bn = 0;
  fa3_tile(o, s, causal, &bm, &bn);
  const int n_blocks = (s.len_kv + bn - 1) / bn;
  const int m_blocks = (s.len_q * s.group() + bm - 1) / bm;
  const long long bytes = fp8(o) ? 1 : 2;
  const long long size_one_kv_head = (long long)s.len_kv * (s.head_dim + s.head_dim_v) * bytes;
  return fa3_num_splits_heuristic(batch * s.heads_kv * m_blocks, sms, n_blocks, m_blocks,
                                  size_one_kv_head, causal, 128);
}

}  // namespace

int fa3_splits(const Fa3Options& o, const AttentionShape& target, bool causal,
               const Launch* launch) {
  const AttentionShape s = fa3_kernel_shape(o, target, launch);
  const int sms = launch_sms(launch);
  if (!vllm(o)) return fa3_num_splits(o, s, causal, sms);
  // mha_fwd: the bound (num_splits, or get_num_splits for 0); varlen launches of more than 992
  // sequences run one split; otherwise prepare_varlen_num_blocks_kernel gives each sequence its
  // own count (flash_prepare_scheduler.cu).
  const int bound = o.num_splits > 0 ? o.num_splits : heuristic_splits(o, s, causal, sms, 1);
  if (bound <= 1 || s.batch > 992) return 1;
  const bool masked = fa3_kernel_causal(o, s, causal);
  int bm = 0, bn = 0;
  fa3_tile(o, s, masked, &bm, &bn);
  // Its sequences: the launch's, or the target's batch of equal sequences.
  std::vector<LaunchSeq> seqs;
  if (launch) {
    seqs = launch->seqs;
  } else {
    seqs.assign(std::size_t(target.batch), LaunchSeq{target.len_q, target.len_kv});
  }
  long long total = 0;  // sum of m blocks (PackGQA rows) x n blocks over the launch
  for (const LaunchSeq& q : seqs)
    total += (long long)((q.len_q * s.group() + bm - 1) / bm) * ((q.len_kv + bn - 1) / bn);
  // blocks_per_sm = ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm)), with
  // num_head = heads_kv (PackGQA: splits always pack).
  float f = float(total) * 1.1f;
  f = f * float(s.heads_kv);
  f = f / float(sms);
  const int per_sm = int(std::ceil(f));
  const int n = (target.len_kv + bn - 1) / bn;
  if (per_sm <= 0) return 1;
  return std::max(std::min((n + per_sm - 1) / per_sm, bound), 1);
}

int fa3_num_splits(const Fa3Options& o, const AttentionShape& s, bool causal, int sms) {
  if (o.num_splits > 0) return o.num_splits;
  return heuristic_splits(o, s, causal, sms, vllm(o) ? 1 : s.batch);
}

AttentionShape fa3_kernel_shape(const Fa3Options& o, const AttentionShape& target,
                                const Launch* launch) {
  if (o.build != Fa3Build::kVllm) return dense_launch_shape(target, launch, "fa3");
  if (!launch) return target;
  // Varlen: the host code sees the launch's max_seqlen_q / max_seqlen_k and its sequence count.
  AttentionShape s = target;
  s.batch = launch->num_seqs();
  s.len_q = launch->max_len_q();
  s.len_kv = launch->max_len_kv();
  return s;
}

Pipeline fa3_pipeline(const Fa3Options& o, const AttentionShape& s, bool causal) {
  check_dtype(o);
  causal = fa3_kernel_causal(o, s, causal);
  const std::string name = vllm(o) ? "vllm_fa3" : "fa3";
  if (s.head_dim > 128)
    fail(name + ": head_dim " + std::to_string(s.head_dim) +
         " > 128 runs the hdim 192/256 kernels (RescaleOBeforeGemm), which were not built or "
         "modelled");
  if (s.head_dim_v != s.head_dim)
    fail(name + ": head_dim_v != head_dim (the hdimdiff kernels were not built)");
  Pipeline p;  // kv_order desc, causal bottom-right, fma on, raw max: FA3 as FA2
  fa3_tile(o, s, causal, &p.tile.block_q, &p.tile.block_kv);
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
    if (o.build == Fa3Build::kVllm && o.fp8_interval > 0) {
      // The reverted interval design (#122): O the QGMMA chain's C across blocks, merged into a
      // deferred-scale accumulator every fp8_interval blocks (softmax.h merge_accum_with_scale).
      p.pv.flush = o.fp8_interval;
    } else if (o.build == Fa3Build::kVllm) {
      // The fork's two-level FP8 accumulation (hopper/utils.h gemm, Use_Two_Level for FP8 when
      // not zero_init): each KV block's P·V chain starts from zero and lands on O by FADD.FTZ
      // (tCrC = tCrC_original + tCrC), after O's rescale.
      p.pv.acc = PvAccumulate::kChunk;
      p.pv.chunk_add = ChunkAdd::kFaddFtz;
    }
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
  const int splits = fa3_splits(o, in.shape, in.causal, l);
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
  const std::string name = vllm(o) ? "vllm_fa3" : "fa3";
  if (d != 64 && d != 128 && d < 128)  // above 128 the pipeline refuses
    r.push_back(name + ": head_dim " + std::to_string(d) + " runs the hdim " +
                (d <= 64   ? "64"
                 : d <= 96 ? "96"
                           : "128") +
                " kernel zero-padded; only head dims 64 and 128 were built and recorded "
                "(UNVERIFIED)");
  if (fa3_num_splits(o, s, causal, 132) > 32)
    r.push_back(name + ": more than 32 splits: the combine's lanes past 32 are UNVERIFIED");
  if (vllm(o) && o.fp8_interval > 0)
    r.push_back("vllm_fa3: interval=" + std::to_string(o.fp8_interval) +
                " is the accumulation the fork merged and reverted (vllm-project/flash-attention "
                "#122, #136), read from its source, not recorded (UNVERIFIED)");
  if (vllm(o) && o.num_splits > 1)
    r.push_back("vllm_fa3: splits=" + std::to_string(o.num_splits) +
                " (a bound, as vLLM's max_num_splits under CUDA graphs): recorded with 0 and 1 "
                "only (UNVERIFIED)");
  if (vllm(o) && o.page_size != 16)
    r.push_back("vllm_fa3: block_size " + std::to_string(o.page_size) +
                ": recorded with vLLM's default 16 only (a block of whole kBlockN tiles takes the "
                "TMA path and its tile: UNVERIFIED)");
  return r;
}

KernelSchedule fa3_schedule(const Fa3Options& o, const AttentionShape& target, bool causal,
                            const Launch* launch) {
  const AttentionShape s = fa3_kernel_shape(o, target, launch);
  const int sms = launch_sms(launch);
  const bool masked = fa3_kernel_causal(o, s, causal);
  int bm = 0, bn = 0;
  fa3_tile(o, s, masked, &bm, &bn);
  const int splits = fa3_splits(o, target, causal, launch);
  KernelSchedule k;
  k.family = vllm(o) ? "vllm_fa3" : "fa3";
  k.kernel = "flash::FlashAttnFwdSm90";
  if (vllm(o)) {
    k.items.push_back({"batch", std::to_string(s.batch), false,
                       "the launch's sequences (varlen: cu_seqlens_q, seqused_k)"});
    k.items.push_back({"max_seqlen_q", std::to_string(s.len_q), false,
                       "the launch's longest query (vLLM's max_query_len)"});
    k.items.push_back({"one_mma_wg", fa3_one_mma_wg(o, s) ? "yes" : "no", true,
                       "heuristics.h use_one_mma_wg: head dim 64/128, max_seqlen_q x group <= 64 "
                       "(the decode tiles)"});
  } else {
    k.items.push_back({"batch", std::to_string(s.batch), false,
                       "the launch's sequences (flash_attn_func: one dense shape)"});
  }
  if (causal && !masked)
    k.items.push_back({"causal", "off", true,
                       "flash_api.cpp mha_fwd: one query, no window: causal=true is the same as "
                       "causal=false (the non-causal kernel)"});
  k.items.push_back({"tile", std::to_string(bm) + "x" + std::to_string(bn), true,
                     "tile_size.h tile_size_fwd_sm90 (head dim, causal, dtype" +
                         std::string(vllm(o) ? ", decode path, paged KV without TMA)" : ")")});
  if (vllm(o) && fp8(o))
    k.items.push_back({"fp8_accumulation", "two-level", false,
                       "utils.h gemm: each KV block's P·V from zero, added to O in FP32"});
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
                     vllm(o) ? (o.num_splits == 1
                                    ? std::string("num_splits given")
                                    : "flash_prepare_scheduler.cu: ceil(n_blocks / ceil(1.1 x "
                                      "launch blocks x heads_kv / " + std::to_string(sms) +
                                          " SMs)), at most the bound (num_splits, or "
                                          "get_num_splits as if one sequence)")
                     : o.num_splits == 0
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
