// sim/golden: the FP64 golden's own error, measured against 50-digit attention, and its invariants.
#include "sim/golden/golden.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>

#include "sim/golden/golden_mp.hpp"

namespace attnsim {
namespace {

AttentionInput random_input(AttentionShape s, bool causal, double sigma, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, float(sigma));
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

struct Case {
  const char* name;
  AttentionShape shape;
  bool causal;
  double sigma;
};

class GoldenVsMultiprecision : public ::testing::TestWithParam<Case> {};

// The bound asserted is what was measured with margin (sim/golden/README.md): FP64 golden is
// accurate to ~1e-15 normwise, far below anything a 16-bit or 8-bit kernel can reach.
TEST_P(GoldenVsMultiprecision, ErrorIsBounded) {
  const Case c = GetParam();
  const AttentionInput in = random_input(c.shape, c.causal, c.sigma, 1234);
  const GoldenErrorBound e = golden_error_vs_mp(in);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3e / %.3e / %.3e", e.rel_norm, e.max_rel_elementwise, e.max_abs);
  RecordProperty("rel_norm_maxrel_maxabs", buf);
  EXPECT_LT(e.rel_norm, 1e-14) << c.name;
  EXPECT_LT(e.max_abs, 1e-13 * std::max(1.0, c.sigma)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GoldenVsMultiprecision,
    ::testing::Values(Case{"mha_d64", {1, 2, 2, 48, 48, 64, 64}, false, 1.0},
                      Case{"gqa_causal_ragged", {1, 4, 2, 33, 57, 32, 32}, true, 1.0},
                      Case{"mla_dv_differs", {1, 1, 1, 20, 40, 64, 16}, false, 1.0},
                      Case{"large_logits", {1, 1, 1, 24, 24, 128, 128}, false, 4.0},
                      Case{"causal_more_q_than_k", {2, 1, 1, 40, 16, 16, 16}, true, 1.0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Golden, RowWithNoVisibleKeyIsZeroNotNaN) {
  // Bottom-right causal alignment with len_q > len_kv: query i sees keys j <= i + (16 - 20),
  // so the first four rows see nothing.
  AttentionInput in = random_input({1, 1, 1, 20, 16, 8, 8}, true, 1.0, 5);
  const GoldenResult r = golden_attention(in);
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < 8; ++c) EXPECT_EQ(r.o[i * 8 + c], 0.0);
    EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] < 0);
  }
  for (double x : r.o) EXPECT_FALSE(std::isnan(x));
  EXPECT_NE(r.o[4 * 8], 0.0);  // row 4 sees key 0: its output is v[0]
  EXPECT_EQ(r.o[4 * 8], double(in.v[0]));
}

TEST(Golden, HandComputedTwoTokens) {
  // q = (1, 0); keys (1, 0), (0, 1); scale 1: softmax(1, 0) = (e/(e+1), 1/(e+1)).
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 2, 2, 1};
  in.q = {1.0f, 0.0f};
  in.k = {1.0f, 0.0f, 0.0f, 1.0f};
  in.v = {3.0f, -1.0f};
  in.sm_scale = 1.0;
  const GoldenResult r = golden_attention(in);
  const double e = std::exp(1.0);
  EXPECT_NEAR(r.o[0], (3.0 * e - 1.0) / (e + 1.0), 1e-15);
  EXPECT_NEAR(r.lse[0], std::log(e + 1.0), 1e-15);
}

TEST(Golden, ResultDoesNotDependOnThreadCount) {
  const AttentionInput in = random_input({2, 4, 2, 150, 130, 64, 32}, true, 1.0, 9);
  omp_set_num_threads(1);
  const std::vector<double> one = golden_attention_ref(in);
  omp_set_num_threads(2);
  const std::vector<double> two = golden_attention_ref(in);
  omp_set_num_threads(3);
  const std::vector<double> three = golden_attention_ref(in);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

TEST(Golden, GqaHeadsShareKv) {
  // With 4 query heads on 2 KV heads, heads 0 and 1 read KV head 0: identical Q rows give
  // identical outputs, and a different KV head gives a different one.
  AttentionInput in = random_input({1, 4, 2, 8, 8, 16, 16}, false, 1.0, 3);
  for (int h = 1; h < 4; ++h) {
    for (int i = 0; i < 8 * 16; ++i) in.q[h * 8 * 16 + i] = in.q[i];
  }
  const std::vector<double> o = golden_attention_ref(in);
  for (int i = 0; i < 8 * 16; ++i) EXPECT_EQ(o[i], o[8 * 16 + i]);
  EXPECT_NE(o[0], o[2 * 8 * 16]);
}

}  // namespace
}  // namespace attnsim
