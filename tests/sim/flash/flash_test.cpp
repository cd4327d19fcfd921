// sim/flash: the FlashAttention-2 reference against FP64 golden, and its exact arithmetic.
#include "sim/flash/flash.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "numerics/metrics.hpp"
#include "sim/golden/golden.hpp"
#include "tests/sim/pipeline_util.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

using simtest::random_input;
using simtest::run_o;
using simtest::with_options;

double rel_fro_vs_golden(const AttentionInput& in, const Pipeline& c) {
  const std::vector<float> o = run_o(in, c);
  const std::vector<double> g = golden_attention_ref(in);
  return error_metrics(std::vector<double>(o.begin(), o.end()), g).rel_fro;
}

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// sm_scale = ln 2 makes FA2's scale_log2 = fl32(fl32(ln 2) · log2 e) exactly 1.0f, so every
// exp2 argument in the hand cases below is an integer and every p an exact power of two:
// the expected bits then follow from FP32 additions and multiplications alone, whatever libm.
constexpr double kLn2 = 0.69314718055994530942;

struct TileCase {
  int bq, bk;
  AttentionShape shape;
  bool causal;
};

class FlashFp32 : public ::testing::TestWithParam<TileCase> {};

// FP32 FlashAttention agrees with golden to a few 1e-7 normwise for every tiling (measured
// 1.3e-7..4.1e-7, sim/flash/README.md; asserted < 1e-6).
TEST_P(FlashFp32, AgreesWithGolden) {
  const TileCase c = GetParam();
  Pipeline cfg;
  cfg.tile.block_q = c.bq;
  cfg.tile.block_kv = c.bk;
  const AttentionInput in = random_input(c.shape, c.causal, 77);
  const double e = rel_fro_vs_golden(in, cfg);
  RecordProperty("rel_fro", std::to_string(e));
  std::printf("[ flash-fp32 ] bq=%d bk=%d rel_fro %.3e\n", c.bq, c.bk, e);
  EXPECT_LT(e, 1e-6);
  EXPECT_GT(e, 1e-8);  // FP32 arithmetic does round: an exact match would mean golden was not used
}

INSTANTIATE_TEST_SUITE_P(Tiles, FlashFp32,
                         ::testing::Values(TileCase{16, 16, {1, 2, 2, 100, 100, 64, 64}, false},
                                           TileCase{32, 64, {1, 4, 2, 77, 131, 64, 64}, true},
                                           TileCase{64, 64, {2, 2, 1, 64, 64, 128, 128}, true},
                                           TileCase{128, 32, {1, 1, 1, 200, 50, 32, 48}, true},
                                           TileCase{64, 128, {1, 3, 1, 65, 300, 64, 64}, false},
                                           TileCase{32, 16, {1, 4, 1, 45, 83, 128, 128}, true},
                                           TileCase{128, 128, {1, 2, 2, 130, 257, 64, 64}, false}));

TEST(Flash, Fp64AccumulationIsCloserThanFp32) {
  const AttentionInput in = random_input({1, 2, 2, 128, 256, 64, 64}, false, 3);
  const Pipeline f32, f64 = with_options("acc=fp64,qk_dot=acc,pv_dot=acc");
  const double e32 = rel_fro_vs_golden(in, f32), e64 = rel_fro_vs_golden(in, f64);
  std::printf("[ flash ] fp32 %.3e  fp64 accumulation %.3e\n", e32, e64);
  EXPECT_LT(e64, 1e-7);  // only P (fp32 storage) and the final FP32 store round
  EXPECT_LT(e64, e32 / 2);
}

TEST(Flash, Fp64QkDotAloneHelps) {
  // The inner-product stage is a parameter: FP64 Q·K with the rest in FP32 changes the bits and
  // stays within the FP32 bound.
  const AttentionInput in = random_input({1, 2, 2, 96, 160, 128, 64}, false, 13);
  const Pipeline a, b = with_options("qk_dot=fp64");
  EXPECT_NE(run_o(in, a), run_o(in, b));
  EXPECT_LT(rel_fro_vs_golden(in, b), 1e-6);
}

TEST(Flash, Bf16StorageErrorIsInTheBf16Range) {
  const AttentionInput in = random_input({1, 2, 2, 128, 128, 64, 64}, false, 4);
  Pipeline c = with_options("qkv=bf16,p=bf16");
  const double e = rel_fro_vs_golden(in, c);
  RecordProperty("rel_fro", std::to_string(e));
  EXPECT_GT(e, 1e-3);
  EXPECT_LT(e, 1e-2);
  c.out.enc = Encoding::kBf16;  // the bf16 output rounding adds to it, still in range
  const double e_out = rel_fro_vs_golden(in, c);
  std::printf("[ flash ] bf16 q/k/v/p %.3e  + bf16 out %.3e\n", e, e_out);
  EXPECT_GT(e_out, 1e-3);
  EXPECT_LT(e_out, 1e-2);
}

TEST(Flash, E4m3StorageIsWorseThanBf16) {
  const AttentionInput in = random_input({1, 1, 1, 64, 128, 64, 64}, false, 14);
  const Pipeline b = with_options("qkv=bf16,p=bf16"), e = with_options("qkv=e4m3fn,p=e4m3fn");
  const double eb = rel_fro_vs_golden(in, b), ee = rel_fro_vs_golden(in, e);
  std::printf("[ flash ] bf16 %.3e  e4m3fn %.3e\n", eb, ee);
  EXPECT_GT(ee, 3 * eb);
  EXPECT_LT(ee, 0.1);
}

TEST(Flash, TilingChangesNothingWithOneKvBlock) {
  // With all keys in one KV block there is no rescaling, so any block_q gives the same bits.
  const AttentionInput in = random_input({1, 1, 1, 96, 64, 32, 32}, false, 5);
  const Pipeline a = with_options("bq=16,bk=64"), b = with_options("bq=96,bk=64");
  EXPECT_EQ(run_o(in, a), run_o(in, b));
}

TEST(Flash, KvOrderAndRowSumLanesChangeBitsNotAccuracy) {
  const AttentionInput in = random_input({1, 2, 1, 64, 200, 64, 64}, true, 15);
  const Pipeline base = with_options("bk=32"), asc = with_options("bk=32,kv_order=asc"),
                 single = with_options("bk=32,rowsum=single");
  const std::vector<float> o = run_o(in, base);
  EXPECT_NE(o, run_o(in, asc));
  EXPECT_NE(o, run_o(in, single));
  EXPECT_LT(rel_fro_vs_golden(in, asc), 1e-6);
  EXPECT_LT(rel_fro_vs_golden(in, single), 1e-6);
}

TEST(Flash, HandComputedExactBits) {
  // One query, d = 1, q = 1, keys k = (0, 2) so S = (0, 2); scale_log2 = 1 (kLn2 above).
  // m = 2; p = (exp2(0 - 2), exp2(2 - 2)) = (0.25, 1); l = 0.25 + 1 = 1.25 (both keys in quad
  // lane 0: columns 0 and 1); O acc = (0 + 0.25·1) + 1·3 = 3.25, all exact.
  // Epilogue: inv = fl(1/1.25) = 0x3F4CCCCD (0.800000011920929, RN up); O = fl(3.25 · inv) =
  // fl(2.6000000387430191) = 0x40266667, whereas a true division 3.25/1.25 = 2.6 would round to
  // 0x40266666: the reciprocal-then-multiply of FA2's normalize_softmax_lse is visible.
  // With block_kv = 1 (two blocks) the rescale path gives the same exact intermediates in both
  // orders: descending m = 2, l = 1, o = 3, then alpha = exp2(0) = 1, p = 0.25 -> l = 1.25,
  // o = 3 + 0.25; ascending m = 0, l = 1, o = 1, then alpha = 0.25 -> l = 0.25, o = 0.25, p = 1
  // -> l = 1.25, o = 0.25 + 3.
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 2, 1, 1};
  in.q = {1.0f};
  in.k = {0.0f, 2.0f};
  in.v = {1.0f, 3.0f};
  in.sm_scale = kLn2;
  for (int bk : {64, 1}) {
    for (KvOrder order : {KvOrder::kDescending, KvOrder::kAscending}) {
      Pipeline cfg;
      cfg.tile.block_kv = bk;
      cfg.tile.kv_order = order;
      const PipelineResult r = run_pipeline(in, cfg);
      EXPECT_EQ(bits(float(r.o[0])), 0x40266667u) << describe(cfg);
      // LSE = m·fl32(sm_scale) + log(l) = 2·fl32(ln 2) + log(1.25), libm log: 1 ulp.
      EXPECT_NEAR(r.lse[0], 2.0 * double(float(kLn2)) + std::log(1.25), 3e-7);
    }
  }
}

TEST(Flash, HandComputedQuadLaneRowSum) {
  // 16 keys in one block; S = (0, -200, -24, -24, -200 x 12); scale_log2 = 1, v = 1 everywhere.
  // p = (1, 0, 2^-24, 2^-24, 0, ...) (exp2(-200) underflows to 0 in FP32).
  // SM80 quad lanes: columns 0,1 -> thread 0; 2,3 -> thread 1; 4,5 -> 2; 6,7 -> 3; 8.. repeat.
  //   thread sums l0 = 1, l1 = 2^-24 + 2^-24 = 2^-23, l2 = l3 = 0;
  //   quad_allreduce (l0 + l2) + (l1 + l3) = 1 + 2^-23 (exact): 0x3F800001.
  // Single sum in key order: (1 + 2^-24) ties to even -> 1, again -> 1.
  // P·V: o = ((1·1 + 0) + 2^-24) + 2^-24 + ... = 1 (each tie to even).
  // O (quad) = fl(1 · fl(1 / (1 + 2^-23))) = fl(1 - 2^-23 + 2^-46) = 1 - 2^-23 = 0x3F7FFFFE;
  // O (single) = 1 · (1 / 1) = 0x3F800000.
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 16, 1, 1};
  in.q = {1.0f};
  in.k.assign(16, -200.0f);
  in.k[0] = 0.0f;
  in.k[2] = in.k[3] = -24.0f;
  in.v.assign(16, 1.0f);
  in.sm_scale = kLn2;
  const Pipeline quad, single = with_options("rowsum=single");
  EXPECT_EQ(bits(run_o(in, quad)[0]), 0x3F7FFFFEu);
  EXPECT_EQ(bits(run_o(in, single)[0]), 0x3F800000u);
}

TEST(Flash, FullyMaskedRowIsZeroWithInfiniteLse) {
  // Bottom-right causal with len_q 10 > len_kv 6: rows 0..3 see no key. With block_q = 2 the
  // first two Q tiles run no KV block at all; with block_q = 64 the tile mixes masked and
  // visible rows, and the masked rows go through the -inf max path (FA2 Check_inf).
  const AttentionInput in = random_input({1, 1, 1, 10, 6, 8, 8}, true, 6);
  for (int bq : {2, 64}) {
    for (int bk : {4, 64}) {
      Pipeline cfg;
      cfg.tile.block_q = bq;
      cfg.tile.block_kv = bk;
      const PipelineResult r = run_pipeline(in, cfg);
      for (int i = 0; i < 4; ++i) {
        for (int c = 0; c < 8; ++c)
          EXPECT_EQ(bits(float(r.o[i * 8 + c])), 0u) << bq << " " << bk;  // +0, not NaN
        EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] > 0);  // the empty-row convention: +inf
      }
      for (double x : r.o) EXPECT_FALSE(std::isnan(x));
      EXPECT_EQ(r.o[4 * 8], in.v[0]);  // row 4 sees key 0 only: O = v[0] · 1 · (1/1)
      EXPECT_LT(rel_fro_vs_golden(in, cfg), 1e-6);
    }
  }
}

TEST(Flash, ResultDoesNotDependOnThreadCount) {
  const AttentionInput in = random_input({2, 2, 1, 130, 70, 64, 64}, true, 8);
  const Pipeline c = with_options("bq=32,bk=32,p=e4m3fn");
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const PipelineResult one = run_pipeline(in, c);
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    const PipelineResult r = run_pipeline(in, c);
    EXPECT_EQ(one.o, r.o) << t << " threads";
    EXPECT_EQ(one.lse, r.lse) << t << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Flash, StorageCastsFollowTheConfiguredConversions) {
  // V = 1000 with e4m3fn storage saturates to 448 under CUDA's cvt.rn.satfinite (the default
  // cvt8) and becomes NaN under ml_dtypes' OCP policy; 70000 in fp16 overflows to Inf under
  // cvt.rn and saturates to 65504 under rne/saturate.
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 1, 1, 1};
  in.q = {1.0f};
  in.k = {1.0f};
  in.v = {1000.0f};
  EXPECT_EQ(run_o(in, with_options("v=e4m3fn"))[0], 448.0f);
  EXPECT_TRUE(std::isnan(run_o(in, with_options("v=e4m3fn,cvt8=rne/nan/ml_dtypes"))[0]));
  in.v = {70000.0f};
  EXPECT_TRUE(std::isinf(run_o(in, with_options("v=fp16"))[0]));
  EXPECT_EQ(run_o(in, with_options("v=fp16,cvt16=rne/saturate"))[0], 65504.0f);
  // A site's own policy beats its class's: v's cast saturates, the output's stays IEEE.
  const Pipeline p = with_options("v=fp16,out=fp16,v_cvt=rne/saturate");
  EXPECT_EQ(p.v.cast, (Policy{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda}));
  EXPECT_EQ(p.out.cast, kCudaRn);
  // 1 + 2^-8 is the bf16 midpoint between 1 and 1 + 2^-7: tie to even (down); 1 + 3·2^-8 ties up.
  in.v = {1.00390625f};
  EXPECT_EQ(bits(run_o(in, with_options("v=bf16"))[0]), 0x3F800000u);
  in.v = {1.01171875f};
  EXPECT_EQ(bits(run_o(in, with_options("v=bf16"))[0]), 0x3F820000u);
}

TEST(Flash, ExpVariantsAgreeToFp32Accuracy) {
  const AttentionInput in = random_input({1, 1, 1, 64, 128, 64, 64}, false, 10);
  const Pipeline a, b = with_options("exp=exp"), c = with_options("fma=off");
  EXPECT_LT(rel_fro_vs_golden(in, b), 1e-6);
  EXPECT_LT(rel_fro_vs_golden(in, c), 1e-6);
  const std::vector<float> oa = run_o(in, a);
  EXPECT_NE(oa, run_o(in, b));  // different rounding paths
  EXPECT_NE(oa, run_o(in, c));
}

TEST(Flash, Fa2DefaultsAreThePipelinesDefaults) {
  // FA2's choices live in one place, Pipeline{}'s member initializers: flash_pipeline only
  // changes the storage formats, and the vocabulary's defaults are Pipeline{}'s spelling.
  EXPECT_EQ(flash_pipeline(Encoding::kFp32, Encoding::kFp32), Pipeline{});
  const Pipeline b = flash_pipeline(Encoding::kBf16, Encoding::kBf16);
  EXPECT_EQ(b, with_options("qkv=bf16,p=bf16,out=bf16"));
  for (const OptionKey& k : pipeline_keys(technique_hooks())) {
    if (k.hook) continue;
    const OptionList d = pipeline_options(Pipeline{});
    bool found = false;
    for (const auto& [key, value] : d)
      if (key == k.key) found = value == k.default_value;
    EXPECT_TRUE(found) << k.key;
  }
}

TEST(Flash, RejectsBadConfig) {
  const AttentionInput in = random_input({1, 1, 1, 4, 4, 4, 4}, false, 1);
  Pipeline c;
  c.out.enc = Encoding::kE4m3fn;
  EXPECT_THROW(run_pipeline(in, c), std::invalid_argument);
  c = Pipeline{};
  c.tile.block_kv = 0;
  EXPECT_THROW(run_pipeline(in, c), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
