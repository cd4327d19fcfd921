// ExactSum and dot_exact_f32 against an independent oracle: the exact sum as a Boost.Multiprecision
// integer (every FP64 term is an integer multiple of 2^-1074) and the nearest FP32 chosen among
// the neighbours of a candidate by exact comparison, ties to even.
#include "numerics/exact_sum.hpp"

#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace attnsim {
namespace {

using boost::multiprecision::cpp_int;

// x as an integer multiple of 2^-1074 (x finite).
cpp_int scaled(double x) {
  if (x == 0) return 0;
  int e;
  const double f = std::frexp(std::fabs(x), &e);  // |x| = f · 2^e, f in [0.5, 1)
  const std::uint64_t m = std::uint64_t(std::ldexp(f, 53));
  cpp_int v = m;
  const int sh = e - 53 + 1074;
  v = sh >= 0 ? cpp_int(v << sh) : cpp_int(v >> -sh);  // subnormal: exact (trailing zeros)
  return x < 0 ? cpp_int(-v) : v;
}

// The FP32 nearest to exact/2^1074, ties to even, overflow to Inf (the oracle).
float nearest_f32(const cpp_int& exact) {
  if (exact == 0) return 0.0f;
  // A candidate near the value: the top 64 bits as a double.
  const cpp_int mag = exact < 0 ? cpp_int(-exact) : exact;
  const unsigned msb = boost::multiprecision::msb(mag);
  const int drop = msb > 62 ? int(msb) - 62 : 0;
  const double approx = std::ldexp(double(static_cast<std::uint64_t>(mag >> drop)), drop - 1074) *
                        (exact < 0 ? -1.0 : 1.0);
  const float big = std::numeric_limits<float>::max();
  // Beyond the midpoint of FLT_MAX and 2^128: Inf.
  const cpp_int limit = scaled(double(big)) + (scaled(std::ldexp(1.0, 104 - 1)));
  if (mag >= limit) return exact < 0 ? -INFINITY : INFINITY;
  float f = float(approx);
  if (std::isinf(f)) f = std::copysign(big, f);
  float best = f;
  cpp_int best_d = -1;
  for (float g : {std::nextafter(f, -INFINITY), f, std::nextafter(f, INFINITY)}) {
    if (std::isinf(g)) continue;
    cpp_int d = scaled(double(g)) - exact;
    if (d < 0) d = -d;
    std::uint32_t gb;
    std::memcpy(&gb, &g, 4);
    std::uint32_t bb;
    std::memcpy(&bb, &best, 4);
    if (best_d < 0 || d < best_d || (d == best_d && (gb & 1u) == 0 && (bb & 1u) != 0)) {
      best = g;
      best_d = d;
    }
  }
  return best == 0.0f ? 0.0f : best;
}

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(ExactSum, HandPickedRoundingCases) {
  ExactSum s;
  // 1 + 2^-24: a tie between 1 and 1 + 2^-23 -> even (1.0).
  s.add(1.0);
  s.add(std::ldexp(1.0, -24));
  EXPECT_EQ(bits(s.round_f32()), 0x3F800000u);
  // ... plus 2^-80 breaks the tie upward (sticky below the guard bit, 56 bits further down).
  s.add(std::ldexp(1.0, -80));
  EXPECT_EQ(bits(s.round_f32()), 0x3F800001u);
  // Massive cancellation: 2^100 + 1 - 2^100 = 1 exactly (FP64 summation gives 0).
  s.clear();
  s.add(std::ldexp(1.0, 100));
  s.add(1.0);
  s.add(-std::ldexp(1.0, 100));
  EXPECT_EQ(s.round_f32(), 1.0f);
  EXPECT_EQ(s.round_f64(), 1.0);
  // Negative sum, subnormal FP32 result: -3·2^-150 rounds to -2^-148 (tie 1.5 quanta -> even 2).
  s.clear();
  s.add(-3.0 * std::ldexp(1.0, -150));
  EXPECT_EQ(bits(s.round_f32()), 0x80000002u);
  // Overflow: FLT_MAX + half an ulp (2^103) ties to even -> 2^128 -> +Inf.
  s.clear();
  s.add(double(std::numeric_limits<float>::max()));
  s.add(std::ldexp(1.0, 103));
  EXPECT_TRUE(std::isinf(s.round_f32()));
  // Exact zero is +0; Inf and NaN follow IEEE.
  s.clear();
  s.add(1.5);
  s.add(-1.5);
  EXPECT_EQ(bits(s.round_f32()), 0u);
  s.add(INFINITY);
  EXPECT_EQ(s.round_f32(), INFINITY);
  s.add(-INFINITY);
  EXPECT_TRUE(std::isnan(s.round_f32()));
}

// Random and adversarial dot products: the fast path (FP64 lanes + TwoSum check), the register
// reference and the Boost oracle agree bit for bit.
TEST(ExactSum, DotAgreesWithBoostOracleOnRandomAndAdversarialSets) {
  std::mt19937_64 rng(20261123);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> ex(-140, 120), len(1, 700), kind(0, 5);
  int fallback_cases = 0;
  for (int t = 0; t < 3000; ++t) {
    const int n = len(rng), k = kind(rng);
    std::vector<float> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      switch (k) {
        case 0:  // plain random FP32
          a[i] = float(u(rng));
          b[i] = float(u(rng));
          break;
        case 1:  // bf16-like operands (what AMLA's Cube sees)
          a[i] = std::ldexp(std::round(u(rng) * 256) / 256, ex(rng) / 4);
          b[i] = std::ldexp(std::round(u(rng) * 256) / 256, ex(rng) / 8);
          break;
        case 2:  // huge exponent spread: FP64 sums round, the register path is taken
          a[i] = std::ldexp(float(u(rng)), ex(rng));
          b[i] = std::ldexp(float(u(rng)), ex(rng) / 2);
          break;
        case 3:  // cancellation: pairs x, -x plus small terms
          a[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, 60);
          b[i] = i % 4 < 2 ? 1.0f : float(u(rng));
          break;
        case 4:  // near ties: 1 + k·2^-24 patterns
          a[i] = i == 0 ? 1.0f : std::ldexp(1.0f, -24 - (i % 40));
          b[i] = i % 3 ? 1.0f : -1.0f;
          break;
        default:  // subnormal products
          a[i] = std::ldexp(float(u(rng)), -70);
          b[i] = std::ldexp(float(u(rng)), -75);
          break;
      }
    }
    const double c = k == 3 ? 0.0 : u(rng);
    cpp_int exact = scaled(c);
    ExactSum acc;
    acc.add(c);
    for (int i = 0; i < n; ++i) {
      const double p = double(a[i]) * double(b[i]);
      exact += scaled(p);
    }
    const float want = nearest_f32(exact);
    const float fast = dot_exact_f32(c, a.data(), b.data(), n);
    const float ref = dot_exact_f32_ref(c, a.data(), b.data(), n);
    ASSERT_EQ(bits(ref), bits(want)) << "case " << t << " kind " << k << " n " << n;
    ASSERT_EQ(bits(fast), bits(want)) << "case " << t << " kind " << k << " n " << n;
    // How often the fast path had to fall back (kind 2 and 5 usually do).
    double s = c;
    bool exact_fp64 = true;
    for (int i = 0; i < n && exact_fp64; ++i) {
      const double p = double(a[i]) * double(b[i]);
      const double t2 = s + p;
      exact_fp64 = (t2 - s) == p && (t2 - p) == s;
      s = t2;
    }
    fallback_cases += exact_fp64 ? 0 : 1;
  }
  EXPECT_GT(fallback_cases, 300);  // the register path is exercised, not only the FP64 lanes
}

}  // namespace
}  // namespace attnsim
