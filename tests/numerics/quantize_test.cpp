// numerics/quantize: each public quantizer's arithmetic, against hand-computed cases and an
// independent exact-rational oracle for the integer stage.
#include "numerics/quantize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace attnsim {
namespace {

TEST(Quantize, SageCudaMultipliesByAReciprocalAndRoundsToEven) {
  // amax = 127 -> inv = 1: q = rne(x).
  const float x[] = {127.0f, 2.5f, -3.5f, 0.49999997f, -127.0f};
  const QuantizedTensor q = quantize_symmetric(x, 1, 5, {Granularity::kPerTensor, 1}, kSageCudaInt8);
  EXPECT_EQ(q.q, (std::vector<std::int32_t>{127, 2, -4, 0, -127}));
  EXPECT_EQ(q.scale[0], 1.0f);
  // All-zero group: amax floored at 1e-7, no NaN.
  const float z[] = {0.0f, 0.0f};
  const QuantizedTensor qz = quantize_symmetric(z, 1, 2, {Granularity::kPerTensor, 1}, kSageCudaInt8);
  EXPECT_EQ(qz.scale[0], 1e-7f / 127.0f);
  EXPECT_EQ(qz.q, (std::vector<std::int32_t>{0, 0}));
}

TEST(Quantize, TritonHalfAwayRoundsInFp32) {
  // scale = 1 + 1e-7 (amax 127, + epsilon): v = x / scale; then v + 0.5 in FP32, truncate.
  const float scale = 127.0f / 127.0f + 1e-7f;
  SymmetricQuantizer qz = kSageTritonInt8;
  EXPECT_EQ(quantize_value(2.5f * scale, scale, 0.f, qz), 3);   // tie away from zero
  EXPECT_EQ(quantize_value(-2.5f * scale, scale, 0.f, qz), -3);
  // 0.49999997f + 0.5f rounds to 1.0f in FP32, so truncation gives 1 (RNE would give 0).
  EXPECT_EQ(quantize_value(0.49999997f, 1.0f, 0.f, qz), 1);
  EXPECT_EQ(quantize_value(0.49999997f, 1.0f, 1.0f, kSageCudaInt8), 0);
  // Per-block without epsilon: an all-zero block divides 0 by 0; the NaN truncates to 0.
  const float z[] = {0.0f, 0.0f};
  const QuantizedTensor q = quantize_symmetric(z, 2, 1, {Granularity::kPerBlock, 2}, kSageTritonPerBlockInt8);
  EXPECT_EQ(q.scale[0], 0.0f);
  EXPECT_EQ(q.q, (std::vector<std::int32_t>{0, 0}));
}

TEST(Quantize, Int4AndTurboDivisors) {
  const float x[] = {7.0f, -7.0f, 3.49f, 100.0f};
  const QuantizedTensor q4 = quantize_symmetric(x, 4, 1, {Granularity::kPerToken, 1}, kSageTritonInt4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(std::abs(q4.q[i]), 7) << i;  // each token is its own group
  const float y[] = {119.0f, 59.5f, -1.0f};
  const QuantizedTensor t = quantize_symmetric(y, 1, 3, {Granularity::kPerTensor, 1}, kTurboInt8Alg);
  EXPECT_EQ(t.scale[0], 1.0f);
  EXPECT_EQ(t.q, (std::vector<std::int32_t>{119, 60, -1}));  // 59.5 -> 60 (even)
  const QuantizedTensor c = quantize_symmetric(y, 1, 3, {Granularity::kPerTensor, 1}, kTurboInt8AlgCeil);
  EXPECT_EQ(c.q, (std::vector<std::int32_t>{119, 60, -1}));
  const float w[] = {119.0f, 1.25f, -1.25f};
  EXPECT_EQ(quantize_symmetric(w, 1, 3, {Granularity::kPerTensor, 1}, kTurboInt8AlgCeil).q,
            (std::vector<std::int32_t>{119, 2, -1}));  // ceiling, as Alg. 1 prints it
}

TEST(Quantize, DequantizeIsOneFp32Multiply) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> x(64 * 16);
  for (auto& v : x) v = n(rng);
  const QuantizedTensor q = quantize_symmetric(x.data(), 64, 16, sage_sm89_k_per_thread(), kSageCudaInt8);
  const std::vector<float> d = q.dequantize();
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t g = std::size_t(q.map.group(int(i / 16), int(i % 16), 64, 16));
    EXPECT_EQ(d[i], float(q.q[i]) * q.scale[g]);
    EXPECT_LE(std::fabs(d[i] - x[i]), q.scale[g] * 0.5f * 1.0001f + 1e-6f);  // half a step
    err += (d[i] - x[i]) * (d[i] - x[i]);
    ref += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02);
}

TEST(Quantize, IntegerDivisionHelpersAgainstRationalOracle) {
  for (std::int64_t a = -300; a <= 300; ++a) {
    for (std::int64_t b = 1; b <= 17; ++b) {
      const long double q = (long double)a / (long double)b;
      EXPECT_EQ(div_ceil(a, b), std::int64_t(std::ceil(q)));
      const std::int64_t fl = std::int64_t(std::floor(q));
      const std::int64_t twice_r = 2 * (a - fl * b);
      const std::int64_t want = twice_r > b ? fl + 1 : (twice_r < b ? fl : (fl % 2 == 0 ? fl : fl + 1));
      EXPECT_EQ(div_round_nearest_even(a, b), want) << a << "/" << b;
    }
  }
}

TEST(Quantize, ProgressiveBothRulesReconstructWithinOneStep) {
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int T = 64, C = 32;
  std::vector<float> x(std::size_t(T) * C);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) x[std::size_t(t) * C + c] = n(rng) + (c % 5 == 0 ? 6.0f : 0.0f);  // channel bias
  }
  const QuantizedTensor q1 = quantize_symmetric(x.data(), T, C, {Granularity::kPerBlock, 64}, kTurboInt8Alg);
  const GroupMap g2{Granularity::kPerBlockChannel, 64};
  for (ProgressiveRule rule : {ProgressiveRule::kAlgorithm1, ProgressiveRule::kEquation3}) {
    for (int bits : {4, 2}) {
      const ProgressiveTensor p = quantize_progressive(q1, g2, bits, rule);
      const std::vector<std::int32_t> back = p.dequantize_int8();
      for (std::size_t i = 0; i < back.size(); ++i) {
        const std::size_t g = std::size_t(g2.group(int(i / C), int(i % C), T, C));
        ASSERT_GE(p.q[i], 0);
        ASSERT_LE(p.q[i], (1 << bits) - 1);
        // Within one integer step s (plus the clamp of Algorithm 1's half-range reading).
        ASSERT_LE(std::abs(back[i] - q1.q[i]), p.s_int[g]) << int(rule) << " bits " << bits;
      }
    }
  }
  // Hand case, one group {-10, 0, 5, 20}, 4 bits.
  QuantizedTensor h;
  h.tokens = 4;
  h.channels = 1;
  h.map = {Granularity::kPerTensor, 1};
  h.q = {-10, 0, 5, 20};
  h.scale = {1.0f};
  const ProgressiveTensor a = quantize_progressive(h, {Granularity::kPerTensor, 1}, 4, ProgressiveRule::kAlgorithm1);
  EXPECT_EQ(a.s_int[0], 4);   // ceil(30 / 8)
  EXPECT_EQ(a.z_int[0], -2);  // ceil(-10 / 4) = ceil(-2.5)
  EXPECT_EQ(a.q, (std::vector<std::int32_t>{0, 2, 3, 7}));  // rne(-2.5)+2=0, 0+2, rne(1.25)+2, 5+2
  const ProgressiveTensor e = quantize_progressive(h, {Granularity::kPerTensor, 1}, 4, ProgressiveRule::kEquation3);
  EXPECT_EQ(e.s_int[0], 2);   // ceil(30 / 15)
  EXPECT_EQ(e.z_int[0], -10);
  EXPECT_EQ(e.q, (std::vector<std::int32_t>{0, 5, 8, 15}));  // (v + 10) / 2, 7.5 -> 8
}

}  // namespace
}  // namespace attnsim
