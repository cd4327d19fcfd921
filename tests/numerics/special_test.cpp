// numerics/special: the host-side formulations of GPU library routines that have no table model
// (libdevice log2f, div.full.f32). Their bits are checked against the H100 through the
// SageAttention recordings (tests/hw/sage_h100_test.cpp: every LSE of the Triton kernel, every
// quantizer scale); here their documented accuracy on large random and adversarial sets, which
// also catches a wrong constant (the exponent split of log2f).
#include "numerics/special.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace attnsim {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// |a − b| in units of the FP32 ulp of the exact value b (a double).
double ulps(float a, double b) {
  int e;
  std::frexp(b, &e);
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(double(a) - b) / ulp;
}

// CUDA's documented maximum error of log2f is 1 ulp; powers of two are exact (the polynomial
// term is f·(log2 e + f·q) with f = 0).
TEST(Log2fLibdevice, WithinOneUlpOnRandomAndAdversarialInputs) {
  std::mt19937_64 rng(7);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    // Positive normal and subnormal floats, uniform in the bit pattern.
    const float x = from_bits(std::uint32_t(rng() % 0x7F800000u) | 1u);
    const double e = std::log2(double(x));
    worst = std::max(worst, ulps(log2f_libdevice(x), e));
  }
  // The edges of the exponent split (the mantissa range [sqrt(1/2), sqrt(2))) and near 1.
  for (std::uint32_t b : {0x3F3504F3u, 0x3F3504F2u, 0x3F3504F4u, 0x3FB504F3u, 0x3FB504F2u,
                          0x3F7FFFFFu, 0x3F800001u, 0x3F2AAAABu, 0x3FAAAAABu}) {
    for (int d = -64; d <= 64; ++d) {
      const float x = from_bits(b + std::uint32_t(d));
      worst = std::max(worst, ulps(log2f_libdevice(x), std::log2(double(x))));
    }
  }
  EXPECT_LE(worst, 1.0);
  for (int k = -149; k < 128; ++k) EXPECT_EQ(log2f_libdevice(std::ldexp(1.0f, k)), float(k)) << k;
  EXPECT_EQ(log2f_libdevice(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(log2f_libdevice(-1.0f)));
}

// div.full.f32: at most 2 ulp from the correctly rounded quotient (PTX ISA), exact when the
// divisor is a power of two in the normal range, and the range scaling keeps huge and tiny
// divisors finite.
TEST(DivFull, WithinTwoUlpAndExactForPowersOfTwo) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-120, 120);
  double worst = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float a = std::ldexp(mant(rng), ex(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    const float b = std::ldexp(mant(rng), ex(rng));
    const double q = double(a) / double(b);
    if (std::fabs(q) < 0x1p-126 || std::fabs(q) > 0x1p127) continue;
    worst = std::max(worst, ulps(div_full(a, b), q));
  }
  EXPECT_LE(worst, 2.0);
  for (int k = -100; k <= 100; ++k)
    EXPECT_EQ(div_full(3.0f, std::ldexp(1.0f, k)), std::ldexp(3.0f, -k)) << k;
  EXPECT_EQ(div_full(0x1p127f, 0x1.8p127f), float(2.0 / 3.0));   // |b| > 2^126: scaled by 1/4
  EXPECT_NEAR(div_full(1e-30f, 1e-39f), 1e9f, 1e3f);             // subnormal b: scaled by 2^24
}

}  // namespace
}  // namespace attnsim
