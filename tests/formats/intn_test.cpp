// formats/intn: float -> integer rounding and sub-byte packing, against std::floor/std::ceil
// based expectations (independent of the bit-level code under test).
#include "formats/intn.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace attnsim {
namespace {

// Oracle: rounding by floor/ceil in double, then clamp.
std::int64_t expect_round(double x, Round r) {
  const double f = std::floor(x), c = std::ceil(x);
  if (f == c) return std::int64_t(f);
  const double frac = x - f;
  switch (r) {
    case Round::kNearestEven: return std::int64_t(frac < 0.5 ? f : frac > 0.5 ? c : (std::fmod(f, 2.0) == 0 ? f : c));
    case Round::kNearestAway: return std::int64_t(frac < 0.5 ? f : frac > 0.5 ? c : (x < 0 ? f : c));
    case Round::kTowardZero: return std::int64_t(x < 0 ? c : f);
    case Round::kUp: return std::int64_t(c);
    case Round::kDown: return std::int64_t(f);
  }
  return 0;
}

template <class I>
std::int32_t clamp(std::int64_t v) {
  return std::int32_t(std::max<std::int64_t>(I::kMin, std::min<std::int64_t>(I::kMax, v)));
}

TEST(Intn, RoundToIntMatchesFloorCeilOracle) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-300.f, 300.f);
  const Round rounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp, Round::kDown};
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) xs.push_back(u(rng));
  for (int k = -140; k <= 140; ++k) {  // exact ties and their neighbours
    const float t = float(k) + 0.5f;
    xs.insert(xs.end(), {t, std::nextafter(t, 1e9f), std::nextafter(t, -1e9f), float(k)});
  }
  for (float x : xs) {
    for (Round r : rounds) {
      const std::int64_t e = expect_round(x, r);
      ASSERT_EQ(round_to_int<s8>(x, r, IntOverflow::kSaturate), clamp<s8>(e)) << x;
      ASSERT_EQ(round_to_int<s4>(x, r, IntOverflow::kSaturate), clamp<s4>(e)) << x;
      ASSERT_EQ(round_to_int<u2>(x, r, IntOverflow::kSaturate), clamp<u2>(e)) << x;
      ASSERT_EQ(round_to_int<s8>(double(x), r, IntOverflow::kSaturate), clamp<s8>(e)) << x;
    }
  }
}

TEST(Intn, HandPickedCases) {
  EXPECT_EQ(cvt_rni_sat_s8(2.5f), 2);           // tie -> even
  EXPECT_EQ(cvt_rni_sat_s8(-3.5f), -4);
  EXPECT_EQ(cvt_rni_sat_s8(0.49999997f), 0);    // largest float below 0.5
  EXPECT_EQ(cvt_rni_sat_s8(127.5f), 127);       // saturates
  EXPECT_EQ(cvt_rni_sat_s8(-127.5f), -128);     // -128 (tie to even) is in range
  EXPECT_EQ(cvt_rni_sat_s8(-128.5f), -128);
  EXPECT_EQ(cvt_rni_sat_s8(std::numeric_limits<float>::quiet_NaN()), 0);  // PTX: NaN -> 0
  EXPECT_EQ(cvt_rni_sat_s8(std::numeric_limits<float>::infinity()), 127);
  EXPECT_EQ(cvt_rni_sat_s8(-std::numeric_limits<float>::infinity()), -128);
  EXPECT_EQ(cvt_rni_sat_s8(3e9f), 127);         // >= 2^31: saturates (a C cast would be UB)
  EXPECT_EQ(cvt_rni_sat_s8(1e-45f), 0);         // subnormal
  EXPECT_EQ(round_to_int<s4>(9.0f, Round::kNearestEven, IntOverflow::kWrap), -7);  // 9 mod 16 -> -7
  EXPECT_EQ(round_to_int<s2>(2.0f, Round::kNearestEven, IntOverflow::kWrap), -2);
  EXPECT_EQ(round_to_int<u4>(-1.0f, Round::kNearestEven, IntOverflow::kSaturate), 0);
  EXPECT_EQ(round_to_int<s8>(0.5, Round::kNearestAway, IntOverflow::kSaturate), 1);
  EXPECT_EQ(round_to_int<s8>(-0.5, Round::kNearestAway, IntOverflow::kSaturate), -1);
}

TEST(Intn, PackUnpackRoundTripAndLayout) {
  const std::int32_t v4[] = {1, -2, 7, -8, 0};
  std::uint8_t b4[3];
  pack<s4>(v4, 5, b4);
  EXPECT_EQ(b4[0], 0xE1);  // element 0 (1) low nibble, element 1 (-2 = 0xE) high nibble
  EXPECT_EQ(b4[1], 0x87);
  EXPECT_EQ(b4[2], 0x00);
  std::int32_t back[5];
  unpack<s4>(b4, 5, back);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], v4[i]);
  const std::int32_t v2[] = {1, -1, -2, 0, 1};
  std::uint8_t b2[2];
  pack<s2>(v2, 5, b2);
  EXPECT_EQ(b2[0], 0x2D);  // 01 | 11<<2 | 10<<4 | 00<<6 = 0x01 + 0x0C + 0x20
  EXPECT_EQ(b2[1], 0x01);
  std::int32_t back2[5];
  unpack<s2>(b2, 5, back2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back2[i], v2[i]);
  std::mt19937 rng(1);
  std::vector<std::int32_t> v(1001), w(1001);
  for (auto& x : v) x = std::int32_t(rng() % 16);
  std::vector<std::uint8_t> b(packed_bytes<u4>(v.size()));
  pack<u4>(v.data(), v.size(), b.data());
  unpack<u4>(b.data(), v.size(), w.data());
  EXPECT_EQ(v, w);
}

}  // namespace
}  // namespace attnsim
