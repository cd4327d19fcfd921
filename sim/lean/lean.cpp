// LeanAttention and split-KV decoding on the attention pipeline (see lean.hpp, sim/lean/README.md).
#include "sim/lean/lean.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "formats/float32.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/special.hpp"
#include "numerics/special_array.hpp"
#include "sim/flash/flash.hpp"

namespace attnsim {

namespace {

// A (batch, kernel head, m-block) as one key, and the block of output row `row`
// ([batch, heads_q, len_q] order) under the plan, as tiles_of_block maps rows to blocks.
long long block_key(const LeanPlan& pl, int batch, int head, int m_block) {
  return ((long long)batch * pl.heads + head) * pl.num_m_blocks + m_block;
}
long long block_key_of_row(const LeanPlan& pl, const AttentionShape& s, long long row) {
  const int i = int(row % s.len_q), h = int(row / s.len_q % s.heads_q),
            b = int(row / s.len_q / s.heads_q), g = s.heads_q / s.heads_kv;
  return block_key(pl, b, pl.folded ? h / g : h, (pl.folded ? h % g : i) / pl.block_m);
}


constexpr double kLog2e = 1.44269504088896340736;
constexpr float kInfF = std::numeric_limits<float>::infinity();

// The FP32 special functions of the split epilogue and the reduction, as one build compiles them,
// over arrays: one value per row (and split) of a block, evaluated together so that the MUFU
// models' table reads overlap (numerics/special_array.hpp; each element the scalar model's value).
struct SplitMath {
  bool exact = false;
  bool fast = false;  // --use_fast_math (FA2, flashinfer, FlashMLA builds)
  // `__logf` (the split LSE of lean_fwd_kernel.h / FA2 normalize_softmax_lse).
  void fast_log(const float* x, std::size_t n, float* out) const {
    if (exact) return each(x, n, out, [](double v) { return std::log(v); });
    fast_logf_array(x, n, out, fast);
  }
  // `expf` and `logf` of the reduction (fast math: __expf / __logf).
  void exp_nat(const float* x, std::size_t n, float* out) const {
    if (exact) return each(x, n, out, [](double v) { return std::exp(v); });
    if (fast) return fast_expf_array(x, n, out, true);
    expf_libdevice_array(x, n, out, false);
  }
  void log_nat(const float* x, std::size_t n, float* out) const {
    if (exact) return each(x, n, out, [](double v) { return std::log(v); });
    if (fast) return fast_logf_array(x, n, out, true);
    for (std::size_t i = 0; i < n; ++i) out[i] = logf_libdevice(x[i], false);  // no table
  }
  // Base 2 (flashinfer ptx_exp2 / ptx_lg2 = ex2/lg2.approx.ftz; FlashMLA exp2f/log2f under
  // --use_fast_math: the same instructions).
  void exp2(const float* x, std::size_t n, float* out) const {
    if (exact) return each(x, n, out, [](double v) { return std::exp2(v); });
    if (fast) return ex2_approx_ftz_array(x, n, out);
    ex2_approx_array(x, n, out);
  }
  void log2(const float* x, std::size_t n, float* out) const {
    if (exact) return each(x, n, out, [](double v) { return std::log2(v); });
    if (fast) return lg2_approx_ftz_array(x, n, out);
    lg2_approx_array(x, n, out);
  }
  // 1.f / sum (IEEE, or rcp.approx.ftz under fast math).
  void rcp(const float* x, std::size_t n, float* out) const {
    if (fast && !exact) return rcp_approx_ftz_array(x, n, out);
    for (std::size_t i = 0; i < n; ++i) out[i] = 1.0f / x[i];
  }
  // One value: the array functions on it.
  float exp2(float x) const { return one(&SplitMath::exp2, x); }

 private:
  template <class F>
  static void each(const float* x, std::size_t n, float* out, F f) {
    for (std::size_t i = 0; i < n; ++i) out[i] = float(f(double(x[i])));
  }
  float one(void (SplitMath::*f)(const float*, std::size_t, float*) const, float x) const {
    float y = 0.0f;
    (this->*f)(&x, 1, &y);
    return y;
  }
};

// The build each style's public kernel is compiled with (README: build flags), unless set.
bool fast_math_of(const LeanOptions& o) {
  if (o.fast_math >= 0) return o.fast_math != 0;
  return o.style != SplitStyle::kLean;
}

// The threads that share one output row's LSE sum in the reduction (sim/lean/README.md):
// ORT's lean host CTA 2 (kMaxSplits/2 values per lane); FA2's combine_attn_seqk_parallel
// min(128 / kBlockM, kMaxSplits) with kBlockM = 4 (d = 128) or 8 (d = 64) rows per CTA and
// kMaxSplits the next power of two >= num_splits (2 .. 128); FlashMLA's combine a warp (32);
// flashinfer's sequential merge 1.
int combine_lanes(SplitStyle s, int num_splits, int head_dim) {
  switch (s) {
    case SplitStyle::kLean:
      return 2;
    case SplitStyle::kFlashDecoding: {
      int kmax = 2;
      while (kmax < num_splits && kmax < 128) kmax *= 2;
      const int rows = head_dim % 128 == 0 ? 4 : (head_dim % 64 == 0 ? 8 : 16);
      return std::min(128 / rows, kmax);
    }
    case SplitStyle::kFlashMla:
      return 32;
    case SplitStyle::kFlashInfer:
      return 1;
  }
  return 1;
}

bool base2(SplitStyle s) { return s == SplitStyle::kFlashInfer || s == SplitStyle::kFlashMla; }

// A partition every block of which is cut into contiguous, disjoint, covering n-tile ranges with
// splits 0, 1, ... (host = split 0 = the range starting at 0).
void check_partition(const LeanPlan& pl) {
  std::map<long long, std::vector<const LeanSegment*>> by;
  for (const LeanSegment& g : pl.segments) {
    if (g.n_begin < 0 || g.n_end <= g.n_begin)
      throw std::invalid_argument("lean: a segment has an empty or negative n-tile range");
    if (g.batch < 0 || g.head < 0 || g.m_block < 0 || g.m_block >= pl.num_m_blocks ||
        g.head >= pl.heads)
      throw std::invalid_argument("lean: a segment names a block outside the shape");
    by[block_key(pl, g.batch, g.head, g.m_block)].push_back(&g);
  }
  for (auto& [key, v] : by) {
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->split < b->split; });
    int next = 0;
    for (std::size_t k = 0; k < v.size(); ++k) {
      if (v[k]->split != int(k) || v[k]->n_begin != next)
        throw std::invalid_argument("lean: a block's segments are not contiguous splits 0, 1, ...");
      next = v[k]->n_end;
    }
    if (next != pl.tiles_of(v[0]->batch, v[0]->m_block))
      throw std::invalid_argument("lean: a block's segments do not cover its n-tiles");
  }
  // Every block present: the covered tiles add up to the frame's total.
  long long covered = 0;
  for (const auto& [key, v] : by) covered += v.back()->n_end;
  if (covered != pl.total_tiles)
    throw std::invalid_argument("lean: the partition leaves blocks uncovered");
}

// The rows of one (batch, head, m-block) as pipeline tiles: one tile of up to block_m query rows,
// or, with GQA decode folded into M, one single-row tile per query head of the group (the rows of
// the kernel's tile are independent, so the per-row arithmetic is the same).
std::vector<Tile> tiles_of_block(const LeanPlan& pl, const AttentionShape& s, int batch, int head,
                                 int m_block) {
  std::vector<Tile> t;
  const int r0 = m_block * pl.block_m, r1 = std::min(pl.rows, r0 + pl.block_m);
  if (pl.folded) {
    const int g = s.heads_q / s.heads_kv;
    for (int r = r0; r < r1; ++r) t.push_back(Tile{batch, head * g + r, 0, 1});
  } else {
    t.push_back(Tile{batch, head, r0, r1 - r0});
  }
  return t;
}

struct BlockRef {
  int batch, head, m_block;
  std::vector<const LeanSegment*> segs;  // by split
};

}  // namespace

Pipeline lean_pipeline(const LeanOptions& o, int head_dim) {
  // FA2 as ORT's fork runs it: `scores * scale_log2 - max_scaled` contracts to one FFMA (SASS,
  // README), quad row sums, n-tiles descending.
  Pipeline p = flash_pipeline(o.dtype, o.out_fp32 ? Encoding::kFp32 : o.dtype);
  p.tile.block_q = 64;
  p.tile.block_kv = o.block_n > 0 ? o.block_n : (head_dim <= 64 ? 256 : (head_dim <= 128 ? 128 : 64));
  if (o.rowsum_fma) p.softmax.row_sum = RowSum::kQuadFma;
  p.qk.dot = o.product;
  p.pv.dot = o.product;
  if (o.product.kind == DotModel::kMma) {
    const MmaInstr i = o.dtype == Encoding::kBf16 ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32;
    p.qk.dot.instr = p.pv.dot.instr = i;
  }
  const bool fast = fast_math_of(o);
  if (o.exp == LeanExp::kExact) {
    p.exp.fn = ExpFn::kExact;
  } else {
    // exp2f: ex2.approx.f32 (range-scaled) in an IEEE build, ex2.approx.ftz under fast math.
    p.exp.fn = fast ? ExpFn::kEx2ApproxFtz : ExpFn::kEx2Approx;
    if (fast) p.normalize.kind = Normalize::kRcpApproxFtz;
  }
  return canonical(p);
}

LeanShape lean_shape(const AttentionInput& in, const LeanOptions& o) {
  LeanShape s;
  s.batch = in.shape.batch;
  s.heads_q = in.shape.heads_q;
  s.heads_kv = in.shape.heads_kv;
  s.len_q = in.shape.len_q;
  s.len_kv = in.shape.len_kv;
  s.head_dim = in.shape.head_dim;
  s.causal = in.causal;
  s.sms = o.sms;
  s.len_kv_per_batch = o.len_kv_per_batch;
  s.block_n = o.block_n;
  s.m_blocks = o.style == SplitStyle::kLean ? o.m_blocks : LeanMBlocks::kAll;
  return s;
}

void validate(const LeanOptions& o, const AttentionInput& in) {
  if (!in.shape.valid()) throw std::invalid_argument("lean: invalid attention shape");
  if (in.shape.head_dim_v != in.shape.head_dim)
    throw std::invalid_argument("lean: head_dim_v must equal head_dim (the kernel's one D)");
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16)
    throw std::invalid_argument("lean: dtype must be fp16 or bf16");
  if (o.block_n != 0 && (o.block_n < 16 || o.block_n % 16 != 0))
    throw std::invalid_argument("lean: block_n must be a positive multiple of 16");
  if (o.splits < 0) throw std::invalid_argument("lean: splits must be >= 0");
  if (o.reduce == LeanReduce::kPaper && o.style != SplitStyle::kLean)
    throw std::invalid_argument("lean: reduce=paper is LeanAttention's Algorithm 2 (style lean)");
  validate(lean_shape(in, o));
}

namespace {
LeanResult run_plan(const AttentionInput& in, const LeanOptions& o, const Pipeline& p,
                    LeanPlan plan, bool keep_partials);
}  // namespace

LeanResult lean_attention(const AttentionInput& in, const LeanOptions& o, bool keep_partials) {
  return lean_attention(in, o, lean_pipeline(o, in.shape.head_dim), keep_partials);
}

LeanResult lean_attention(const AttentionInput& in, const LeanOptions& o, const Pipeline& p,
                          bool keep_partials) {
  validate(o, in);
  validate(p);
  return run_plan(in, o, p, lean_run_plan(in, o), keep_partials);
}

LeanPlan lean_run_plan(const AttentionInput& in, const LeanOptions& o) {
  validate(o, in);
  const LeanShape ls = lean_shape(in, o);
  LeanPlan plan = o.style == SplitStyle::kLean ? lean_plan(ls) : splitkv_plan(ls, o.splits);
  if (o.style == SplitStyle::kLean && !plan.coverage.empty())
    throw std::invalid_argument("lean: ONNX Runtime's LeanAttention does not compute this shape (" +
                                plan.coverage[0] + "); mblocks=all runs the corrected partition");
  return plan;
}

std::vector<std::vector<int>> plan_row_ctas(const LeanPlan& plan, const AttentionShape& s) {
  // The segments of each (batch, head, m-block) by split.
  std::map<long long, std::vector<std::pair<int, int>>> by_block;  // -> (split, cta)
  for (const LeanSegment& g : plan.segments)
    by_block[block_key(plan, g.batch, g.head, g.m_block)].push_back({g.split, g.cta});
  std::vector<std::vector<int>> rows(std::size_t(s.batch) * s.heads_q * s.len_q);
  for (std::size_t row = 0; row < rows.size(); ++row) {
    const auto it = by_block.find(block_key_of_row(plan, s, (long long)row));
    if (it == by_block.end()) continue;  // no tile (a row with no keys)
    std::vector<std::pair<int, int>> segs = it->second;
    std::sort(segs.begin(), segs.end());
    for (const auto& [split, cta] : segs) rows[row].push_back(cta);
  }
  return rows;
}

LeanResult run_partition(const AttentionInput& in, const LeanOptions& o, LeanPlan plan,
                         bool keep_partials) {
  validate(o, in);
  check_partition(plan);
  return run_plan(in, o, lean_pipeline(o, in.shape.head_dim), std::move(plan), keep_partials);
}

namespace {

// One split's normalized output and LSE per row (lean_fwd_kernel.h / FA2
// normalize_softmax_lse<Split=true>): inv = 1/l (1 when l is 0 or NaN), O·inv, lse = m·softmax_scale
// + __logf(l) as one FFMA (-inf when l is 0 or NaN); the base-2 styles keep lse2 = m·scale_log2 +
// log2(l).
void normalize_split(const TileState<float>& st, const Pipeline& p, const SplitMath& fm, bool b2,
                     float sm_f, float scale_log2, std::vector<float>& po, std::vector<float>& plse) {
  const int rows = st.rows, dv = st.dv;
  po.assign(std::size_t(rows) * dv, 0.0f);
  plse.assign(std::size_t(rows), 0.0f);
  // l of every row (1 for the degenerate ones, whose results are not used), then 1/l and log l.
  const std::size_t n = std::size_t(rows);
  std::vector<float> l(n), inv(n), lg(n);
  std::vector<char> degenerate(n);
  for (int r = 0; r < rows; ++r) {
    const float v = row_sum_total(st, r, p.softmax.row_sum);
    degenerate[std::size_t(r)] = v == 0.0f || v != v;
    l[std::size_t(r)] = degenerate[std::size_t(r)] ? 1.0f : v;
  }
  fm.rcp(l.data(), l.size(), inv.data());
  if (b2) {
    fm.log2(l.data(), l.size(), lg.data());
  } else {
    fm.fast_log(l.data(), l.size(), lg.data());
  }
  for (int r = 0; r < rows; ++r) {
    const bool bad = degenerate[std::size_t(r)] != 0;
    const float iv = bad ? 1.0f : inv[std::size_t(r)];
    for (int c = 0; c < dv; ++c) po[std::size_t(r) * dv + c] = st.o_row(r)[c] * iv;
    const float m = st.m[std::size_t(r)];
    plse[std::size_t(r)] = bad ? -kInfF
                           : b2 ? std::fma(m, scale_log2, lg[std::size_t(r)])
                                : std::fma(m, sm_f, lg[std::size_t(r)]);
  }
}

// flashinfer state_t: o = 0, m = -5e4, d = 1; merge(v_i, s_i, 1) in split order; then
// o = __fdividef(o, d).
void reduce_flashinfer(const std::vector<std::vector<float>>& po,
                       const std::vector<std::vector<float>>& plse, int r, int dv,
                       const SplitMath& fm, float* acc) {
  float m = -5e4f, d = 1.0f;
  for (std::size_t k = 0; k < po.size(); ++k) {
    const float s_i = plse[k][std::size_t(r)];
    const float m_prev = m;
    m = std::max(m_prev, s_i);
    const float a = fm.exp2(m_prev - m), b = fm.exp2(s_i - m);
    d = d * a + b;
    for (int c = 0; c < dv; ++c) acc[c] = acc[c] * a + po[k][std::size_t(r) * dv + c] * b;
  }
  for (int c = 0; c < dv; ++c) acc[c] = fm.exact ? acc[c] / d : div_approx_ftz(acc[c], d);
}

// ORT lean_fwd_kernel.h host reduction / FA2 combine_attn_seqk_parallel (natural base), FlashMLA
// combine (base 2), for each of `rows` rows: lse_max (0 when -inf), Σ exp(lse_i − lse_max) over
// `lanes` threads (lane j adds splits j, j + R, ... in order, then an xor butterfly of FADDs),
// lse_logsum = log(Σ) + lse_max (INF when Σ is 0 or NaN), scale_i = exp(lse_i − lse_logsum),
// O = Σ scale_i · O_i in split order (FFMA). po[k]: split k's rows × dv values, plse[k] its rows'
// LSEs; acc: rows × dv, zero on entry; lse_out: rows values or null. The rows are independent:
// their exponentials and logarithms are evaluated together.
void reduce_lse(const std::vector<std::vector<float>>& po, const std::vector<std::vector<float>>& plse,
                int rows, int dv, int lanes, bool b2, const SplitMath& fm, float* acc,
                float* lse_out = nullptr) {
  const std::size_t nsplit = po.size(), R = std::size_t(rows);
  std::vector<float> mx(R, -kInfF), x(nsplit * R), e(nsplit * R), sum(R), lg(R), logsum(R);
  for (std::size_t k = 0; k < nsplit; ++k)
    for (std::size_t r = 0; r < R; ++r) mx[r] = std::max(mx[r], plse[k][r]);
  for (float& m : mx)
    if (m == -kInfF) m = 0.0f;
  const auto exps = [&] {
    if (b2) {
      fm.exp2(x.data(), x.size(), e.data());
    } else {
      fm.exp_nat(x.data(), x.size(), e.data());
    }
  };
  for (std::size_t k = 0; k < nsplit; ++k)
    for (std::size_t r = 0; r < R; ++r) x[k * R + r] = plse[k][r] - mx[r];
  exps();
  const std::size_t L = std::size_t(lanes);
  std::vector<float> lane(L), nx(L);
  for (std::size_t r = 0; r < R; ++r) {
    std::fill(lane.begin(), lane.end(), 0.0f);
    for (std::size_t k = 0; k < nsplit; ++k) {
      float& a = lane[k % std::size_t(lanes)];
      a = a + e[k * R + r];
    }
    for (int off = lanes / 2; off >= 1; off /= 2) {
      for (int j = 0; j < lanes; ++j) nx[std::size_t(j)] = lane[std::size_t(j)] + lane[std::size_t(j ^ off)];
      lane.swap(nx);
    }
    sum[r] = lane[0];
  }
  std::vector<float> arg(R);
  for (std::size_t r = 0; r < R; ++r) arg[r] = (sum[r] == 0.0f || sum[r] != sum[r]) ? 1.0f : sum[r];
  if (b2) {
    fm.log2(arg.data(), R, lg.data());
  } else {
    fm.log_nat(arg.data(), R, lg.data());
  }
  for (std::size_t r = 0; r < R; ++r) {
    logsum[r] = (sum[r] == 0.0f || sum[r] != sum[r]) ? kInfF : lg[r] + mx[r];
    if (lse_out) lse_out[r] = logsum[r];
  }
  for (std::size_t k = 0; k < nsplit; ++k)
    for (std::size_t r = 0; r < R; ++r) x[k * R + r] = plse[k][r] - logsum[r];
  exps();
  for (std::size_t r = 0; r < R; ++r) {
    float* a = acc + r * std::size_t(dv);
    for (std::size_t k = 0; k < nsplit; ++k) {
      const float sc = e[k * R + r];
      const float* ok = po[k].data() + r * std::size_t(dv);
      for (int c = 0; c < dv; ++c) a[c] = std::fma(sc, ok[c], a[c]);
    }
  }
}

LeanResult run_plan(const AttentionInput& in, const LeanOptions& o, const Pipeline& p,
                    LeanPlan plan, bool keep_partials) {
  const AttentionShape& s = in.shape;
  LeanResult res;
  res.plan = std::move(plan);
  LeanPlan& pl = res.plan;
  const SplitMath fm{o.exp == LeanExp::kExact, fast_math_of(o)};
  const int lanes = combine_lanes(o.style, pl.num_splits, s.head_dim);
  const int dv = s.head_dim_v;

  // One prepared input per batch entry of a ragged batch (its own context length), else one.
  std::vector<PreparedInput> prep;
  if (o.len_kv_per_batch.empty()) {
    prep.push_back(prepare(in, p));
  } else {
    for (int b = 0; b < s.batch; ++b) {
      AttentionInput sub;
      sub.shape = s;
      sub.shape.batch = 1;
      sub.shape.len_kv = o.len_kv_per_batch[std::size_t(b)];
      sub.causal = false;
      sub.sm_scale = in.scale();
      sub.dtype = in.dtype;
      const std::size_t qn = std::size_t(s.heads_q) * s.len_q * s.head_dim;
      sub.q.assign(in.q.begin() + std::ptrdiff_t(b * qn), in.q.begin() + std::ptrdiff_t((b + 1) * qn));
      for (int h = 0; h < s.heads_kv; ++h) {
        const std::size_t base = (std::size_t(b) * s.heads_kv + h) * s.len_kv * s.head_dim;
        const std::size_t n = std::size_t(sub.shape.len_kv) * s.head_dim;
        sub.k.insert(sub.k.end(), in.k.begin() + std::ptrdiff_t(base),
                     in.k.begin() + std::ptrdiff_t(base + n));
        sub.v.insert(sub.v.end(), in.v.begin() + std::ptrdiff_t(base),
                     in.v.begin() + std::ptrdiff_t(base + n));
      }
      prep.push_back(prepare(sub, p));
    }
  }
  const bool ragged = !o.len_kv_per_batch.empty();

  // The blocks in the kernel's order, each with its segments by split.
  std::vector<BlockRef> blocks;
  std::map<long long, std::size_t> index;
  for (const LeanSegment& g : pl.segments) {
    const long long key = block_key(pl, g.batch, g.head, g.m_block);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, blocks.size()).first;
      blocks.push_back(BlockRef{g.batch, g.head, g.m_block, {}});
    }
    blocks[it->second].segs.push_back(&g);
  }
  std::vector<std::size_t> first_partial(blocks.size() + 1, 0);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    std::sort(blocks[i].segs.begin(), blocks[i].segs.end(),
              [](const LeanSegment* a, const LeanSegment* b) { return a->split < b->split; });
    const std::size_t n = blocks[i].segs.size();
    first_partial[i + 1] = first_partial[i] + (keep_partials && n > 1 ? n : 0);
  }
  res.o.assign(s.o_size(), 0.0);
  if (keep_partials) res.partials.resize(first_partial.back());

  const double sm = in.scale();
  const float sm_f = float(sm);
  const float scale_log2 = float(double(sm_f) * kLog2e);
  ExpModel<float> em;  // the merge of reduce=paper: the pipeline's exp2 with scale_log2
  em.kind = ExpKind::kExp2;
  em.scale = scale_log2;
  em.fn = p.exp.fn;

#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bi = 0; bi < std::int64_t(blocks.size()); ++bi) {
      const BlockRef& B = blocks[std::size_t(bi)];
      const PreparedInput& pin = prep[ragged ? std::size_t(B.batch) : 0];
      const int tb = ragged ? 0 : B.batch;  // the batch index inside pin
      const std::vector<Tile> tiles = tiles_of_block(pl, s, tb, B.head, B.m_block);
      const std::size_t nsplit = B.segs.size();
      // Every split's row states, one per (split, tile).
      std::vector<std::vector<TileState<float>>> st(nsplit, std::vector<TileState<float>>(tiles.size()));
      for (std::size_t k = 0; k < nsplit; ++k)
        for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
          st[k][ti].reset(tiles[ti].rows, dv);
          attend_tile<float>(pin, p, tiles[ti], B.segs[k]->n_begin, B.segs[k]->n_end, st[k][ti], *ws);
        }
      auto out_row = [&](const Tile& t, int i) {
        return res.o.data() +
               ((std::size_t(B.batch) * s.heads_q + t.head) * s.len_q + std::size_t(t.q_begin + i)) * dv;
      };
      // One CTA covers the block (host and finisher at once): FA2's own epilogue
      // (normalize_softmax_lse<Split=false>, O · (1/l) cast to the output type). reduce=paper:
      // Algorithm 2 lines 27-38, the host's (O, m, l) absorbs the CTAs after it one by one, then
      // the same epilogue.
      if (nsplit == 1 || o.reduce == LeanReduce::kPaper) {
        std::vector<double> ob, lse_buf;
        for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
          const Tile& t = tiles[ti];
          TileState<float>& host = st[0][ti];
          for (std::size_t k = 1; k < nsplit; ++k)
            for (int i = 0; i < t.rows; ++i) merge_row(host, i, st[k][ti], i, p.softmax.row_sum, em);
          ob.assign(std::size_t(t.rows) * dv, 0.0);
          lse_buf.assign(std::size_t(t.rows), 0.0);
          finish_tile<float>(pin, p, t, host, ob.data(), lse_buf.data());
          for (int i = 0; i < t.rows; ++i)
            std::copy(ob.begin() + std::ptrdiff_t(i) * dv, ob.begin() + std::ptrdiff_t(i + 1) * dv,
                      out_row(t, i));
        }
        continue;
      }
      // The kernel's path: every split normalized with its LSE, then the host's reduction.
      const bool b2 = base2(o.style);
      int rows = 0;
      for (const Tile& t : tiles) rows += t.rows;
      std::vector<std::vector<float>> po(nsplit), pls(nsplit);
      for (std::size_t k = 0; k < nsplit; ++k) {
        std::vector<float> tile_o, tile_l;
        for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
          normalize_split(st[k][ti], p, fm, b2, sm_f, scale_log2, tile_o, tile_l);
          po[k].insert(po[k].end(), tile_o.begin(), tile_o.end());
          pls[k].insert(pls[k].end(), tile_l.begin(), tile_l.end());
        }
        if (keep_partials) {
          LeanPartial& P = res.partials[first_partial[std::size_t(bi)] + k];
          P.batch = B.batch;
          P.head = B.head;
          P.m_block = B.m_block;
          P.split = B.segs[k]->split;
          P.cta = B.segs[k]->cta;
          P.o = po[k];
          P.lse = pls[k];
        }
      }
      std::vector<float> acc(std::size_t(rows) * dv, 0.0f);
      if (o.style == SplitStyle::kFlashInfer) {
        for (int r = 0; r < rows; ++r)
          reduce_flashinfer(po, pls, r, dv, fm, acc.data() + std::size_t(r) * dv);
      } else {
        reduce_lse(po, pls, rows, dv, lanes, b2, fm, acc.data());
      }
      round_array(p.out.enc, acc.data(), acc.size(), acc.data(), kCudaRn);
      int r = 0;
      for (const Tile& t : tiles) {
        for (int i = 0; i < t.rows; ++i, ++r) {
          const float* a = acc.data() + std::size_t(r) * dv;
          std::copy(a, a + dv, out_row(t, i));
        }
      }
    }
  }
  return res;
}

}  // namespace

std::vector<double> reassociation_bound(const AttentionInput& in, const LeanOptions& o,
                                        const LeanPlan& plan) {
  const AttentionShape& s = in.shape;
  const int d = s.head_dim, dv = s.head_dim_v, g = s.group();
  constexpr double u = 0x1p-24;
  auto rnd = [&](float x) { return round_to(o.dtype, x, kCudaRn); };
  // Splits and the largest segment per (batch, kernel head, m-block).
  std::map<long long, std::pair<int, int>> split_info;
  for (const LeanSegment& sg : plan.segments) {
    auto& e = split_info[block_key(plan, sg.batch, sg.head, sg.m_block)];
    e.first++;
    e.second = std::max(e.second, sg.n_end - sg.n_begin);
  }
  const double scale = in.scale();
  const double sl2 = scale * kLog2e;
  std::vector<double> bound(s.o_size(), 0.0);
#pragma omp parallel for schedule(dynamic, 1)
  for (long long row = 0; row < (long long)s.batch * s.heads_q * s.len_q; ++row) {
    const int i = int(row % s.len_q), h = int((row / s.len_q) % s.heads_q),
              b = int(row / s.len_q / s.heads_q);
    const int lk = o.len_kv_per_batch.empty() ? s.len_kv : o.len_kv_per_batch[std::size_t(b)];
    const int kh = b * s.heads_kv + h / g;
    const auto it = split_info.find(block_key_of_row(plan, s, row));
    const int splits = it == split_info.end() ? 1 : it->second.first;
    std::vector<double> sc(std::size_t(lk), 0.0);
    double m = -1e300;
    for (int j = 0; j < lk; ++j) {
      if (in.causal && j > i + s.len_kv - s.len_q) {
        sc[std::size_t(j)] = -1e300;
        continue;
      }
      double acc = 0;
      for (int c = 0; c < d; ++c)
        acc += double(rnd(in.q[(std::size_t(b * s.heads_q + h) * s.len_q + i) * d + c])) *
               double(rnd(in.k[(std::size_t(kh) * s.len_kv + j) * d + c]));
      sc[std::size_t(j)] = acc;
      m = std::max(m, acc);
    }
    double l = 0, xmax = 0;
    std::vector<double> w(std::size_t(dv), 0.0), ov(std::size_t(dv), 0.0);
    for (int j = 0; j < lk; ++j) {
      if (sc[std::size_t(j)] <= -1e299) continue;
      const double x = (sc[std::size_t(j)] - m) * sl2;
      const double pj = std::exp2(x);
      xmax = std::max(xmax, std::min(150.0, -x));
      l += pj;
      for (int c = 0; c < dv; ++c) {
        const double vv = double(rnd(in.v[(std::size_t(kh) * s.len_kv + j) * dv + c]));
        w[std::size_t(c)] += pj * std::fabs(vv);
        ov[std::size_t(c)] += pj * vv;
      }
    }
    if (l == 0) continue;
    const double n16 = std::ceil(lk / 16.0), tiles = std::ceil(double(lk) / plan.block_n);
    const double lse = std::fabs(m * scale) + std::log(l);
    // P is rounded to the input format relative to each split's own max: u_p per p on W.
    const double up = o.dtype == Encoding::kBf16 ? 0x1p-8 : 0x1p-11;
    const double k_acc = 2 * n16 + 8 + 2 * up / u;                      // P·V chain, on W
    const double k_all = lk / 4.0 + 2 + (4 + std::log(2.0) * xmax) * (tiles + 2) +
                         splits * (8 + 2 * lse) + 8;                    // on W + |O|
    for (int c = 0; c < dv; ++c) {
      const double wc = w[std::size_t(c)] / l, oc = std::fabs(ov[std::size_t(c)] / l);
      bound[std::size_t(row) * dv + c] = u * (k_acc * wc + k_all * (wc + oc));
    }
  }
  return bound;
}

std::string describe(const LeanOptions& o) {
  const char* style = o.style == SplitStyle::kLean            ? "lean"
                      : o.style == SplitStyle::kFlashDecoding ? "flashdecoding"
                      : o.style == SplitStyle::kFlashInfer    ? "flashinfer"
                                                              : "flashmla";
  return std::string(style) + " sms=" + std::to_string(o.sms) + " splits=" +
         std::to_string(o.splits) + " dtype=" + encoding_name(o.dtype) +
         " exp=" + (o.exp == LeanExp::kExact ? "exact" : "approx") +
         " reduce=" + (o.reduce == LeanReduce::kPaper ? "paper" : "kernel") +
         " product=" + dot_model_name(o.product) + " rowsum=" + (o.rowsum_fma ? "fma" : "rounded");
}

}  // namespace attnsim

namespace attnsim {

namespace {

// FA3's FlashAttnFwdCombine (lean.hpp SplitCombine::kFa3) for one row.
float reduce_fa3(const std::vector<const float*>& o, const std::vector<float>& lse, int dv,
                 float* acc) {
  constexpr float kLog2ef = 1.44269502162933349609f;  // 0x3FB8AA3B
  constexpr float kLn2f = 0.693147182464599609375f;   // 0x3F317218
  const std::size_t n = o.size();
  float mx = -kInfF;
  for (float x : lse) mx = std::max(mx, x);
  if (mx == -kInfF) mx = 0.0f;
  std::vector<float> e(n);
  for (std::size_t s = 0; s < n; ++s)
    e[s] = Ex2ApproxFtz::h100()(fmul_ftz(fadd_ftz(lse[s], -mx), kLog2ef));  // __expf
  // One lane per split (splits s, s + 32, ... past 32), from 0, then the warp's butterfly.
  float lane[32] = {};
  for (std::size_t s = 0; s < n; ++s) lane[s % 32] = fadd_ftz(lane[s % 32], e[s]);
  for (int off = 16; off >= 1; off /= 2) {
    float next[32];
    for (int t = 0; t < 32; ++t) next[t] = fadd_ftz(lane[t], lane[t ^ off]);
    std::copy(next, next + 32, lane);
  }
  const float sum = lane[0];
  const bool bad = sum == 0.0f || sum != sum;
  // logf(sum) + lse_max under fast math: lg2.approx.ftz, then one FFMA.FTZ with ln 2.
  const float lse_out =
      fma_f32(Lg2ApproxFtz::h100()(bad ? 1.0f : sum), kLn2f, mx, Round::kNearestEven, true);
  const float inv = bad ? 0.0f : RcpApproxFtz::h100()(sum);
  for (std::size_t s = 0; s < n; ++s) {
    const float w = fmul_ftz(e[s], inv);
    if (!(w > 0.0f)) continue;
    for (int c = 0; c < dv; ++c) acc[c] = fma_f32(w, o[s][c], acc[c], Round::kNearestEven, true);
  }
  return lse_out;
}

}  // namespace

float combine_split_row(SplitCombine c, int kernel_head_dim, const std::vector<const float*>& o,
                        const std::vector<float>& lse, int dv, float* out) {
  if (c == SplitCombine::kCudnnLean)
    throw std::invalid_argument("combine_split_row: kCudnnLean merges unnormalized partials (combine_lean_row)");
  std::fill(out, out + dv, 0.0f);
  if (c == SplitCombine::kFa3) return reduce_fa3(o, lse, dv, out);
  // PyTorch's FA2 combine: the FlashDecoding reduction of an IEEE build.
  const int n = int(o.size());
  std::vector<std::vector<float>> po(static_cast<std::size_t>(n)), pl(static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s) {
    po[std::size_t(s)].assign(o[std::size_t(s)], o[std::size_t(s)] + dv);
    pl[std::size_t(s)].assign(1, lse[std::size_t(s)]);
  }
  const SplitMath fm{false, false};
  float lse_out = 0.0f;
  reduce_lse(po, pl, 1, dv, combine_lanes(SplitStyle::kFlashDecoding, n, kernel_head_dim), false,
             fm, out, &lse_out);
  return lse_out;
}

float combine_lean_row(const std::vector<const float*>& o, const std::vector<float>& m_nat,
                       const std::vector<float>& l_s, int dv, float* out) {
  constexpr float kLog2ef = 1.44269502162933349609f;  // 0x3FB8AA3B
  constexpr float kLn2f = 0.693147182464599609375f;   // 0x3F317218
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  // lean_reduction_kernel (cc3c0..cd410 of the recorded SASS): partial 0, then each next split.
  float m = m_nat[0], l = l_s[0];
  std::copy(o[0], o[0] + dv, out);
  for (std::size_t s = 1; s < o.size(); ++s) {
    const float mn = std::max(m, m_nat[s]);  // FMNMX
    float a_s = 0.0f, a = 0.0f;
    if (mn != -kInfF) {
      a_s = ex2(fmul_ftz(fadd_ftz(m_nat[s], -mn), kLog2ef));
      a = ex2(fmul_ftz(fadd_ftz(m, -mn), kLog2ef));
    }
    for (int c = 0; c < dv; ++c)
      out[c] = fma_f32(a, out[c], fmul_ftz(o[s][c], a_s), Round::kNearestEven, true);
    l = fma_f32(a, l, fmul_ftz(l_s[s], a_s), Round::kNearestEven, true);
    m = mn;
  }
  const bool nz = l != 0.0f;
  const float inv = nz ? RcpApproxFtz::h100()(l) : 1.0f;
  for (int c = 0; c < dv; ++c) out[c] = fmul_ftz(inv, out[c]);
  if (!nz) return -kInfF;
  return fma_f32(Lg2ApproxFtz::h100()(l), kLn2f, m, Round::kNearestEven, true);
}

namespace {

// split_kv_attention in the state's type T (an FP64 state: attribution's counterfactuals; the
// partials enter the combine, which is the kernel's FP32 arithmetic, as FP32).
template <class T>
void split_kv_run(const PreparedInput& in, const Pipeline& p, int splits, SplitCombine combine,
                  int kernel_head_dim, SplitPartition partition, PipelineResult& r) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q, dv = s.head_dim_v;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const int n_blocks = (s.len_kv + p.tile.block_kv - 1) / p.tile.block_kv;
  const bool strided = partition == SplitPartition::kStrided;
  const bool lean = combine == SplitCombine::kCudnnLean;
  // A strided partition launches no split past the last block (the grid's split count is the
  // compiled stride).
  const int parts = strided ? std::max(1, std::min(splits, n_blocks)) : splits;
  constexpr float kLn2f = 0.693147182464599609375f;  // FMUL.FTZ immediate of the split epilogue
  // Each split's epilogue: the pipeline's, O kept in FP32 (FA2/FA3 write O_accum in float).
  Pipeline part = p;
  part.out = OutStage{Encoding::kFp32, kCudaRn};
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  // Work items are whole (batch, head, query tile) blocks with all their splits: every output is
  // computed by one item in a fixed order, whatever the thread count.
#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
    TileState<T> st;
    std::vector<double> po, pl;
    std::vector<std::vector<float>> of(static_cast<std::size_t>(splits)), lf(static_cast<std::size_t>(splits));
    std::vector<float> acc(static_cast<std::size_t>(dv));
    std::vector<const float*> rows(static_cast<std::size_t>(splits));
    std::vector<float> lses(static_cast<std::size_t>(splits));
    // kCudnnLean: each split's max (natural-log units) and row sum per row, and O's row total.
    std::vector<std::vector<float>> mf(static_cast<std::size_t>(splits));
    std::vector<T> ot(static_cast<std::size_t>(dv));
    rows.resize(std::size_t(parts));
    lses.resize(std::size_t(parts));
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      Tile t;
      t.head = int((item / q_blocks) % s.heads_q);
      t.batch = int(item / q_blocks / s.heads_q);
      t.q_begin = int(item % q_blocks) * bq;
      t.rows = std::min(bq, s.len_q - t.q_begin);
      for (int k = 0; k < parts; ++k) {
        st.reset(t.rows, dv);
        if (strided) {
          for (int nb = k; nb < n_blocks; nb += splits) attend_tile<T>(in, part, t, nb, nb + 1, st, *ws);
        } else {
          int lo = 0, hi = 0;
          split_block_range(n_blocks, splits, k, &lo, &hi);
          attend_tile<T>(in, part, t, lo, hi, st, *ws);
        }
        if (lean) {
          // cuDNN's split epilogue: m·ln 2 (FMUL.FTZ), l, and O unnormalized, in FP32.
          of[std::size_t(k)].resize(std::size_t(t.rows) * dv);
          lf[std::size_t(k)].resize(std::size_t(t.rows));
          mf[std::size_t(k)].resize(std::size_t(t.rows));
          for (int i = 0; i < t.rows; ++i) {
            mf[std::size_t(k)][std::size_t(i)] = fmul_ftz(float(st.m[std::size_t(i)]), kLn2f);
            lf[std::size_t(k)][std::size_t(i)] = float(row_sum_total(st, i, p.softmax));
            o_row_total(st, i, p.softmax.ftz, ot.data());
            for (int c = 0; c < dv; ++c)
              of[std::size_t(k)][std::size_t(i) * dv + c] = float(ot[std::size_t(c)]);
          }
          continue;
        }
        po.assign(std::size_t(t.rows) * dv, 0.0);
        pl.assign(std::size_t(t.rows), 0.0);
        finish_tile<T>(in, part, t, st, po.data(), pl.data());
        of[std::size_t(k)].assign(po.begin(), po.end());
        lf[std::size_t(k)].resize(std::size_t(t.rows));
        for (int i = 0; i < t.rows; ++i) {
          // A split without a key for the row: the kernels write LSE -inf (the pipeline's
          // epilogue marks an empty row +inf).
          const double l = pl[std::size_t(i)];
          lf[std::size_t(k)][std::size_t(i)] = std::isinf(l) && l > 0 ? -kInfF : float(l);
        }
      }
      for (int i = 0; i < t.rows; ++i) {
        std::vector<float> ms, ls;
        for (int k = 0; k < parts; ++k) {
          rows[std::size_t(k)] = of[std::size_t(k)].data() + std::size_t(i) * dv;
          lses[std::size_t(k)] = lf[std::size_t(k)][std::size_t(i)];
          if (lean) ms.push_back(mf[std::size_t(k)][std::size_t(i)]);
        }
        const float lse = lean ? combine_lean_row(rows, ms, lses, dv, acc.data())
                               : combine_split_row(combine, kernel_head_dim, rows, lses, dv, acc.data());
        const std::size_t row =
            (std::size_t(t.batch) * s.heads_q + t.head) * s.len_q + std::size_t(t.q_begin + i);
        for (int c = 0; c < dv; ++c) {
          const float x = acc[std::size_t(c)];
          r.o[row * dv + c] = p.out.enc == Encoding::kFp64 ? double(x) : round_to(p.out.enc, x, p.out.cast);
        }
        r.lse[row] = lse;
      }
    }
  }
}

}  // namespace

PipelineResult split_kv_attention(const PreparedInput& in, const Pipeline& p, int splits,
                                  SplitCombine combine, int kernel_head_dim,
                                  SplitPartition partition) {
  if (splits <= 1) return run_pipeline(in, p);
  validate(p);
  PipelineResult r;
  r.o.assign(in.shape.o_size(), 0.0);
  r.lse.assign(std::size_t(in.shape.batch) * in.shape.heads_q * in.shape.len_q, 0.0);
  if (p.softmax.state == StateType::kFp32) {
    split_kv_run<float>(in, p, splits, combine, kernel_head_dim, partition, r);
  } else {
    split_kv_run<double>(in, p, splits, combine, kernel_head_dim, partition, r);
  }
  return r;
}

}  // namespace attnsim
