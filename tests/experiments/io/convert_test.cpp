// experiments/io/convert: exact-quotient integer rounding and the array conversions behind
// `attnsim convert`.
#include "experiments/io/convert.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "experiments/common/error.hpp"

namespace attnsim {
namespace {

// Oracle: the quotient in long double is exact enough to decide these hand-picked cases, which
// are chosen with exact ties (x/scale exactly k + 1/2) or clear non-ties.
TEST(RoundExactQuotient, TiesAndModes) {
  EXPECT_EQ(round_exact_quotient(2.5, 1.0, Round::kNearestEven), 2);
  EXPECT_EQ(round_exact_quotient(3.5, 1.0, Round::kNearestEven), 4);
  EXPECT_EQ(round_exact_quotient(-2.5, 1.0, Round::kNearestEven), -2);
  EXPECT_EQ(round_exact_quotient(2.5, 1.0, Round::kNearestAway), 3);
  EXPECT_EQ(round_exact_quotient(-2.5, 1.0, Round::kNearestAway), -3);
  EXPECT_EQ(round_exact_quotient(0.3125, 0.125, Round::kNearestEven), 2);  // 2.5 exactly
  EXPECT_EQ(round_exact_quotient(2.9, 1.0, Round::kTowardZero), 2);
  EXPECT_EQ(round_exact_quotient(-2.1, 1.0, Round::kDown), -3);
  EXPECT_EQ(round_exact_quotient(2.1, 1.0, Round::kUp), 3);
  EXPECT_EQ(round_exact_quotient(-2.9, 1.0, Round::kUp), -2);
  EXPECT_EQ(round_exact_quotient(1e-300, 1e10, Round::kUp), 1);  // tiny positive rounds up to 1
  EXPECT_EQ(round_exact_quotient(1e-300, 1e10, Round::kNearestEven), 0);
  EXPECT_EQ(round_exact_quotient(-1e-300, 1e10, Round::kDown), -1);
  EXPECT_EQ(round_exact_quotient(0.0, 3.0, Round::kUp), 0);
  EXPECT_EQ(round_exact_quotient(1e30, 1.0, Round::kNearestEven), std::int64_t{1} << 40);
}

TEST(RoundExactQuotient, NeighboursOfATie) {
  // x / 3 lands just below and just above the tie 2.5; the exact remainder decides.
  EXPECT_EQ(round_exact_quotient(std::nextafter(7.5, 0.0), 3.0, Round::kNearestAway), 2);
  EXPECT_EQ(round_exact_quotient(7.5, 3.0, Round::kNearestAway), 3);
  EXPECT_EQ(round_exact_quotient(std::nextafter(7.5, 8.0), 3.0, Round::kNearestEven), 3);
  EXPECT_EQ(round_exact_quotient(7.5, 3.0, Round::kNearestEven), 2);
  // Far-apart exponents: 2^-30 / 2^-31 = 2 exactly; (2^-30 + 2^-82) / 2^-31 just above 2.
  EXPECT_EQ(round_exact_quotient(0x1p-30, 0x1p-31, Round::kUp), 2);
  EXPECT_EQ(round_exact_quotient(0x1p-30 + 0x1p-82, 0x1p-31, Round::kUp), 3);
}

TEST(RoundExactQuotient, AgreesWithLongDoubleOnRandomNonTies) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-200.0, 200.0), s(1e-3, 10.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = double(float(u(rng))), sc = double(float(s(rng)));
    const long double q = (long double)x / (long double)sc;
    const long double frac = q - std::floor(q);
    if (std::fabs(frac - 0.5L) < 1e-12L || frac < 1e-12L)
      continue;  // skip near-ties for this oracle
    EXPECT_EQ(round_exact_quotient(x, sc, Round::kNearestEven), std::int64_t(std::llround(q)))
        << x << " " << sc;
    EXPECT_EQ(round_exact_quotient(x, sc, Round::kDown), std::int64_t(std::floor(q)));
  }
}

TEST(EncodeArray, IntegerSaturatesPacksAndRejectsNaN) {
  ConvertRequest r;
  r.format = "int4";
  r.scale = 0.5;
  const std::vector<float> x{0.0f, 0.75f, -0.75f, 100.0f,
                             -100.0f};  // 0, 1.5->2, -1.5->-2, sat, sat
  const auto bytes = encode_array(x, r);
  ASSERT_EQ(bytes.size(), 5u);
  EXPECT_EQ(std::int8_t(bytes[1]), 2);
  EXPECT_EQ(std::int8_t(bytes[2]), -2);
  EXPECT_EQ(std::int8_t(bytes[3]), 7);
  EXPECT_EQ(std::int8_t(bytes[4]), -8);
  r.packed = true;
  const auto packed = encode_array(x, r);
  ASSERT_EQ(packed.size(), 3u);
  EXPECT_EQ(packed[0], 0x20);  // element 0 (0) in the low nibble, element 1 (2) in the high
  EXPECT_EQ(packed[1], 0x7E);  // -2 = 0xE low, 7 high
  EXPECT_EQ(packed[2], 0x08);  // -8 = 0x8 low, padding 0
  const auto back = decode_array(packed, r, 5);
  EXPECT_EQ(back, (std::vector<float>{0.0f, 1.0f, -1.0f, 3.5f, -4.0f}));
  EXPECT_THROW(encode_array(std::vector<float>{NAN}, r), UsageError);
  r.scale = 0.0;
  EXPECT_THROW(encode_array(x, r), UsageError);
}

TEST(EncodeArray, FloatPoliciesAndErrors) {
  ConvertRequest r;
  r.format = "e4m3fn";
  r.policy = {Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  EXPECT_EQ(encode_array(std::vector<float>{1000.0f, -NAN}, r),
            (std::vector<std::uint8_t>{0x7E, 0x7F}));
  r.policy = {Round::kNearestEven, Overflow::kNaN, NanEncoding::kMlDtypes};
  EXPECT_EQ(encode_array(std::vector<float>{1000.0f, -NAN}, r),
            (std::vector<std::uint8_t>{0x7F, 0xFF}));
  r.policy.overflow = Overflow::kInf;
  EXPECT_THROW(encode_array(std::vector<float>{1.0f}, r), UsageError);  // e4m3fn has no Inf
  r.format = "bf16";
  r.policy = {Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  const auto b =
      encode_array(std::vector<double>{1.0 + 0x1p-8 + 0x1p-40}, r);  // f64 source: rounds up once
  std::uint16_t bits;
  std::memcpy(&bits, b.data(), 2);
  EXPECT_EQ(bits, 0x3F81);
  r.format = "fp8";
  EXPECT_THROW(encode_array(std::vector<float>{1.0f}, r), UsageError);
}

}  // namespace
}  // namespace attnsim
