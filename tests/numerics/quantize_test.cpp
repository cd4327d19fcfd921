// numerics/quantize: each public quantizer's arithmetic, against hand-computed cases and an
// independent exact-rational oracle for the integer stage.
#include "numerics/quantize.hpp"

#include "numerics/special.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace attnsim {
namespace {

TEST(Quantize, SageCudaMultipliesByAReciprocalAndRoundsToEven) {
  // amax = 127 -> inv = 1: q = rne(x).
  const float x[] = {127.0f, 2.5f, -3.5f, 0.49999997f, -127.0f};
  const QuantizedTensor q =
      quantize_symmetric(x, 1, 5, {Granularity::kPerTensor, 1}, kSageCudaInt8);
  EXPECT_EQ(q.q, (std::vector<std::int32_t>{127, 2, -4, 0, -127}));
  EXPECT_EQ(q.scale[0], 1.0f);
  // All-zero group: amax floored at 1e-7, no NaN.
  const float z[] = {0.0f, 0.0f};
  const QuantizedTensor qz =
      quantize_symmetric(z, 1, 2, {Granularity::kPerTensor, 1}, kSageCudaInt8);
  EXPECT_EQ(qz.scale[0], 1e-7f / 127.0f);
  EXPECT_EQ(qz.q, (std::vector<std::int32_t>{0, 0}));
}

TEST(Quantize, TritonHalfAwayRoundsInFp32) {
  // scale = 1 + 1e-7 (amax 127, + epsilon): v = x / scale; then v + 0.5 in FP32, truncate.
  const float scale = 127.0f / 127.0f + 1e-7f;
  SymmetricQuantizer qz = kSageTritonInt8;
  EXPECT_EQ(quantize_value(2.5f * scale, scale, 0.f, qz), 3);  // tie away from zero
  EXPECT_EQ(quantize_value(-2.5f * scale, scale, 0.f, qz), -3);
  // 0.49999997f + 0.5f rounds to 1.0f in FP32, so truncation gives 1 (RNE would give 0).
  EXPECT_EQ(quantize_value(0.49999997f, 1.0f, 0.f, qz), 1);
  EXPECT_EQ(quantize_value(0.49999997f, 1.0f, 1.0f, kSageCudaInt8), 0);
  // Per-block without epsilon: an all-zero block divides 0 by 0; the NaN truncates to 0.
  const float z[] = {0.0f, 0.0f};
  const QuantizedTensor q =
      quantize_symmetric(z, 2, 1, {Granularity::kPerBlock, 2}, kSageTritonPerBlockInt8);
  EXPECT_EQ(q.scale[0], 0.0f);
  EXPECT_EQ(q.q, (std::vector<std::int32_t>{0, 0}));
}

TEST(Quantize, Int4AndTurboDivisors) {
  const float x[] = {7.0f, -7.0f, 3.49f, 100.0f};
  const QuantizedTensor q4 =
      quantize_symmetric(x, 4, 1, {Granularity::kPerToken, 1}, kSageTritonInt4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(std::abs(q4.q[i]), 7) << i;  // each token is its own group
  const float y[] = {119.0f, 59.5f, -1.0f};
  const QuantizedTensor t =
      quantize_symmetric(y, 1, 3, {Granularity::kPerTensor, 1}, kTurboInt8Alg);
  EXPECT_EQ(t.scale[0], 1.0f);
  EXPECT_EQ(t.q, (std::vector<std::int32_t>{119, 60, -1}));  // 59.5 -> 60 (even)
  const QuantizedTensor c =
      quantize_symmetric(y, 1, 3, {Granularity::kPerTensor, 1}, kTurboInt8AlgCeil);
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
  const QuantizedTensor q =
      quantize_symmetric(x.data(), 64, 16, sage_sm89_k_per_thread(), kSageCudaInt8);
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

TEST(Quantize, ZeroPaddingTakesPartInAmaxAndChangesNothing) {
  // 100 tokens in 32-token per-thread groups: the kernel pads to 128 with zeros; quantizing the
  // padded tensor gives the same scales and the same integers on the real tokens.
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 2.0f);
  const int T = 100, Tp = 128, C = 8;
  std::vector<float> x(std::size_t(T) * C), xp(std::size_t(Tp) * C, 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) xp[i] = x[i] = n(rng);
  for (const SymmetricQuantizer& qz : {kSageCudaInt8, kSageTritonInt8, kSageTritonInt4}) {
    const QuantizedTensor a = quantize_symmetric(x.data(), T, C, sage_sm89_q_per_thread(), qz);
    const QuantizedTensor b = quantize_symmetric(xp.data(), Tp, C, sage_sm89_q_per_thread(), qz);
    ASSERT_EQ(a.scale, b.scale) << qz.name;
    for (std::size_t i = 0; i < a.q.size(); ++i) ASSERT_EQ(a.q[i], b.q[i]);
  }
}

TEST(Quantize, RandomTensorsAgainstIndependentFormulas) {
  // Oracle: the kernels' formulas spelled out with other primitives (std::nearbyint on FP64 for
  // cvt.rni, std::trunc for .to(int8)), per group, amax by brute force.
  std::mt19937 rng(21);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int T = 128, C = 16;
  std::vector<float> x(std::size_t(T) * C);
  for (auto& v : x) v = n(rng) * (1.0f + float(rng() % 100));
  const GroupMap map = sage_sm89_k_per_thread();
  for (const SymmetricQuantizer& qz :
       {kSageCudaInt8, kSageTritonInt8, kSageTritonInt4, kSageTritonPerBlockInt8, kTurboInt8Alg,
        kTurboInt8Eq4, kTurboInt8AlgCeil, kSymmetricInt8, kSymmetricInt4}) {
    const QuantizedTensor q = quantize_symmetric(x.data(), T, C, map, qz);
    const float lim = float((1 << (qz.bits - 1)) - 1);
    for (int g = 0; g < map.count(T, C); ++g) {
      float amax = 0.0f;
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c)
          if (map.group(t, c, T, C) == g)
            amax = std::max(amax, std::fabs(x[std::size_t(t) * C + c]));
      const bool cuda = qz.rounding == QuantRounding::kRneSat,
                 triton = qz.rounding == QuantRounding::kHalfAwayFp32;
      const float a = cuda ? std::max(amax, 1e-7f) : amax;
      // SageAttention's Triton kernels (SASS): scale = fma(amax, fl(1/qmax), 1e-7) or
      // amax × fl(1/qmax), here by FP64 arithmetic on the exact product then one rounding.
      const double r = double(1.0f / qz.qmax);
      const float scale =
          !triton ? a / qz.qmax
          : qz.epsilon == ScaleEpsilon::kAdd ? float(double(a) * r + double(1e-7f))
                                             : float(double(a) * r);
      ASSERT_EQ(q.scale[std::size_t(g)], scale) << qz.name;
      for (int t = 0; t < T; ++t) {
        for (int c = 0; c < C; ++c) {
          if (map.group(t, c, T, C) != g) continue;
          const float v = x[std::size_t(t) * C + c];
          double want;
          if (cuda)
            want = std::nearbyint(double(v * (qz.qmax / a)));
          else if (triton) {
            // div.full: the scale's MUFU reciprocal times v (scales here are normal numbers).
            const float y = float(double(RcpApproxFtz::h100()(scale)) * double(v));
            want = std::trunc(double(y + (y >= 0.0f ? 0.5f : -0.5f)));
          }
          else if (qz.rounding == QuantRounding::kCeil)
            want = std::ceil(double(v / scale));
          else
            want = std::nearbyint(double(v / scale));
          want = std::min(std::max(want, double(-lim - 1)), double(lim));
          ASSERT_EQ(q.q[std::size_t(t) * C + c], std::int32_t(want)) << qz.name << " x=" << v;
          ASSERT_LE(std::abs(q.q[std::size_t(t) * C + c]), int(lim));  // never the -2^(b-1) code
        }
      }
    }
  }
}

TEST(Quantize, IntegerDivisionHelpersAgainstRationalOracle) {
  for (std::int64_t a = -300; a <= 300; ++a) {
    for (std::int64_t b = 1; b <= 17; ++b) {
      const long double q = (long double)a / (long double)b;
      EXPECT_EQ(div_ceil(a, b), std::int64_t(std::ceil(q)));
      const std::int64_t fl = std::int64_t(std::floor(q));
      const std::int64_t twice_r = 2 * (a - fl * b);
      const std::int64_t want =
          twice_r > b ? fl + 1 : (twice_r < b ? fl : (fl % 2 == 0 ? fl : fl + 1));
      EXPECT_EQ(div_round_nearest_even(a, b), want) << a << "/" << b;
    }
  }
}

constexpr ProgressiveQuantizer kAllBpq[] = {kBpqOffset, kBpqAlg1Appendix, kBpqAlg1MainText,
                                            kBpqAlg1Ceil, kBpqEq3Ceil};

// Oracle: the same formulas in FP64 with std::ceil / std::nearbyint (exact for these small
// integers; nearbyint rounds ties to even in the default mode), not the integer helpers.
double oracle_round(double v, IntRound r) {
  return r == IntRound::kCeil ? std::ceil(v) : std::nearbyint(v);
}

std::vector<std::int32_t> progressive_oracle(const std::vector<std::int32_t>& group, int bits,
                                             const ProgressiveQuantizer& c, int* s_out,
                                             int* z_out) {
  const int mn = *std::min_element(group.begin(), group.end()),
            mx = *std::max_element(group.begin(), group.end());
  const double div =
      c.divisor == RangeDivisor::kHalf ? std::ldexp(1.0, bits - 1) : std::ldexp(1.0, bits) - 1;
  const double s = std::max(1.0, oracle_round(double(mx - mn) / div, c.scale_round));
  const bool scaled = c.zero == ZeroPointForm::kScaled;
  const double z = scaled ? oracle_round(mn / s, c.zero_round) : mn;
  std::vector<std::int32_t> q;
  for (int v : group) {
    double w =
        scaled ? oracle_round(v / s, c.value_round) - z : oracle_round((v - z) / s, c.value_round);
    w = std::min(std::max(w, 0.0), std::ldexp(1.0, bits) - 1);
    q.push_back(std::int32_t(w));
  }
  *s_out = int(s);
  *z_out = int(z);
  return q;
}

TEST(Quantize, ProgressiveAgainstFp64OracleAndErrorBounds) {
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int T = 128, C = 32;
  std::vector<float> x(std::size_t(T) * C);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c)
      x[std::size_t(t) * C + c] = n(rng) + (c % 5 == 0 ? 6.0f : 0.0f);  // channel bias
  }
  const QuantizedTensor q1 =
      quantize_symmetric(x.data(), T, C, {Granularity::kPerBlock, 64}, kTurboInt8Alg);
  const GroupMap g2{Granularity::kPerBlockChannel, 64};
  for (const ProgressiveQuantizer& cfg : kAllBpq) {
    for (int bits : {4, 2}) {
      const ProgressiveTensor p = quantize_progressive(q1, g2, bits, cfg);
      const std::vector<std::int32_t> back = p.dequantize_int8();
      for (int blk = 0; blk < T / 64; ++blk) {
        for (int c = 0; c < C; ++c) {
          std::vector<std::int32_t> group;
          for (int t = blk * 64; t < blk * 64 + 64; ++t)
            group.push_back(q1.q[std::size_t(t) * C + c]);
          int s = 0, z = 0;
          const std::vector<std::int32_t> want = progressive_oracle(group, bits, cfg, &s, &z);
          const std::size_t g = std::size_t(g2.group(blk * 64, c, T, C));
          ASSERT_EQ(p.s_int[g], s) << cfg.name;
          ASSERT_EQ(p.z_int[g], z) << cfg.name;
          for (int k = 0; k < 64; ++k) {
            const std::size_t i = std::size_t(blk * 64 + k) * C + c;
            ASSERT_EQ(p.q[i], want[std::size_t(k)]) << cfg.name << " bits " << bits;
            // kBpqOffset never clamps and rounds to nearest: error <= s/2.
            if (&cfg == &kAllBpq[0]) {
              ASSERT_LE(2 * std::abs(back[i] - q1.q[i]), s);
            }
          }
        }
      }
    }
  }
}

TEST(Quantize, ProgressiveHandCases) {
  auto one_group = [](std::vector<std::int32_t> v) {
    QuantizedTensor h;
    h.tokens = int(v.size());
    h.channels = 1;
    h.map = {Granularity::kPerTensor, 1};
    h.q = std::move(v);
    h.scale = {1.0f};
    return h;
  };
  const GroupMap all{Granularity::kPerTensor, 1};
  const QuantizedTensor h = one_group({-10, 0, 5, 20});
  const ProgressiveTensor a = quantize_progressive(h, all, 4, kBpqAlg1Appendix);
  EXPECT_EQ(a.s_int[0], 4);                                 // ceil(30 / 8)
  EXPECT_EQ(a.z_int[0], -2);                                // ceil(-10 / 4) = ceil(-2.5)
  EXPECT_EQ(a.q, (std::vector<std::int32_t>{0, 2, 3, 7}));  // rne(-2.5)+2=0, 0+2, rne(1.25)+2, 5+2
  EXPECT_EQ(a.dequantize_int8(), (std::vector<std::int32_t>{-8, 0, 4, 20}));
  const ProgressiveTensor e = quantize_progressive(h, all, 4, kBpqOffset);
  EXPECT_EQ(e.s_int[0], 2);  // ceil(30 / 15)
  EXPECT_EQ(e.z_int[0], -10);
  EXPECT_EQ(e.q, (std::vector<std::int32_t>{0, 5, 8, 15}));  // (v + 10) / 2, 7.5 -> 8
  EXPECT_EQ(e.dequantize_int8(), (std::vector<std::int32_t>{-10, 0, 6, 20}));
  // Range 33: ceil(33/15) = 3 but nearest gives 2, and the main-text reading then overflows 4 bits.
  const QuantizedTensor w = one_group({-10, 0, 5, 23});
  const ProgressiveTensor m = quantize_progressive(w, all, 4, kBpqAlg1MainText);
  EXPECT_EQ(m.s_int[0], 2);
  EXPECT_EQ(m.z_int[0], -5);
  EXPECT_EQ(m.q, (std::vector<std::int32_t>{0, 5, 8, 15}));  // ceil(23/2) + 5 = 17 clamps to 15
  const ProgressiveTensor c = quantize_progressive(w, all, 4, kBpqAlg1Ceil);
  EXPECT_EQ(c.s_int[0], 3);
  EXPECT_EQ(c.z_int[0], -3);  // ceil(-3.33)
  EXPECT_EQ(c.q, (std::vector<std::int32_t>{0, 3, 5, 11}));
  EXPECT_EQ(c.dequantize_int8(),
            (std::vector<std::int32_t>{-9, 0, 6, 24}));  // upward bias, 24 > 23
  // A constant group: s = 1.
  const ProgressiveTensor k = quantize_progressive(one_group({7, 7}), all, 2, kBpqOffset);
  EXPECT_EQ(k.s_int[0], 1);
  EXPECT_EQ(k.dequantize_int8(), (std::vector<std::int32_t>{7, 7}));
}

TEST(Quantize, CudaReciprocalAndTritonDivisionDisagreeWhereTheModelsSaySo) {
  // x * (127/amax) (CUDA, reciprocal rounded on its own) and x / (amax/127) (divide by the rounded
  // scale) are different FP32 computations. Search random groups for elements where they round to
  // different integers, and check each named quantizer follows its own formula there: a model
  // that swapped the two would fail. Oracle: FP64 evaluation of the two FP32 expressions.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int differ = 0;
  for (int trial = 0; trial < 20000 && differ < 50; ++trial) {
    const float amax = std::ldexp(1.0f + std::fabs(u(rng)), int(rng() % 20) - 10);
    const float scale = amax / 127.0f, inv = 127.0f / amax;
    for (int k = 0; k < 64; ++k) {
      const float x = amax * u(rng);
      const double by_inv = std::nearbyint(double(x * inv)),
                   by_div = std::nearbyint(double(x / scale));
      if (by_inv == by_div) continue;
      ++differ;
      EXPECT_EQ(quantize_value(x, scale, inv, kSageCudaInt8), std::int32_t(by_inv));
      EXPECT_EQ(quantize_value(x, scale, inv, kSymmetricInt8), std::int32_t(by_div));
    }
  }
  EXPECT_GT(differ, 0) << "no disagreement found: the test would not notice a swapped model";
}

TEST(Quantize, TritonPerBlockAllZeroBlockDividesZeroByZero) {
  // quant_per_block.py: scale = max|x| / 127. with no epsilon, so an all-zero block (e.g. the
  // zero padding past L) stores scale 0 and computes x / scale = 0/0 = NaN; NaN + (-0.5) stays
  // NaN (the where() picks -1 because NaN >= 0 is false) and the float->int conversion gives 0
  // (PTX cvt: NaN -> 0). The neighbouring block is unaffected.
  const float x[] = {0.0f, -0.0f, 0.0f, 0.0f, 3.0f, -1.5f, 0.0f, 0.75f};
  const QuantizedTensor q =
      quantize_symmetric(x, 8, 1, {Granularity::kPerBlock, 4}, kSageTritonPerBlockInt8);
  EXPECT_EQ(q.scale[0], 0.0f);
  EXPECT_TRUE(std::isnan(0.0f / q.scale[0]));
  EXPECT_EQ(q.scale[1], 3.0f / 127.0f);
  EXPECT_EQ(q.q, (std::vector<std::int32_t>{0, 0, 0, 0, 127, -64, 0, 32}));  // -63.5 -> -64 away
  const std::vector<float> d = q.dequantize();
  EXPECT_EQ(d[0], 0.0f);  // 0 * 0: dequantisation stays finite
  // The Triton per_thread epsilon keeps the same block finite: scale 1e-7f, q = 0.
  const QuantizedTensor t =
      quantize_symmetric(x, 8, 1, {Granularity::kPerBlock, 4}, kSageTritonInt8);
  EXPECT_EQ(t.scale[0], 1e-7f);
}

TEST(Quantize, ProgressiveEq3CeilNeverClampsAndBiasesUp) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    QuantizedTensor h;
    h.tokens = 1 + int(rng() % 64);
    h.channels = 1;
    h.map = {Granularity::kPerTensor, 1};
    const int lo = -127 + int(rng() % 200), span = int(rng() % (128 - std::max(lo, -127)));
    for (int t = 0; t < h.tokens; ++t) h.q.push_back(lo + int(rng() % std::uint32_t(span + 1)));
    h.scale = {1.0f};
    for (int bits : {4, 2}) {
      const ProgressiveTensor p = quantize_progressive(h, h.map, bits, kBpqEq3Ceil);
      const std::vector<std::int32_t> back = p.dequantize_int8();
      const int s = p.s_int[0];
      for (std::size_t i = 0; i < h.q.size(); ++i) {
        // unclamped value equals the stored one
        const std::int64_t raw = div_ceil(h.q[i] - p.z_int[0], s);
        ASSERT_EQ(p.q[i], raw);
        ASSERT_LT(raw, std::int64_t{1} << bits);
        ASSERT_GE(back[i] - h.q[i], 0);
        ASSERT_LT(back[i] - h.q[i], s);
      }
    }
  }
}

}  // namespace
}  // namespace attnsim
