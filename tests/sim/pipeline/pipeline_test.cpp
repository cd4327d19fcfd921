// sim/pipeline: the skeleton's seams (KV ranges for split schedules, thread-count independence),
// hand-computed stage semantics (integer-add rescale, snapped max, scaled domain), validation, and
// the stage bookkeeping of error attribution (sim/pipeline/stages.hpp).
#include "sim/pipeline/pipeline.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "numerics/metrics.hpp"
#include "sim/flash/flash.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/attribution.hpp"
#include "sim/sage/sage.hpp"
#include "sim/turbo/turbo.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

using simtest::random_input;

std::uint32_t bits(double x) { return std::bit_cast<std::uint32_t>(float(x)); }

// sm_scale = ln 2 makes scale_log2 = fl32(fl32(ln 2)·log2 e) = 1.0f exactly (flash_test.cpp).
constexpr double kLn2 = 0.69314718055994530942;

AttentionInput two_keys(float s0, float v0, float s1, float v1) {
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 2, 1, 1};
  in.q = {1.0f};
  in.k = {s0, s1};
  in.v = {v0, v1};
  in.sm_scale = kLn2;
  return in;
}

TEST(Pipeline, IntAddRescaleIsExactOnNormalsAndCorruptsAnExactZero) {
  // Blocks of one key, ascending: key 0 (s = 0), then key 1 (s = 4). The snapped max moves from
  // 0 to 4, so O and l are scaled by 2^-4 between the blocks.
  Pipeline mul;
  mul.tile.block_kv = 1;
  mul.tile.kv_order = KvOrder::kAscending;
  mul.softmax.row_sum = RowSum::kSingle;
  mul.rescale.max_round = MaxRound::kCeil;
  Pipeline add = mul;
  add.rescale.kind = Rescale::kIntAdd;
  // v0 = 3: O = 3, then 3·2^-4 + 1 = 1.1875; l = 1/16 + 1 = 1.0625; O/l by reciprocal then
  // multiply. The integer addition is an exact multiplication here (Lemma 3.1 holds).
  const AttentionInput a = two_keys(0, 3, 4, 1);
  const PipelineResult rm = run_pipeline(a, mul), ra = run_pipeline(a, add);
  EXPECT_EQ(bits(rm.o[0]), std::bit_cast<std::uint32_t>(1.1875f * (1.0f / 1.0625f)));
  EXPECT_EQ(bits(ra.o[0]), bits(rm.o[0]));
  // v0 = 0: O is exactly +0 after block 0; +0's bits plus -4·2^23 are 0xFE000000 = -2^125·1
  // (the borrow runs into the sign bit), so O ends as -2^125 + 1 = -2^125 and the output is
  // -2^125/1.0625: the failure mode outside Lemma 3.1 that AMLA's |O| > 1e10 guard covers.
  const AttentionInput z = two_keys(0, 0, 4, 1);
  EXPECT_EQ(bits(run_pipeline(z, mul).o[0]), std::bit_cast<std::uint32_t>(1.0f / 1.0625f));
  const double bad = run_pipeline(z, add).o[0];
  EXPECT_EQ(bits(bad), std::bit_cast<std::uint32_t>(-0x1p125f * (1.0f / 1.0625f)));
}

TEST(Pipeline, StaticIntegerPIsRoundedToEvenSaturatedAndUndoneInTheEpilogue) {
  // Scores 0, -1, -3, -8, -9 with scale_log2 = 1 give p = 1, 1/2, 1/8, 1/256, 1/512 exactly;
  // p·127 = 127, 63.5, 15.875, 0.496, 0.248 round (cvt.rni) to 127, 64 (tie to even), 16, 0, 0.
  // The row sum keeps the unscaled p; the chunk of integers times V is added to O, and the
  // normalized O is divided by 127 (SageAttention2 Alg. 1 line 8 with 127 for 448).
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 5, 1, 1};
  in.q = {1.0f};
  in.k = {0, -1, -3, -8, -9};
  in.v = {1, 2, 3, 5, 7};
  in.sm_scale = kLn2;
  Pipeline p;
  p.tile.block_kv = 8;
  p.softmax.row_sum = RowSum::kSingle;
  p.p.enc = Encoding::kS8;
  p.p.static_scale = 127.0;
  p.pv.acc = PvAccumulate::kChunk;
  const float l = 1.0f + 0.5f + 0.125f + 0x1p-8f + 0x1p-9f;
  const float chunk = 127.0f * 1 + 64.0f * 2 + 16.0f * 3;
  EXPECT_EQ(bits(run_pipeline(in, p).o[0]), std::bit_cast<std::uint32_t>(chunk * (1.0f / l) / 127.0f));
  // A static scale that overflows int8 saturates at 127 (p·300 = 300, 150, 37.5, 1.17, 0.586).
  p.p.static_scale = 300.0;
  const float sat = 127.0f * 1 + 127.0f * 2 + 38.0f * 3 + 1.0f * 5 + 1.0f * 7;
  EXPECT_EQ(bits(run_pipeline(in, p).o[0]), std::bit_cast<std::uint32_t>(sat * (1.0f / l) / 300.0f));
}

TEST(Pipeline, SnappedMaxMakesEveryRescaleAPowerOfTwo) {
  // The raw max is 0.25 (scale_log2 = 1): snapped up to 1, p = 2^(0.25 - 1); with
  // max_round=nearest the reference is 0 and p = 2^0.25 > 1.
  AttentionInput in = two_keys(0.25f, 1, -5, 1);
  Pipeline p;
  p.softmax.row_sum = RowSum::kSingle;
  p.rescale.max_round = MaxRound::kCeil;
  p.out.enc = Encoding::kFp64;
  p.softmax.state = StateType::kFp64;
  // LSE = ref·ln 2 + log(l) with ref = 1, l = 2^-0.75 + 2^-6.
  const PipelineResult r = run_pipeline(in, p);
  const double l = std::exp2(0.25 - 1.0) + std::exp2(-5.0 - 1.0);
  EXPECT_NEAR(r.lse[0], kLn2 + std::log(l), 1e-15);
  p.rescale.max_round = MaxRound::kNearest;
  const double l2 = std::exp2(0.25) + std::exp2(-5.0);
  EXPECT_NEAR(run_pipeline(in, p).lse[0], std::log(l2), 1e-15);
}

TEST(Pipeline, KvRangesSplitAndMergeToTheWholeRow) {
  // The seam of split schedules (LeanAttention, split-KV): one tile over [0, n) equals the merge
  // of the tile over [0, k) and [k, n) up to the merge's own roundings, and a split at 0 or n is
  // the whole computation bit for bit.
  const AttentionInput in = random_input({1, 2, 1, 64, 300, 64, 64}, false, 5);
  Pipeline p;
  p.softmax.state = StateType::kFp64;
  p.qk.dot.kind = p.pv.dot.kind = DotModel::kFp64;
  p.p.enc = Encoding::kFp64;  // unrounded P: the two halves' different maxes would round it differently
  p.softmax.row_sum = RowSum::kSingle;
  const PreparedInput prep = prepare(in, p);
  TileWorkspacePtr ws = make_workspace();
  const Tile t{0, 1, 0, 64};
  const int n = kv_blocks_of_tile(prep, p, t);
  ASSERT_EQ(n, 5);
  TileState<double> whole, a, b, e;
  for (TileState<double>* x : {&whole, &a, &b, &e}) x->reset(64, 64);
  attend_tile(prep, p, t, 0, n, whole, *ws);
  attend_tile(prep, p, t, 0, 2, a, *ws);
  attend_tile(prep, p, t, 2, n, b, *ws);
  attend_tile(prep, p, t, n, n, e, *ws);  // an empty range leaves the states empty
  ExpModel<double> em;
  em.scale = in.scale() * 1.4426950408889634074;
  double worst = 0;
  TileState<double> merged = b, w2 = whole;
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(e.empty(i));
    merge_row(merged, i, a, i, p.softmax.row_sum, em);
    const double lm = row_sum_total(merged, i, p.softmax.row_sum);
    const double lw = row_sum_total(whole, i, p.softmax.row_sum);
    for (int c = 0; c < 64; ++c)
      worst = std::max(worst, std::fabs(merged.o_row(i)[c] / lm - whole.o_row(i)[c] / lw));
    merge_row(w2, i, e, i, p.softmax.row_sum, em);  // an empty side is the identity, bit for bit
  }
  EXPECT_EQ(w2.o, whole.o);
  EXPECT_EQ(w2.m, whole.m);
  EXPECT_EQ(w2.l, whole.l);
  std::printf("[ pipeline ] split [0,2)+[2,5) vs whole: max abs %.3e\n", worst);
  EXPECT_LT(worst, 1e-14);
}

TEST(Pipeline, ResultsDoNotDependOnTheThreadCount) {
  AttentionInput in = random_input({2, 2, 1, 130, 200, 64, 64}, true, 9);
  Pipeline p;
  p.q.enc = p.k.enc = Encoding::kS8;
  p.q.scale = p.k.scale = ScaleMode::kInteger;
  p.q.quantizer = p.k.quantizer = kSageCudaInt8;
  p.q.groups = sage_sm90_q_per_thread();
  p.k.groups = sage_sm90_k_per_thread();
  parse_dot_model("sm90.wgmma.s8.s32", &p.qk.dot);
  p.softmax.dequant = Dequant::kFold;
  p.softmax.max_domain = MaxDomain::kScaled;
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  p.p.enc = Encoding::kE4m3fn;
  p.p.cast = kCudaSatfinite;
  p.v.enc = Encoding::kE4m3fn;
  p.v.cast = kCudaSatfinite;
  parse_dot_model("sm90.wgmma.e4m3.f32", &p.pv.dot);
  p.pv.acc = PvAccumulate::kChunk;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const PipelineResult one = run_pipeline(in, p);
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    const PipelineResult r = run_pipeline(in, p);
    EXPECT_EQ(one.o, r.o) << t;
    EXPECT_EQ(one.lse, r.lse) << t;
  }
  omp_set_num_threads(saved);
}

// prepare() runs the heads of each operand on the OpenMP threads (and ΔS, the LSE shift and the
// encodings by rows): every prepared field must be the same whatever the thread count. Presets
// that reach every path: SageAttention2 sm90 (per-thread INT8 scales at the product, smooth K,
// FP8 V with per-channel scales), the paper's arch (smooth Q: ΔS; INT4), sm80 with smooth V,
// TurboAttention (INT8 Q/K per block, INT4 V dequantized at the operand).
void expect_same_operand(const PreparedOperand& a, const PreparedOperand& b, const char* what,
                         int threads) {
  EXPECT_EQ(a.values, b.values) << what << " " << threads;
  EXPECT_EQ(a.bits, b.bits) << what << " " << threads;
  EXPECT_EQ(a.scales, b.scales) << what << " " << threads;
  EXPECT_EQ(a.mean, b.mean) << what << " " << threads;
}

TEST(Pipeline, PreparedOperandsDoNotDependOnTheThreadCount) {
  const AttentionInput in = random_input({2, 4, 2, 130, 200, 64, 64}, true, 17);
  std::vector<std::pair<std::string, Pipeline>> presets;
  for (SageArch a : {SageArch::kSm90, SageArch::kPaper, SageArch::kSm80, SageArch::kSage1}) {
    SageOptions o;
    o.arch = a;
    o.smooth_v = a == SageArch::kSm80;
    if (o.smooth_v) o.pv_accum = SagePvAccum::kFp16;
    presets.emplace_back("sage arch " + std::to_string(int(a)), sage_pipeline(o, in.shape));
  }
  presets.emplace_back("turbo", turbo_pipeline(TurboOptions{}));
  const int saved = omp_get_max_threads();
  for (const auto& [name, p] : presets) {
    omp_set_num_threads(1);
    const PreparedInput one = prepare(in, p);
    EXPECT_FALSE(one.q.values.empty()) << name;
    for (int t : {2, 3}) {
      omp_set_num_threads(t);
      const PreparedInput r = prepare(in, p);
      expect_same_operand(one.q, r.q, (name + " q").c_str(), t);
      expect_same_operand(one.k, r.k, (name + " k").c_str(), t);
      expect_same_operand(one.v, r.v, (name + " v").c_str(), t);
      EXPECT_EQ(one.delta_s, r.delta_s) << name << " " << t;
      EXPECT_EQ(one.lse_shift, r.lse_shift) << name << " " << t;
    }
  }
  omp_set_num_threads(saved);
  // The paths this test means to reach are reached.
  const PreparedInput paper = prepare(in, presets[1].second);
  EXPECT_FALSE(paper.delta_s.empty());
  const PreparedInput sm90 = prepare(in, presets[0].second);
  EXPECT_FALSE(sm90.k.mean.empty());
  EXPECT_FALSE(sm90.lse_shift.empty());
  EXPECT_FALSE(sm90.q.scales.empty());
}

void expect_invalid(const Pipeline& p, const std::string& fragment) {
  try {
    validate(p);
    ADD_FAILURE() << "accepted: " << describe(p);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Pipeline, RejectsStagesThatCannotBeCombined) {
  Pipeline p;
  parse_dot_model("sm90.wgmma.e4m3.f32", &p.pv.dot);
  expect_invalid(p, "takes e4m3fn x e4m3fn operands");
  p = Pipeline{};
  p.q.enc = Encoding::kS8;
  expect_invalid(p, "need an integer quantizer");
  p.q.scale = ScaleMode::kInteger;
  p.q.quantizer = kSymmetricInt4;
  expect_invalid(p, "makes 4-bit integers");
  p = Pipeline{};
  p.softmax.dequant = Dequant::kFold;
  expect_invalid(p, "needs max=scaled");
  p = Pipeline{};
  p.rescale.kind = Rescale::kIntAdd;
  expect_invalid(p, "max_round");
  p = Pipeline{};
  p.softmax.base = ExpKind::kExp;
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  expect_invalid(p, "exp2 exponent");
  p = Pipeline{};
  p.p.enc = Encoding::kS8;
  expect_invalid(p, "needs a scale");
  p.p.static_scale = 127.0;
  expect_invalid(p, "int32 chunk");
  p.p.static_scale = 0.0;
  p.p.scale = PScale::kRow;
  expect_invalid(p, "pv_acc=chunk");
  p = Pipeline{};
  parse_dot_model("sm90.imma.s8.s32", &p.pv.dot);
  p.p.enc = Encoding::kS8;
  p.p.scale = PScale::kRow;
  p.v.enc = Encoding::kS8;
  p.v.scale = ScaleMode::kInteger;
  expect_invalid(p, "pv_acc=chunk");
  p = Pipeline{};
  parse_dot_model("sm90.wgmma.e4m3.f32", &p.qk.dot);
  p.qk.dot.promote = 48;
  p.q.enc = p.k.enc = Encoding::kE4m3fn;
  expect_invalid(p, "positive multiple");
  // Shape-dependent: Q groups that vary along head_dim cannot dequantize QKᵀ's result.
  p = Pipeline{};
  p.q.enc = Encoding::kS8;
  p.q.scale = ScaleMode::kInteger;
  p.q.groups = {Granularity::kPerChannel, 1, 0};
  EXPECT_THROW(prepare(random_input({1, 1, 1, 8, 8, 8, 8}, false, 1), p), std::invalid_argument);
  // V per-block scales with O as C: the product cannot be dequantized.
  p = Pipeline{};
  p.v.enc = Encoding::kS8;
  p.v.scale = ScaleMode::kInteger;
  p.v.groups = {Granularity::kPerBlock, 64, 0};
  EXPECT_THROW(prepare(random_input({1, 1, 1, 8, 8, 8, 8}, false, 1), p), std::invalid_argument);
}

TEST(PipelineStages, ExactPipelineIsGoldenToFp64Accuracy) {
  const AttentionInput in = random_input({1, 2, 1, 100, 150, 64, 32}, true, 11);
  const Pipeline e = exact_pipeline(Pipeline{});
  const double err = error_metrics(run_pipeline(in, e).o, golden_attention_ref(in)).rel_fro;
  std::printf("[ pipeline ] exact pipeline vs golden rel_fro %.3e\n", err);
  EXPECT_LT(err, 1e-14);
}

TEST(PipelineStages, CounterfactualsSwitchCoupledStagesAlongAndSayWhy) {
  Pipeline m = flash_pipeline(Encoding::kBf16, Encoding::kFp32);
  m.p.enc = m.v.enc = Encoding::kE4m3fn;
  m.p.cast = m.v.cast = kCudaSatfinite;
  parse_dot_model("sm90.hmma.bf16.f32", &m.qk.dot);
  parse_dot_model("sm90.wgmma.e4m3.f32", &m.pv.dot);
  const Pipeline e = exact_pipeline(m);
  for (const StageInfo& s : pipeline_stages()) {
    const Counterfactual b = only_stage_exact(m, s.stage);
    const Counterfactual c = only_stage_inexact(m, s.stage);
    EXPECT_FALSE(stage_differs(b.pipeline, e, s.stage)) << s.name;
    EXPECT_FALSE(stage_differs(c.pipeline, m, s.stage)) << s.name;
  }
  // q exact (fp32) cannot enter the bf16 HMMA: qk becomes exact too.
  EXPECT_NE(only_stage_exact(m, Stage::kQ).note.find("qk made exact too"), std::string::npos);
  EXPECT_NE(only_stage_exact(m, Stage::kP).note.find("pv made exact too"), std::string::npos);
  // The wgmma alone needs e4m3 P and V: they come along.
  const Counterfactual pv = only_stage_inexact(m, Stage::kPv);
  EXPECT_NE(pv.note.find("p and v as the method"), std::string::npos) << pv.note;
  EXPECT_FALSE(stage_differs(pv.pipeline, m, Stage::kV));
  EXPECT_TRUE(only_stage_exact(m, Stage::kExp).note.empty());
  EXPECT_EQ(stage_choice(m, Stage::kPv), "pv_dot=sm90.wgmma.e4m3.f32");
  EXPECT_EQ(stage_choice(e, Stage::kPv), "pv_dot=fp64");
}

}  // namespace
}  // namespace attnsim
