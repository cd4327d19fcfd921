// Test helper: one random case of each stage kernel against its reference, bit for bit (NaN
// payloads aside, stage_cases.hpp), shared by the quick and the long tests. The kernels of the
// active ISA are checked (set_isa): the CUDA-core products choose inside, and the softmax
// arithmetic's kernel is the active set's entry of the dispatch table (kernels.hpp), called here
// directly for every case, those it sends to its reference included (only for sets that have one).
#pragma once

#include "sim/pipeline/stages/kernels.hpp"
#include "tests/sim/pipeline/stages/stage_cases.hpp"

namespace attnsim::stagetest {

inline DotModel::Kind any_cuda_core_kind(Values& g) {
  static const DotModel::Kind kKinds[] = {DotModel::kFp32, DotModel::kFp32, DotModel::kFp64,
                                          DotModel::kExact};
  return kKinds[g.uniform(0, 3)];
}

// Whether the softmax arithmetic's AVX-512 kernels are checked (else the AVX2 ones).

inline std::string where(const BlockCase& c, const char* stage, const char* detail) {
  return std::string(stage) + " " + detail + " (" + isa_name(active_isa()) + ")" +
         " rows=" + std::to_string(c.b.rows) + " cols=" + std::to_string(c.b.cols) +
         " bk=" + std::to_string(c.b.bk) + " d=" + std::to_string(c.in.shape.head_dim) +
         " dv=" + std::to_string(c.in.shape.head_dim_v) + (c.in.causal ? " causal" : "");
}

// QKᵀ: qk_cuda_core against qk_ref on one random block.
template <class T>
void check_qk(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  QkStage st;
  st.dot.kind = any_cuda_core_kind(g);
  TileBuffers<T> ref, got;
  ref.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  got.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  for (std::size_t i = 0; i < ref.acc.size(); ++i) ref.acc[i] = got.acc[i] = T(1234.5);
  qk_ref(st, c.in, c.ti, c.b, ref);
  qk_cuda_core(st, c.in, c.ti, c.b, got);
  t.check(ref.acc.data(), got.acc.data(), ref.acc.size(),
          where(c, "qk", dot_model_name(st.dot).c_str()));
}

// P·V: pv_cuda_core against pv_ref (into C or a chunk, P's per-row scale, V's per-block scales, an
// FP64 state's FP64 P).
template <class T>
void check_pv(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  const int rows = c.b.rows, bk = c.b.bk, dv = c.in.shape.head_dim_v;
  PvStage st;
  st.dot.kind = any_cuda_core_kind(g);
  st.acc = g.chance(0.5) ? PvAccumulate::kChunk : PvAccumulate::kIntoC;
  PStage ps;
  if (std::is_same_v<T, double> && g.chance(0.5)) ps.enc = Encoding::kFp64;
  const bool chunk = st.acc == PvAccumulate::kChunk;
  if (chunk && g.chance(0.3)) ps.scale = PScale::kRow;
  if (chunk && g.chance(0.3)) {
    PreparedOperand& v = c.in.v;
    v.groups = GroupMap{Granularity::kPerBlockChannel, bk};
    v.groups_per_slice = v.groups.count(v.tokens, dv);
    v.scales.resize(std::size_t(v.groups_per_slice));
    for (float& s : v.scales)
      s = std::ldexp(1.0f + float(g.uniform(0, 1000)) / 999.0f, g.uniform(-10, 3));
    v.key_dependent_scale = true;
  }
  TileBuffers<T> ref;
  ref.size(rows, bk, dv);
  // P: mostly probabilities in [0, 1], with the case's mix of troubles.
  const Mix sprinkle = g.any_mix();
  const double rate = g.chance(0.5) ? 0.0 : 0.05;
  for (std::size_t i = 0; i < ref.pf.size(); ++i) {
    const float x =
        g.chance(rate) ? g.draw(sprinkle) : std::exp2(-std::abs(g.draw(Mix::kNormal)) * 8);
    ref.pf[i] = x;
    // An FP64 P carries bits an FP32 one cannot hold.
    ref.pc[i] = T(double(x) * (1.0 + std::ldexp(double(g.uniform(-1000, 1000)), -40)));
  }
  for (float& s : ref.p_scale)
    s = std::ldexp(1.0f + float(g.uniform(0, 1000)) / 999.0f, g.uniform(-9, 0));
  for (T& x : ref.chunk) x = T(-77.0);
  TileState<T> sref;
  sref.reset(rows, dv);
  {
    const Mix m = g.chance(0.5) ? Mix::kNormal : g.any_mix();
    for (T& x : sref.o) x = T(g.draw(m));
    if (std::is_same_v<T, double>)
      for (T& x : sref.o) x = x * T(1.0 + std::ldexp(double(g.uniform(-1000, 1000)), -40));
  }
  TileBuffers<T> got = ref;
  TileState<T> sgot = sref;
  pv_ref(st, ps, c.in, c.ti, c.b, sref, ref);
  pv_cuda_core(st, ps, c.in, c.ti, c.b, sgot, got);
  const std::string w =
      where(c, "pv",
            (dot_model_name(st.dot) + (chunk ? " chunk" : " into_c") +
             (ps.enc == Encoding::kFp64 ? " p=fp64" : "") +
             (ps.scale != PScale::kNone ? " p_scale" : "") + (c.in.v.scaled() ? " v_scale" : ""))
                .c_str());
  t.check(sref.o.data(), sgot.o.data(), sref.o.size(), w + " O");
  if (chunk) t.check(ref.chunk.data(), got.chunk.data(), ref.chunk.size(), w + " chunk");
}

// Per-token scales of an operand (some of them troublesome).
inline void scale_per_token(Values& g, PreparedOperand& o) {
  o.groups = GroupMap{Granularity::kPerToken, 1};
  o.groups_per_slice = o.tokens;
  o.scales.resize(std::size_t(o.slices) * o.tokens);
  const Mix m = g.chance(0.8) ? Mix::kNormal : g.any_mix();
  for (float& x : o.scales) x = std::abs(g.draw(m)) * 0.01f;
}

inline ExpConstants<float> random_constants(Values& g) {
  ExpConstants<float> kc;
  kc.c = g.chance(0.5) ? float(1.44269504088896340736 / std::sqrt(128.0))
                       : std::abs(g.draw(Mix::kNormal));
  kc.c_nat = kc.c * 0.7f;
  return kc;
}

// Scores: scores_avx512 / scores_avx2 against scores_ref (dequantization by per-token Q and K
// scales, fold with a masked tail, ΔS, mask values).
inline void check_scores(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  SoftmaxStage st;
  // kDescale: FA3 FP8's raw accumulator with the row's descaled coefficient.
  st.dequant = g.chance(0.4) ? Dequant::kFold : g.chance(0.25) ? Dequant::kDescale : Dequant::kScore;
  st.ftz = g.chance(0.3);  // the descaled coefficient's multiplies only
  st.dequant_tail = g.uniform(0, 2);
  if (g.chance(0.5)) st.mask_value = -5e6;
  if (g.chance(0.5)) scale_per_token(g, c.in.q);
  if (g.chance(0.5)) scale_per_token(g, c.in.k);
  if (g.chance(0.3)) {
    c.in.q.mean_block = g.uniform(1, 64);
    c.in.q.means_per_slice = (c.in.shape.len_q + c.in.q.mean_block - 1) / c.in.q.mean_block;
    c.in.delta_s.resize(std::size_t(c.in.shape.heads_q) * c.in.q.means_per_slice *
                        c.in.shape.len_kv);
    g.fill(c.in.delta_s.data(), c.in.delta_s.size(), Mix::kNormal, g.any_mix(), 0.05);
  }
  ExpConstants<float> kc = random_constants(g);
  // scale_log2=score (FlexAttention, the CUTLASS fmha): every score times the scale first.
  if (g.chance(0.3)) kc.score_scale = float(g.uniform(1, 1000)) / 997.0f;
  TileBuffers<float> ref;
  ref.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  g.fill(ref.acc.data(), ref.acc.size(), g.chance(0.5) ? Mix::kNormal : g.any_mix(), g.any_mix(),
         0.05);
  for (float& x : ref.s) x = 99.0f;
  for (float& x : ref.coef) x = 98.0f;
  TileBuffers<float> got = ref;
  scores_ref(st, c.in, c.ti, c.b, kc, ref);
  stage_kernels().scores(st, c.in, c.ti, c.b, kc, got);
  const std::string w = where(c, "scores", st.dequant == Dequant::kFold      ? "fold"
                                           : st.dequant == Dequant::kDescale ? "descale"
                                                                             : "score");
  t.check(ref.s.data(), got.s.data(), ref.s.size(), w + " s");
  t.check(ref.coef.data(), got.coef.data(), ref.coef.size(), w + " coef");
}

// The online-softmax step: softmax_step_avx512 / _avx2 against softmax_step_ref (raw or scaled
// max, fold and descaled coefficients, FMA or not, base e, offsets, snapped max; empty rows, masked
// keys, ±0 maxima).
inline void check_softmax_step(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  SoftmaxStage st;
  st.max_domain = g.chance(0.4) ? MaxDomain::kScaled : MaxDomain::kRaw;
  // kDescale: the row's coefficient is FA3 FP8's descaled one, coef[row][0] (scores_ref's).
  st.dequant = g.chance(0.3) ? Dequant::kFold : g.chance(0.2) ? Dequant::kDescale : Dequant::kScore;
  st.fma = g.chance(0.7);
  st.base = g.chance(0.2) ? ExpKind::kExp : ExpKind::kExp2;
  st.max_offset = g.chance(0.3) ? 8.807 : 0.0;
  // Triton's M = 0 carry (vLLM) and a block without the FMA contraction (FlexAttention's).
  st.empty_max = g.chance(0.3) ? EmptyMax::kZero : EmptyMax::kKeep;
  // .ftz state arithmetic (FA3, cuDNN): every state operation flushed, the FLT_MIN edge included.
  st.ftz = g.chance(0.4);
  c.b.fuse = g.chance(0.8);
  static const MaxRound kRounds[] = {MaxRound::kNone, MaxRound::kNone, MaxRound::kCeil,
                                     MaxRound::kNearest};
  const MaxRound mr = kRounds[g.uniform(0, 3)];
  const ExpConstants<float> kc = random_constants(g);
  TileBuffers<float> ref;
  ref.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  const Mix base = g.chance(0.5) ? Mix::kNormal : g.any_mix();
  const Mix sprinkle = g.any_mix();
  for (int i = 0; i < c.b.rows; ++i) {
    // Rows of zeros (±0 maxima), rows with masked tails, rows of any mix.
    const int kind = g.uniform(0, 5);
    float* s = ref.s.data() + std::size_t(i) * c.b.bk;
    for (int j = 0; j < c.b.bk; ++j) {
      s[j] = kind == 0 ? (g.chance(0.5) ? 0.0f : -0.0f) : g.draw(g.chance(0.05) ? sprinkle : base);
      if (kind == 1 && j > c.b.cols / 2) s[j] = -std::numeric_limits<float>::infinity();
      if (kind == 3) s[j] = -std::numeric_limits<float>::infinity();  // a fully masked row
      if (kind == 2 && j > c.b.cols / 3) s[j] = -5e6f;
      if (kind == 0 && g.chance(0.2)) s[j] = -std::abs(g.draw(base));
    }
  }
  for (float& x : ref.coef) x = std::abs(g.draw(Mix::kNormal)) * 0.1f;
  for (float& x : ref.x) x = 97.0f;
  TileState<float> sref;
  sref.reset(c.b.rows, c.in.shape.head_dim_v);
  for (float& m : sref.m)
    if (g.chance(0.6)) m = g.draw(g.chance(0.8) ? Mix::kNormal : g.any_mix());
  if (st.ftz && g.chance(0.5)) {
    // Scores a few ulps above FLT_MIN (or subnormal) and coefficients just below 1: products and
    // sums at the flush edge.
    for (float& x : ref.s)
      if (g.chance(0.3))
        x = (g.chance(0.5) ? -1.0f : 1.0f) * (g.chance(0.2) ? 0x1p-130f : 0x1p-126f) *
            (1.0f + 0x1p-23f * float(g.uniform(0, 5)));
    for (float& x : ref.coef)
      if (g.chance(0.5)) x = 1.0f - 0x1p-24f * float(g.uniform(0, 6));
  }
  TileBuffers<float> got = ref;
  TileState<float> sgot = sref;
  softmax_step_ref(st, mr, c.b, kc, sref, ref);
  stage_kernels().softmax_step(st, mr, c.b, kc, sgot, got);
  const std::string w = where(c, "softmax_step", "");
  t.check(ref.x.data(), got.x.data(), ref.x.size(), w + " x");
  t.check(ref.alpha_arg.data(), got.alpha_arg.data(), ref.alpha_arg.size(), w + " alpha_arg");
  t.check(sref.m.data(), sgot.m.data(), sref.m.size(), w + " m");
  EXPECT_EQ(ref.first, got.first) << w;
}

// The exp stage: exp_stage (the array kernels of the active set) against exp_ref for the exp models
// it has array forms of (ex2.approx{.ftz}, Triton's tl.exp = ex2.approx of fl(x·log2 e), exact),
// over arguments of any mix, -inf (masked keys) and the subnormal-result range.
inline void check_exp(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  static const ExpFn kFns[] = {ExpFn::kEx2ApproxFtz, ExpFn::kEx2Approx, ExpFn::kEx2ApproxLog2e,
                               ExpFn::kExact};
  ExpStage st;
  st.fn = kFns[g.uniform(0, 3)];
  const ExpKind base = st.fn == ExpFn::kEx2ApproxLog2e || (st.fn == ExpFn::kExact && g.chance(0.5))
                           ? ExpKind::kExp
                           : ExpKind::kExp2;
  TileBuffers<float> ref;
  ref.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  const Mix base_mix = g.chance(0.5) ? Mix::kNormal : g.any_mix();
  for (float& x : ref.x) {
    x = -std::abs(g.draw(base_mix)) * (g.chance(0.1) ? 64.0f : 1.0f);
    if (g.chance(0.05)) x = -std::numeric_limits<float>::infinity();
    if (g.chance(0.05)) x = -float(g.uniform(120, 160));  // subnormal and zero results
  }
  for (float& a : ref.alpha_arg) a = -std::abs(g.draw(base_mix));
  for (float& p : ref.p) p = 96.0f;
  TileBuffers<float> got = ref;
  exp_ref(st, base, c.b, ref);
  exp_stage(st, base, c.b, got);
  const std::string w = where(c, "exp", std::to_string(int(st.fn)).c_str());
  t.check(ref.p.data(), got.p.data(), ref.p.size(), w + " p");
  t.check(ref.alpha.data(), got.alpha.data(), ref.alpha.size(), w + " alpha");
}

// The row sum: row_sum_avx512 / _avx2 against row_sum_ref for every model but the tensor core's.
inline void check_row_sum(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  static const RowSum kModels[] = {RowSum::kQuad, RowSum::kSingle, RowSum::kSageLanes,
                                   RowSum::kTritonTree, RowSum::kQuadFma};
  SoftmaxStage st;
  st.row_sum = kModels[g.uniform(0, 4)];
  st.ftz = g.chance(0.3);  // changes nothing these row sums compute
  // SageAttention2's lanes and Triton's tree work on whole 16- and 8-key tiles (couplings.cpp).
  if ((st.row_sum == RowSum::kSageLanes && c.b.bk % 16) ||
      (st.row_sum == RowSum::kTritonTree && c.b.bk % 8))
    st.row_sum = RowSum::kQuad;
  TileBuffers<float> ref;
  ref.size(c.b.rows, c.b.bk, c.in.shape.head_dim_v);
  const Mix sprinkle = g.any_mix();
  const double rate = g.chance(0.5) ? 0.0 : 0.05;
  for (int i = 0; i < c.b.rows; ++i)
    for (int j = 0; j < c.b.bk; ++j)
      ref.p[std::size_t(i) * c.b.bk + j] =
          j >= c.b.cols ? 0.0f
                        : (g.chance(rate) ? g.draw(sprinkle)
                                          : std::exp2(-std::abs(g.draw(Mix::kNormal)) * 8));
  for (float& a : ref.alpha)
    a = g.chance(0.3)   ? 1.0f
        : g.chance(0.9) ? std::exp2(-std::abs(g.draw(Mix::kNormal)) * 4)
                        : g.draw(g.any_mix());
  TileState<float> sref;
  sref.reset(c.b.rows, c.in.shape.head_dim_v);
  for (float& l : sref.l)
    l = g.chance(0.2) ? 0.0f : std::abs(g.draw(g.chance(0.9) ? Mix::kNormal : g.any_mix())) * 30;
  TileBuffers<float> got = ref;
  TileState<float> sgot = sref;
  row_sum_ref(st, Encoding::kFp32, false, c.b, sref, ref);
  stage_kernels().row_sum(st, Encoding::kFp32, false, c.b, sgot, got);
  t.check(sref.l.data(), sgot.l.data(), sref.l.size(),
          where(c, "row_sum", std::to_string(int(st.row_sum)).c_str()));
}

// A rescale hook for the tests: P's factor and the bits' addend from the row's max.
class TestRescaleHook : public RescaleHook {
 public:
  RescaleStep step(float m, bool first, double* state) const override {
    state[0] += 1.0;
    RescaleStep r;
    r.p_mul = first ? 1.0f : 0.5f;
    r.o_add = std::int32_t(std::lrint(std::fmod(double(m), 5.0))) * (1 << 23);
    r.apply_add = !first;
    return r;
  }
  void finish(float* o, int dv, float l, const double*) const override {
    for (int c = 0; c < dv; ++c) o[c] = o[c] / l;
  }
  std::string name() const override { return "test"; }
  OptionList options() const override { return {}; }
};

// The rescale and the chunk add: rescale_avx512 / add_chunk_avx512 (or _avx2) against their
// references.
inline void check_rescale(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  const int rows = c.b.rows, dv = c.in.shape.head_dim_v;
  static const Rescale kKinds[] = {Rescale::kMultiply, Rescale::kMultiply, Rescale::kDivide,
                                   Rescale::kIntAdd, Rescale::kHook, Rescale::kMultiplyFtz};
  RescaleStage st;
  st.kind = kKinds[g.uniform(0, 5)];
  st.fused = g.chance(0.3);
  if (st.kind == Rescale::kHook) st.hook.ptr = std::make_shared<TestRescaleHook>();
  const Encoding o_accum = g.chance(0.1) ? Encoding::kFp16 : Encoding::kFp32;
  const ChunkAdd how = g.chance(0.3) ? (g.chance(0.5) ? ChunkAdd::kRedFtz : ChunkAdd::kFaddFtz)
                                      : ChunkAdd::kFadd;
  TileBuffers<float> ref;
  ref.size(rows, c.b.bk, dv);
  for (int i = 0; i < rows; ++i) {
    ref.alpha[std::size_t(i)] = g.chance(0.2)   ? 1.0f
                                : g.chance(0.9) ? std::exp2(-std::abs(g.draw(Mix::kNormal)) * 4)
                                                : g.draw(g.any_mix());
    ref.first[std::size_t(i)] = g.chance(0.2) ? 1 : 0;
    ref.alpha_arg[std::size_t(i)] = float(g.uniform(-40, 0));
  }
  const Mix m = g.chance(0.5) ? Mix::kNormal : g.any_mix();
  g.fill(ref.chunk.data(), ref.chunk.size(), m, g.any_mix(), 0.05);
  TileState<float> sref;
  sref.reset(rows, dv);
  g.fill(sref.o.data(), sref.o.size(), m, g.any_mix(), 0.05);
  for (float& x : sref.m)
    if (g.chance(0.8)) x = g.draw(Mix::kNormal) * 10;
  if (st.kind == Rescale::kMultiplyFtz && g.chance(0.5)) {
    // FMUL.FTZ's edge: O a few ulps above FLT_MIN times alpha just below 1 (products that round
    // to FLT_MIN from below or above), subnormal O and alpha.
    for (int i = 0; i < rows; ++i)
      ref.alpha[std::size_t(i)] = g.chance(0.1) ? 0x1p-130f * float(g.uniform(1, 8))
                                                : 1.0f - 0x1p-24f * float(g.uniform(0, 6));
    for (float& x : sref.o)
      if (g.chance(0.5))
        x = (g.chance(0.5) ? -1.0f : 1.0f) * (g.chance(0.2) ? 0x1p-130f : 0x1p-126f) *
            (1.0f + 0x1p-23f * float(g.uniform(0, 5)));
  }
  TileBuffers<float> got = ref;
  TileState<float> sgot = sref;
  rescale_ref(st, o_accum, c.b, sref, ref);
  stage_kernels().rescale(st, o_accum, c.b, sgot, got);
  const std::string w = where(c, "rescale", std::to_string(int(st.kind)).c_str());
  t.check(sref.o.data(), sgot.o.data(), sref.o.size(), w + " O");
  t.check(ref.p_mul.data(), got.p_mul.data(), ref.p_mul.size(), w + " p_mul");
  EXPECT_EQ(ref.p_mul_active, got.p_mul_active);
  add_chunk_ref(st, how, c.b, sref, ref);
  stage_kernels().add_chunk(st, how, c.b, sgot, got);
  t.check(sref.o.data(), sgot.o.data(), sref.o.size(), w + " add_chunk");
}

// The epilogue: epilogue_avx512 / _avx2 against epilogue_ref (normalize models, static P scale, V's
// epilogue scale and mean, output formats, LSE models, empty and NaN rows).
inline void check_epilogue(Values& g, Tally& t) {
  BlockCase c = random_block(g);
  const int rows = c.b.rows, dv = c.in.shape.head_dim_v;
  Pipeline p;
  static const Normalize kNorms[] = {Normalize::kRcp, Normalize::kDiv, Normalize::kRcpApproxFtz,
                                     Normalize::kDivFull};
  p.normalize.kind = kNorms[g.uniform(0, 3)];
  if (g.chance(0.2)) p.p.static_scale = g.chance(0.5) ? 448.0 : 127.0;
  static const Encoding kOut[] = {Encoding::kFp32, Encoding::kFp64, Encoding::kBf16,
                                  Encoding::kFp16};
  p.out.enc = kOut[g.uniform(0, 3)];
  static const RowSum kModels[] = {RowSum::kQuad, RowSum::kSingle, RowSum::kSageLanes};
  p.softmax.row_sum = kModels[g.uniform(0, 2)];
  static const LseModel kLse[] = {LseModel::kNatural, LseModel::kLog2Mufu,
                                  LseModel::kLog2Libdevice};
  p.softmax.lse = kLse[g.uniform(0, 2)];
  if (g.chance(0.3)) p.softmax.max_domain = MaxDomain::kScaled;
  if (g.chance(0.1)) p.pv.o_accum = Encoding::kFp16;
  if (g.chance(0.3)) {
    PreparedOperand& v = c.in.v;
    v.groups = GroupMap{Granularity::kPerChannel, 1};
    v.groups_per_slice = dv;
    v.scales.resize(std::size_t(dv));
    for (float& s : v.scales) s = std::abs(g.draw(Mix::kNormal)) * 0.01f;
  }
  if (g.chance(0.3)) {
    c.in.v.means_per_slice = 1;
    c.in.v.mean.resize(std::size_t(dv));
    g.fill(c.in.v.mean.data(), c.in.v.mean.size(), Mix::kNormal, Mix::kWide, 0.05);
  }
  c.in.sm_scale = 1.0 / std::sqrt(double(c.in.shape.head_dim));
  TileState<float> st;
  st.reset(rows, dv);
  const Mix m = g.chance(0.5) ? Mix::kNormal : g.any_mix();
  g.fill(st.o.data(), st.o.size(), m, g.any_mix(), 0.02);
  for (int i = 0; i < rows; ++i) {
    if (g.chance(0.1)) continue;  // an empty row: m = -inf, l = 0
    st.m[std::size_t(i)] = g.draw(Mix::kNormal) * 5;
    for (int k = 0; k < 4; ++k)
      st.lanes(i)[k] = g.chance(0.05) ? g.draw(g.any_mix()) : std::abs(g.draw(Mix::kNormal)) * 20;
  }
  std::vector<double> o_ref(std::size_t(rows) * dv, -1.0), o_got = o_ref, l_ref(rows, -1.0),
                                                           l_got = l_ref;
  epilogue_ref(p, c.in, c.ti, rows, st, o_ref.data(), l_ref.data());
  stage_kernels().epilogue(p, c.in, c.ti, rows, st, o_got.data(), l_got.data());
  const std::string w = where(c, "epilogue", std::to_string(int(p.normalize.kind)).c_str());
  t.check(o_ref.data(), o_got.data(), o_ref.size(), w + " O");
  t.check(l_ref.data(), l_got.data(), l_ref.size(), w + " lse");
}

}  // namespace attnsim::stagetest
