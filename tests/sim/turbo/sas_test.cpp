// SAS (sim/turbo/sas.hpp): the fast path (native _Float16 / float arithmetic, a table per fp16
// rule) against the FP64-with-explicit-roundings reference on every fp16 argument and on millions
// of FP32 ones; the threshold readings; the accuracy figures the README quotes; the refit cubic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sim/turbo/sas.hpp"

namespace attnsim {
namespace {

std::vector<SasRule> rules() {
  std::vector<SasRule> r;
  for (SasFormat f : {SasFormat::kFp16, SasFormat::kFp32})
    for (bool fma : {false, true})
      for (SasThreshold th : {SasThreshold::kIntended, SasThreshold::kLiteral})
        for (int nr : {6, 4}) {
          SasRule x;
          x.fmt = f;
          x.fma = fma;
          x.threshold = th;
          x.n_r = nr;
          r.push_back(x);
        }
  return r;
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

TEST(Sas, FastPathEqualsReferenceOnEveryFp16Argument) {
  for (const SasRule& r : rules()) {
    long long bad = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      _Float16 h;
      const std::uint16_t b16 = std::uint16_t(b);
      std::memcpy(&h, &b16, 2);
      const float x = float(h);
      if (bits(sas_exp(x, r)) != bits(sas_exp_ref(x, r)) && ++bad <= 3)
        ADD_FAILURE() << describe(r) << " x=" << x << " fast=" << sas_exp(x, r)
                      << " ref=" << sas_exp_ref(x, r);
    }
    EXPECT_EQ(bad, 0) << describe(r);
  }
}

TEST(Sas, FastPathEqualsReferenceOnRandomAndAdversarialFp32Arguments) {
  std::mt19937_64 g(12);
  std::uniform_real_distribution<float> u(-9.0f, 0.5f);
  std::vector<float> xs;
  for (int i = 0; i < 1000000; ++i) xs.push_back(u(g));
  // Integers and their neighbours (the LUT seams), the threshold, zeros, specials, and FP32
  // arguments that round to fp16 ties.
  for (int n = -8; n <= 1; ++n) {
    const float f = float(n);
    xs.insert(xs.end(), {f, std::nextafter(f, -100.0f), std::nextafter(f, 100.0f)});
  }
  xs.insert(xs.end(), {0.0f, -0.0f, -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), -1e-30f, -1e-45f, 65504.0f,
                       -70000.0f});
  for (int k = 0; k < 20000; ++k) {
    // x = an fp16 value plus half an fp16 ulp (a tie), in [-8, 0].
    const float base = -8.0f * float(k) / 20000.0f;
    const _Float16 h = _Float16(base);
    const float ulp = float(_Float16(std::nextafter(float(h), 100.0f))) - float(h);
    xs.push_back(float(h) + ulp * 0.5f);
  }
  for (const SasRule& r : rules()) {
    long long bad = 0;
    for (float x : xs)
      if (bits(sas_exp(x, r)) != bits(sas_exp_ref(x, r)) && ++bad <= 3)
        ADD_FAILURE() << describe(r) << " x=" << x << " fast=" << sas_exp(x, r)
                      << " ref=" << sas_exp_ref(x, r);
    EXPECT_EQ(bad, 0) << describe(r);
  }
}

// The array form (the exp stage's rows: fp16 arguments by the vector conversion kernel) against
// sas_exp (and, on the upper halves, against sas_exp_ref, the FP64 reference) element by element on every FP32 upper half with six low halves (every sign, exponent,
// NaN payload class, fp16 rounding tie and overflow region) and a million random arguments, with
// tails and in place.
TEST(Sas, ArrayFormEqualsTheScalarOneOnEveryUpperHalf) {
  std::mt19937 g(5);
  std::vector<float> xs;
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0xFFFFu}) {
      const std::uint32_t b = (hi << 16) | lo;
      float x;
      std::memcpy(&x, &b, 4);
      xs.push_back(x);
    }
  std::uniform_real_distribution<float> u(-9.0f, 0.5f);
  for (int i = 0; i < 1000000; ++i) xs.push_back(u(g));
  for (const SasRule& r : rules()) {
    std::vector<float> got(xs.size());
    sas_exp_array(xs.data(), xs.size(), got.data(), r);
    long long bad = 0;
    for (std::size_t i = 0; i < xs.size(); ++i)
      if (bits(got[i]) != bits(sas_exp(xs[i], r)) && ++bad <= 3)
        ADD_FAILURE() << describe(r) << " x bits 0x" << std::hex << bits(xs[i]) << " array "
                      << bits(got[i]) << " scalar " << bits(sas_exp(xs[i], r));
    EXPECT_EQ(bad, 0) << describe(r);
    // And against the independent FP64-with-explicit-roundings reference on the upper halves.
    long long bad_ref = 0;
    for (std::size_t i = 0; i < 65536 * 6; ++i)
      if (bits(got[i]) != bits(sas_exp_ref(xs[i], r)) && ++bad_ref <= 3)
        ADD_FAILURE() << describe(r) << " x bits 0x" << std::hex << bits(xs[i]) << " array "
                      << bits(got[i]) << " reference " << bits(sas_exp_ref(xs[i], r));
    EXPECT_EQ(bad_ref, 0) << describe(r);
    for (std::size_t n = 0; n < 300; n += 37) {
      std::vector<float> a(xs.begin() + 5000, xs.begin() + 5000 + std::ptrdiff_t(n));
      sas_exp_array(a.data(), n, a.data(), r);
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(bits(a[i]), bits(got[5000 + i])) << n;
    }
  }
}

TEST(Sas, IntendedThresholdIsMonotoneCutAtMinusNr) {
  for (SasFormat f : {SasFormat::kFp16, SasFormat::kFp32}) {
    SasRule r;
    r.fmt = f;
    EXPECT_GT(sas_exp(-6.0f, r), 0.0f);
    EXPECT_EQ(sas_exp(-6.01f, r), 0.0f);
    EXPECT_EQ(sas_exp(-std::numeric_limits<float>::infinity(), r), 0.0f);
    EXPECT_EQ(sas_exp(std::numeric_limits<float>::quiet_NaN(), r), 0.0f);
    EXPECT_GT(sas_exp(-5.5f, r), 0.0f);
    // SAS(0) is c0 in the format; SAS(-n) is T[n]·c0.
    EXPECT_EQ(sas_exp(0.0f, r), f == SasFormat::kFp16 ? float(_Float16(0.9996f)) : 0.9996f);
  }
}

TEST(Sas, LiteralThresholdHasAHoleBelowMinusFive) {
  SasRule r;
  r.threshold = SasThreshold::kLiteral;
  // Algorithm 3 as printed: X < -6 becomes -5 and T[-5] = 0, so (-6, -5] reads the zero entry
  // while -6 itself does not.
  EXPECT_EQ(sas_exp(-5.5f, r), 0.0f);
  EXPECT_EQ(sas_exp(-5.0f, r), 0.0f);
  EXPECT_GT(sas_exp(-6.0f, r), 0.0f);
  EXPECT_EQ(sas_exp(-7.0f, r), 0.0f);
  EXPECT_GT(sas_exp(-4.99f, r), 0.0f);
}

TEST(Sas, RelativeErrorOverTheAttentionRange) {
  // README §SAS: the cubic's own error is 1.03e-3 relative; fp16 evaluation about doubles it.
  SasRule r32;
  r32.fmt = SasFormat::kFp32;
  const SasErrorStats e32 = sas_error(r32, -6.0, 1 << 20);
  EXPECT_GT(e32.max_rel, 1.0e-3);
  EXPECT_LT(e32.max_rel, 1.1e-3);
  SasRule r16;
  const SasErrorStats e16 = sas_error(r16, -6.0);
  EXPECT_GT(e16.max_rel, e32.max_rel);
  EXPECT_LT(e16.max_rel, 2.6e-3);
  EXPECT_GT(e16.count, 10000);
}

TEST(Sas, RefitCubicMatchesThePaperOnlyAsACoarseDiscreteFit) {
  const std::array<double, 4> paper{-0.1025, 0.4626, -0.9922, 0.9996};
  const std::array<double, 4> cont = sas_poly_fit(0);
  const std::array<double, 4> expect{-0.102500, 0.462469, -0.992049, 0.999614};
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(cont[std::size_t(k)], expect[std::size_t(k)], 2e-6);
  // The continuous fit rounded to 4 decimals misses c2 and c1; a 101-point grid fit hits all.
  auto round4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  EXPECT_NE(round4(cont[1]), paper[1]);
  const std::array<double, 4> grid = sas_poly_fit(101);
  for (int k = 0; k < 4; ++k) EXPECT_DOUBLE_EQ(round4(grid[std::size_t(k)]), paper[std::size_t(k)]);
  EXPECT_THROW(sas_poly_fit(3), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
