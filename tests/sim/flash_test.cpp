// sim/flash: the FlashAttention-2 reference against FP64 golden, and its exact arithmetic.
#include "sim/flash/flash.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "numerics/metrics.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {
namespace {

AttentionInput random_input(AttentionShape s, bool causal, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  AttentionInput in;
  in.shape = s;
  in.causal = causal;
  in.q.resize(s.q_size());
  in.k.resize(s.k_size());
  in.v.resize(s.v_size());
  for (auto& x : in.q) x = n(rng);
  for (auto& x : in.k) x = n(rng);
  for (auto& x : in.v) x = n(rng);
  return in;
}

double rel_fro_vs_golden(const AttentionInput& in, const FlashConfig& c) {
  const std::vector<float> o = flash_attention_ref(in, c);
  const std::vector<double> g = golden_attention_ref(in);
  return error_metrics(std::vector<double>(o.begin(), o.end()), g).rel_fro;
}

struct TileCase {
  int bq, bk;
  AttentionShape shape;
  bool causal;
};

class FlashFp32 : public ::testing::TestWithParam<TileCase> {};

// FP32 FlashAttention agrees with golden to ~1e-6 normwise for every tiling (measured 2e-7 to
// 4e-7; asserted with margin).
TEST_P(FlashFp32, AgreesWithGolden) {
  const TileCase c = GetParam();
  FlashConfig cfg;
  cfg.block_q = c.bq;
  cfg.block_kv = c.bk;
  const AttentionInput in = random_input(c.shape, c.causal, 77);
  EXPECT_LT(rel_fro_vs_golden(in, cfg), 1.5e-6);
}

INSTANTIATE_TEST_SUITE_P(Tiles, FlashFp32,
                         ::testing::Values(TileCase{16, 16, {1, 2, 2, 100, 100, 64, 64}, false},
                                           TileCase{32, 64, {1, 4, 2, 77, 131, 64, 64}, true},
                                           TileCase{64, 64, {2, 2, 1, 64, 64, 128, 128}, true},
                                           TileCase{128, 32, {1, 1, 1, 200, 50, 32, 48}, true},
                                           TileCase{64, 128, {1, 3, 1, 65, 300, 64, 64}, false}));

TEST(Flash, Fp64AccumulationIsCloserThanFp32) {
  const AttentionInput in = random_input({1, 2, 2, 128, 256, 64, 64}, false, 3);
  FlashConfig f32, f64;
  f64.acc = Accum::kFp64;
  const double e32 = rel_fro_vs_golden(in, f32), e64 = rel_fro_vs_golden(in, f64);
  EXPECT_LT(e64, 1e-7);  // only the final FP32 store rounds
  EXPECT_LT(e64, e32);
}

TEST(Flash, Bf16StorageErrorIsInTheBf16Range) {
  const AttentionInput in = random_input({1, 2, 2, 128, 128, 64, 64}, false, 4);
  FlashConfig c;
  c.q = c.k = c.v = c.p = Storage::kBf16;
  const double e = rel_fro_vs_golden(in, c);
  EXPECT_GT(e, 1e-3);
  EXPECT_LT(e, 1e-2);
}

TEST(Flash, TilingChangesNothingWithOneKvBlock) {
  // With all keys in one KV block there is no rescaling, so any block_q gives the same bits.
  const AttentionInput in = random_input({1, 1, 1, 96, 64, 32, 32}, false, 5);
  FlashConfig a, b;
  a.block_q = 16;
  b.block_q = 96;
  a.block_kv = b.block_kv = 64;
  EXPECT_EQ(flash_attention_ref(in, a), flash_attention_ref(in, b));
}

TEST(Flash, HandComputedExactBits) {
  // One query, two keys, scale 1, exp2 variant with FMA, FP32: reproduce the kernel's steps by
  // hand. s = (2, 0); m = 2; scale_log2 = fl(log2 e); p0 = exp2(fma(2, c, -fl(2c))),
  // p1 = exp2(fma(0, c, -fl(2c))); o = (p0 * 3 + p1 * 5) * (1 / (p0 + p1)).
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 2, 2, 1};
  in.q = {1.0f, 1.0f};
  in.k = {1.0f, 1.0f, 0.5f, -0.5f};
  in.v = {3.0f, 5.0f};
  in.sm_scale = 1.0;
  FlashConfig cfg;
  const float c = float(1.4426950408889634074);
  const float max_scaled = 2.0f * c;
  const float p0 = std::exp2(std::fma(2.0f, c, -max_scaled));
  const float p1 = std::exp2(std::fma(0.0f, c, -max_scaled));
  float acc = 0.0f;
  acc = acc + p0 * 3.0f;
  acc = acc + p1 * 5.0f;
  const float l = 0.0f * 0.0f + (p0 + p1);  // l = l*alpha + rowsum with l = 0
  const float want = acc * (1.0f / l);
  const FlashResult r = flash_attention(in, cfg);
  EXPECT_EQ(r.o[0], want);
  EXPECT_FLOAT_EQ(r.lse[0], 2.0f + std::log(p0 + p1));
}

TEST(Flash, FullyMaskedRowIsZeroWithInfiniteLse) {
  const AttentionInput in = random_input({1, 1, 1, 10, 6, 8, 8}, true, 6);
  const FlashResult r = flash_attention(in, FlashConfig{});
  for (int i = 0; i < 4; ++i) {  // rows 0..3 see no key (offset 6 - 10 = -4)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(r.o[i * 8 + c], 0.0f);
    EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] > 0);  // FA2 writes +inf
  }
  for (float x : r.o) EXPECT_FALSE(std::isnan(x));
}

TEST(Flash, ResultDoesNotDependOnThreadCount) {
  const AttentionInput in = random_input({2, 2, 1, 130, 70, 64, 64}, true, 8);
  FlashConfig c;
  c.p = Storage::kE4m3fn;
  omp_set_num_threads(1);
  const std::vector<float> one = flash_attention_ref(in, c);
  omp_set_num_threads(2);
  EXPECT_EQ(one, flash_attention_ref(in, c));
}

TEST(Flash, RoundToStorageFollowsTheKernelConversions) {
  EXPECT_EQ(round_to_storage(1000.0f, Storage::kE4m3fn), 448.0f);  // satfinite
  EXPECT_EQ(round_to_storage(-1e6f, Storage::kE5m2), -57344.0f);
  EXPECT_TRUE(std::isinf(round_to_storage(70000.0f, Storage::kFp16)));  // cvt.rn: IEEE overflow
  EXPECT_EQ(round_to_storage(1.00390625f, Storage::kBf16), 1.0f);      // tie to even
  EXPECT_EQ(round_to_storage(1.01171875f, Storage::kBf16), 1.015625f);  // tie to even (up)
}

TEST(Flash, ExpVariantsAgreeToFp32Accuracy) {
  const AttentionInput in = random_input({1, 1, 1, 64, 128, 64, 64}, false, 10);
  FlashConfig a, b;
  b.exp = ExpKind::kExp;
  b.fma = false;
  EXPECT_LT(rel_fro_vs_golden(in, b), 1.5e-6);
  EXPECT_NE(flash_attention_ref(in, a), flash_attention_ref(in, b));  // different rounding paths
}

}  // namespace
}  // namespace attnsim
