// KIVI's FP16 group quantizer (numerics/kivi_quant.hpp): hand-picked cases named by what they
// exercise, and the FP32 form against the FP64 reference on random and adversarial groups and on
// every FP16 value for a set of group ranges.
#include "numerics/kivi_quant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/encoding.hpp"
#include "formats/float16.hpp"

namespace attnsim {
namespace {

constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};

float h(std::uint16_t bits) { return decode_f32<fp16>(bits); }
float to16(float x) { return decode_f32<fp16>(encode<fp16>(x, kRne)); }

// The same float, NaNs equal to each other (the quantizer's NaNs carry no payload meaning).
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

TEST(KiviQuantTest, HandCases) {
  // 2 bits, {−1, 0, 0.5, 2}: mn −1, range 3, scale 1; 0.5 − (−1) = 1.5 is a tie -> 2 (even).
  const float x[4] = {-1, 0, 0.5f, 2};
  std::uint8_t q[4];
  KiviGroup g = kivi_quantize_group(x, 4, 1, 2, q, 1);
  EXPECT_EQ(g.scale, 1.0f);
  EXPECT_EQ(g.mn, -1.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 1);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(q[3], 3);
  EXPECT_EQ(kivi_dequantize(2, g), 1.0f);
  // 4 bits, {0, 30}: scale 2; x = 5 -> 2.5 -> 2 and x = 7 -> 3.5 -> 4 (ties to even).
  const float y[2] = {0, 30};
  g = kivi_group(y, 2, 1, 4);
  EXPECT_EQ(g.scale, 2.0f);
  EXPECT_EQ(kivi_code(5, g, 4), 2);
  EXPECT_EQ(kivi_code(7, g, 4), 4);
  // A constant group: scale 0, (x − mn)/0 = 0/0 = NaN -> q = 0, x̂ = 0·0 + mn = mn.
  const float c[3] = {1.5f, 1.5f, 1.5f};
  g = kivi_quantize_group(c, 3, 1, 4, q, 1);
  EXPECT_EQ(g.scale, 0.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(kivi_dequantize(q[0], g), 1.5f);
  // Scale underflow: range 2^-24 (the smallest subnormal) / 15 rounds to 0; x = mn gives NaN -> 0,
  // x = mx gives 2^-24 / 0 = +Inf, clamped to 15; both dequantize to mn.
  const float u[2] = {h(0x0000), h(0x0001)};
  g = kivi_group(u, 2, 1, 4);
  EXPECT_EQ(g.scale, 0.0f);
  EXPECT_EQ(kivi_code(u[0], g, 4), 0);
  EXPECT_EQ(kivi_code(u[1], g, 4), 15);
  EXPECT_EQ(kivi_dequantize(15, g), 0.0f);
  // Range overflow: 60000 − (−60000) = 120000 -> Inf in FP16; scale Inf; the minimum gives
  // 0/Inf = 0, the maximum Inf/Inf = NaN -> 0; x̂ = 0·Inf = NaN.
  const float o[2] = {to16(-60000), to16(60000)};
  g = kivi_group(o, 2, 1, 4);
  EXPECT_TRUE(std::isinf(g.scale));
  EXPECT_EQ(kivi_code(o[0], g, 4), 0);
  EXPECT_EQ(kivi_code(o[1], g, 4), 0);
  EXPECT_TRUE(std::isnan(kivi_dequantize(0, g)));
  // A NaN in the group: mn and scale NaN, every code 0, x̂ NaN (torch.min/max propagate NaN).
  const float n[3] = {1, std::nanf(""), 2};
  g = kivi_quantize_group(n, 3, 1, 4, q, 1);
  EXPECT_TRUE(std::isnan(g.mn) && std::isnan(g.scale));
  EXPECT_EQ(q[0] + q[1] + q[2], 0);
  // The clamp: range 1 + 2^-10 at 4 bits: (1 + 2^-10)/15 rounds down in FP16, so the maximum's
  // quotient rounds to 15.0078125 > 15 before the clamp.
  const float r[2] = {0, h(0x3C01)};
  g = kivi_group(r, 2, 1, 4);
  const float quotient = to16(to16(r[1] - g.mn) / g.scale);
  EXPECT_GT(quotient, 15.0f);
  EXPECT_EQ(kivi_code(r[1], g, 4), 15);
}

// Random groups of FP16 values from distributions that reach every regime: normal at several
// magnitudes (subnormals to near-overflow), groups with repeated values, two-valued groups,
// channel outliers, groups near a power of two.
std::vector<float> random_group(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int> kind(0, 6);
  std::uniform_real_distribution<double> expo(-26, 16);
  std::normal_distribution<double> nrm(0, 1);
  std::vector<float> x(static_cast<std::size_t>(n));
  const int k = kind(rng);
  const double scale = std::exp2(expo(rng));
  const double shift = nrm(rng) * scale * (k == 5 ? 100 : 1);
  for (int i = 0; i < n; ++i) {
    double v;
    switch (k) {
      case 0:
        v = nrm(rng) * scale;
        break;
      case 1:  // few distinct values
        v = std::floor(nrm(rng) * 2) * scale;
        break;
      case 2:  // two values
        v = (rng() & 1) ? scale : -scale * 0.5;
        break;
      case 3:  // one outlier
        v = i == n / 2 ? scale * 1000 : nrm(rng) * scale;
        break;
      case 4:  // near 1 (ulp-level ranges)
        v = 1.0 + std::floor(nrm(rng) * 4) * std::exp2(-10);
        break;
      default:  // offset groups
        v = shift + nrm(rng) * scale;
        break;
    }
    x[std::size_t(i)] = to16(float(v));
  }
  return x;
}

TEST(KiviQuantTest, MatchesReferenceOnRandomGroups) {
  std::mt19937 rng(2024);
  long long groups = 0, codes = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int n = trial % 3 == 0 ? 64 : 1 + int(rng() % 128);
    const std::vector<float> x = random_group(rng, n);
    for (int bits : {1, 2, 3, 4, 8}) {
      const KiviGroup a = kivi_group(x.data(), n, 1, bits);
      const KiviGroup r = kivi_group_ref(x.data(), n, 1, bits);
      ASSERT_TRUE(same(a.scale, r.scale) && same(a.mn, r.mn)) << trial << " bits " << bits;
      ++groups;
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(kivi_code(x[std::size_t(i)], a, bits), kivi_code_ref(x[std::size_t(i)], r, bits))
            << trial << " " << i;
        ++codes;
      }
      for (int q = 0; q < (1 << bits); ++q)
        ASSERT_TRUE(same(kivi_dequantize(q, a), kivi_dequantize_ref(q, r))) << trial << " q " << q;
    }
  }
  EXPECT_EQ(groups, 100000);
  EXPECT_GT(codes, 4000000);
}

// Every FP16 value (finite, infinite, NaN) quantized against groups whose range makes the scale
// normal, subnormal, zero, infinite, or an exact power of two, and every code dequantized.
TEST(KiviQuantTest, MatchesReferenceOnEveryFp16Value) {
  const std::pair<std::uint16_t, std::uint16_t> ranges[] = {
      {0xBC00, 0x3C00},  // [−1, 1]
      {0x0000, 0x4B80},  // [0, 15]: scale 1 at 4 bits, every quotient exact
      {0x3C00, 0x3C01},  // [1, 1 + 2^-10]: the clamp above 15
      {0x0001, 0x0003},  // subnormal range, scale underflow
      {0x8400, 0x0400},  // [−2^-14, 2^-14]
      {0xF800, 0x7800},  // [−32768, 32768]: range overflow -> Inf
      {0xD640, 0x5A40},  // [−100, 200]
      {0x4E00, 0x4E00},  // constant 24
      {0x3555, 0x4D55},  // [1/3, 21.33]: inexact quotients
      {0xFBFF, 0xFBFE},  // [−65504, −65472]: near the negative limit
  };
  long long checked = 0;
  for (const auto& [lo, hi] : ranges) {
    const float ends[2] = {h(lo), h(hi)};
    for (int bits : {2, 4, 8}) {
      const KiviGroup a = kivi_group(ends, 2, 1, bits);
      const KiviGroup r = kivi_group_ref(ends, 2, 1, bits);
      ASSERT_TRUE(same(a.scale, r.scale) && same(a.mn, r.mn)) << lo << " " << hi;
      for (std::uint32_t b = 0; b < 0x10000; ++b) {
        const float x = h(std::uint16_t(b));
        ASSERT_EQ(kivi_code(x, a, bits), kivi_code_ref(x, r, bits)) << lo << " " << hi << " " << b;
        ++checked;
      }
      for (int q = 0; q < (1 << bits); ++q)
        ASSERT_TRUE(same(kivi_dequantize(q, a), kivi_dequantize_ref(q, r)));
    }
  }
  EXPECT_EQ(checked, 10LL * 3 * 65536);
}

// Every pair of FP16 group ends within a coarse grid of exponents: the scale's two roundings.
TEST(KiviQuantTest, ScaleMatchesReferenceOnEndPairs) {
  std::vector<std::uint16_t> vals;
  for (std::uint32_t b = 0; b < 0x10000; b += 97) vals.push_back(std::uint16_t(b));
  for (std::uint16_t lo : vals)
    for (std::uint16_t hi : vals) {
      const float e[2] = {h(lo), h(hi)};
      for (int bits : {1, 2, 4, 8}) {
        const KiviGroup a = kivi_group(e, 2, 1, bits), r = kivi_group_ref(e, 2, 1, bits);
        ASSERT_TRUE(same(a.scale, r.scale) && same(a.mn, r.mn)) << lo << " " << hi;
      }
    }
}

}  // namespace
}  // namespace attnsim
