// sim/golden: the FP64 golden's own error, measured against 50-digit attention, and its invariants.
#include "sim/golden/golden.hpp"

#include <Eigen/Core>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include "sim/golden/golden_mp.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

// (shape, causal, sigma, seed), in the order these tests were written with.
AttentionInput random_input(AttentionShape s, bool causal, double sigma, std::uint32_t seed) {
  return simtest::random_input(s, causal, seed, sigma);
}

struct Case {
  const char* name;
  AttentionShape shape;
  bool causal;
  double sigma;
  bool peaked = false;  // key i = 12·q_i (head 0 of each KV group): row i has one dominant key
};

AttentionInput case_input(const Case& c) {
  AttentionInput in = random_input(c.shape, c.causal, c.sigma, 1234);
  if (c.peaked) {
    const AttentionShape& s = c.shape;
    for (int b = 0; b < s.batch; ++b) {
      for (int hk = 0; hk < s.heads_kv; ++hk) {
        const int h = hk * s.group();
        for (int i = 0; i < std::min(s.len_q, s.len_kv); ++i) {
          for (int d = 0; d < s.head_dim; ++d) {
            in.k[((std::size_t(b) * s.heads_kv + hk) * s.len_kv + i) * s.head_dim + d] =
                12.0f * in.q[((std::size_t(b) * s.heads_q + h) * s.len_q + i) * s.head_dim + d];
          }
        }
      }
    }
  }
  return in;
}

class GoldenVsMultiprecision : public ::testing::TestWithParam<Case> {};

constexpr double kNormBound = 5e-15;   // normwise ||g - m|| / ||m||
constexpr double kAbsBound = 1.5e-14;  // max |g - m| / max |m|
constexpr double kLseBound = 2e-15;    // max |lse_g - lse_m| / max(1, |lse_m|)

// The bounds asserted are what was measured, with margin (sim/golden/README.md): FP64 golden is
// accurate to a few FP64 ulps normwise, far below anything an FP32, 16-bit or 8-bit kernel can
// reach. The MP reference is computed independently (plain 50-digit loops, exact scale).
TEST_P(GoldenVsMultiprecision, ErrorIsBounded) {
  const Case c = GetParam();
  const AttentionInput in = case_input(c);
  const GoldenErrorBound e = golden_error_vs_mp(in);
  double o_max = 0;
  for (double x : golden_attention_ref(in)) o_max = std::max(o_max, std::abs(x));
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.3e / %.3e / %.3e / %.3e / %.3e", e.rel_norm,
                e.max_rel_elementwise, e.max_abs / o_max, e.lse_max_rel, e.lse_max_abs);
  RecordProperty("norm_elemrel_absovermax_lserel_lseabs", buf);
  std::printf(
      "[ golden-mp ] %-26s normwise %.2e  elementwise rel %.2e  abs/max|O| %.2e  lse rel %.2e  lse "
      "abs %.2e\n",
      c.name, e.rel_norm, e.max_rel_elementwise, e.max_abs / o_max, e.lse_max_rel, e.lse_max_abs);
  EXPECT_LT(e.rel_norm, kNormBound) << c.name;
  EXPECT_LT(e.max_abs, kAbsBound * o_max) << c.name;
  EXPECT_LT(e.lse_max_rel, kLseBound) << c.name;
}

TEST(GoldenVsMultiprecision, BoundHasResolution) {
  // The check can fail: golden of an input against the 50-digit result of the same input with one
  // V element moved by one FP32 ulp differs by ~1e-9 normwise, far above the bound.
  const AttentionInput in = random_input({1, 1, 1, 16, 16, 16, 16}, false, 1.0, 3);
  EXPECT_LT(golden_error_vs_mp(in).rel_norm, kNormBound);
  AttentionInput v_off = in;
  v_off.v[5] = std::nextafter(v_off.v[5], 10.0f);
  const std::vector<double> g = golden_attention_ref(in), m = golden_attention_mp(v_off);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - m[i]) * (g[i] - m[i]);
    den += m[i] * m[i];
  }
  EXPECT_GT(std::sqrt(num / den), 1000 * kNormBound);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GoldenVsMultiprecision,
    ::testing::Values(Case{"mha_d64", {1, 2, 2, 48, 48, 64, 64}, false, 1.0},
                      Case{"gqa_causal_ragged", {1, 4, 2, 33, 57, 32, 32}, true, 1.0},
                      Case{"gqa_d128_causal_nq_lt_nkv", {1, 4, 1, 20, 37, 128, 128}, true, 1.0},
                      Case{"mla_dv_differs", {1, 1, 1, 20, 40, 64, 16}, false, 1.0},
                      Case{"large_logits", {1, 1, 1, 24, 24, 128, 128}, false, 4.0},
                      Case{"very_large_logits", {1, 2, 1, 16, 24, 64, 64}, false, 8.0},
                      Case{"peaked_rows", {1, 2, 1, 24, 24, 64, 64}, false, 1.0, true},
                      Case{"peaked_rows_causal_d128", {1, 1, 1, 16, 20, 128, 128}, true, 1.0, true},
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

// Golden with each causal alignment against a plain FP64 loop over the keys the alignment shows
// query i: top-left j <= i, bottom-right j <= i + len_kv - len_q (sim/problem.hpp).
TEST(Golden, CausalAlignmentsHideTheirOwnKeys) {
  for (const AttentionShape shape : {AttentionShape{1, 2, 1, 5, 9, 8, 8},
                                     AttentionShape{1, 1, 1, 9, 5, 8, 8},
                                     AttentionShape{1, 1, 1, 7, 7, 8, 8}}) {
    const AttentionInput in = random_input(shape, true, 1.0, 21);
    for (const CausalAlign align : {CausalAlign::kBottomRight, CausalAlign::kTopLeft}) {
      const GoldenResult r = golden_attention(in, align);
      const int off = align == CausalAlign::kTopLeft ? 0 : shape.len_kv - shape.len_q;
      for (int h = 0; h < shape.heads_q; ++h) {
        const int hk = h / shape.group();
        for (int i = 0; i < shape.len_q; ++i) {
          const int lim = std::clamp(i + off + 1, 0, shape.len_kv);
          std::vector<double> s(std::size_t(lim), 0.0);
          double m = -INFINITY, sum = 0;
          for (int j = 0; j < lim; ++j) {
            for (int c = 0; c < shape.head_dim; ++c)
              s[std::size_t(j)] += double(in.q[(std::size_t(h) * shape.len_q + i) * 8 + c]) *
                                   double(in.k[(std::size_t(hk) * shape.len_kv + j) * 8 + c]);
            s[std::size_t(j)] *= in.scale();
            m = std::max(m, s[std::size_t(j)]);
          }
          for (int j = 0; j < lim; ++j) sum += std::exp(s[std::size_t(j)] - m);
          for (int c = 0; c < 8; ++c) {
            double o = 0;
            for (int j = 0; j < lim; ++j)
              o += std::exp(s[std::size_t(j)] - m) / sum *
                   double(in.v[(std::size_t(hk) * shape.len_kv + j) * 8 + c]);
            EXPECT_NEAR(r.o[(std::size_t(h) * shape.len_q + i) * 8 + c], o, 1e-13)
                << "align " << int(align) << " nq " << shape.len_q << " row " << i;
          }
        }
      }
    }
    if (shape.len_q == shape.len_kv) {
      EXPECT_EQ(golden_attention_ref(in, CausalAlign::kTopLeft),
                golden_attention_ref(in, CausalAlign::kBottomRight));
    }
  }
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
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const GoldenResult one = golden_attention(in);
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    const GoldenResult r = golden_attention(in);
    EXPECT_EQ(one.o, r.o) << t << " threads";
    EXPECT_EQ(one.lse, r.lse) << t << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Golden, ResultDoesNotDependOnTheCacheSizesEigenDetects) {
  // Eigen sizes its GEMM blocks from the cache sizes it detects at run time, and the blocking
  // sets the summation order over the keys; two machines gave SmolLM2's 1,024-key rows different
  // last bits. golden_attention fixes the sizes, so what was detected before must not matter.
  const AttentionInput in = random_input({1, 2, 1, 64, 3000, 64, 64}, false, 1.0, 11);
  std::vector<GoldenResult> r;
  for (std::ptrdiff_t l2 : {std::ptrdiff_t(64) << 10, std::ptrdiff_t(4) << 20}) {
    Eigen::setCpuCacheSizes(l2 / 4, l2, l2 * 8);
    r.push_back(golden_attention(in));
  }
  EXPECT_EQ(r[0].o, r[1].o);
  EXPECT_EQ(r[0].lse, r[1].lse);
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
