// formats/intn: float -> integer rounding and sub-byte packing, against std::floor/std::ceil
// based expectations (independent of the bit-level code under test).
#include "formats/intn.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnsim {
namespace {

// Oracle: rounding by floor/ceil in double, then clamp.
std::int64_t expect_round(double x, Round r) {
  const double f = std::floor(x), c = std::ceil(x);
  if (f == c) return std::int64_t(f);
  const double frac = x - f;
  switch (r) {
    case Round::kNearestEven:
      return std::int64_t(frac < 0.5 ? f : frac > 0.5 ? c : (std::fmod(f, 2.0) == 0 ? f : c));
    case Round::kNearestAway:
      return std::int64_t(frac < 0.5 ? f : frac > 0.5 ? c : (x < 0 ? f : c));
    case Round::kTowardZero:
      return std::int64_t(x < 0 ? c : f);
    case Round::kUp:
      return std::int64_t(c);
    case Round::kDown:
      return std::int64_t(f);
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
  const Round rounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp,
                          Round::kDown};
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
  EXPECT_EQ(cvt_rni_sat_s8(2.5f), 2);  // tie -> even
  EXPECT_EQ(cvt_rni_sat_s8(-3.5f), -4);
  EXPECT_EQ(cvt_rni_sat_s8(0.49999997f), 0);  // largest float below 0.5
  EXPECT_EQ(cvt_rni_sat_s8(127.5f), 127);     // saturates
  EXPECT_EQ(cvt_rni_sat_s8(-127.5f), -128);   // -128 (tie to even) is in range
  EXPECT_EQ(cvt_rni_sat_s8(-128.5f), -128);
  EXPECT_EQ(cvt_rni_sat_s8(std::numeric_limits<float>::quiet_NaN()), 0);  // PTX: NaN -> 0
  EXPECT_EQ(cvt_rni_sat_s8(std::numeric_limits<float>::infinity()), 127);
  EXPECT_EQ(cvt_rni_sat_s8(-std::numeric_limits<float>::infinity()), -128);
  EXPECT_EQ(cvt_rni_sat_s8(3e9f), 127);  // >= 2^31: saturates (a C cast would be UB)
  EXPECT_EQ(cvt_rni_sat_s8(1e-45f), 0);  // subnormal
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

// ---------------------------------------------------------------------------------------------
// Oracle for the wrap policy: C++20 defines narrowing of an in-range int64 as modular, so the
// low kBits bits read back in two's complement (signed) or plain (unsigned).
template <class I>
std::int32_t wrap(std::int64_t v) {
  const std::int64_t m = std::int64_t{1} << I::kBits;
  std::int64_t r = ((v % m) + m) % m;
  if (I::kSigned && r >= m / 2) r -= m;
  return std::int32_t(r);
}

const Round kAllRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero,
                            Round::kUp, Round::kDown};

// Golden table for s8 and u8, saturating, all five modes: ties at even and odd integers, the
// largest float below 0.5, the +-127.5 / 255.5 saturation ties, values >= 2^31, NaN and Inf.
TEST(Intn, GoldenAllModesSaturate) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  struct R {
    float x;
    int s8[5], u8[5];  // rne rna rz ru rd
    const char* why;
  };
  const R rows[] = {
      {0.5f, {0, 1, 0, 1, 0}, {0, 1, 0, 1, 0}, "tie at even 0"},
      {1.5f, {2, 2, 1, 2, 1}, {2, 2, 1, 2, 1}, "tie at odd 1 -> even 2"},
      {2.5f, {2, 3, 2, 3, 2}, {2, 3, 2, 3, 2}, "tie at even 2 stays"},
      {-0.5f, {0, -1, 0, 0, -1}, {0, 0, 0, 0, 0}, "negative tie: -0 -> 0; u8 clamps -1 to 0"},
      {-1.5f, {-2, -2, -1, -1, -2}, {0, 0, 0, 0, 0}, "negative tie at odd -> -2"},
      {-2.5f, {-2, -3, -2, -2, -3}, {0, 0, 0, 0, 0}, "negative tie at even"},
      {0.49999997f,
       {0, 0, 0, 1, 0},
       {0, 0, 0, 1, 0},
       "largest float < 0.5: exact RNA gives 0 (not 1 as x+0.5 in FP32 would)"},
      {-0.49999997f, {0, 0, 0, 0, -1}, {0, 0, 0, 0, 0}, "mirror"},
      {126.5f, {126, 127, 126, 127, 126}, {126, 127, 126, 127, 126}, "tie below the top"},
      {127.5f, {127, 127, 127, 127, 127}, {128, 128, 127, 128, 127}, "s8: 128 saturates to 127"},
      {-127.5f, {-128, -128, -127, -127, -128}, {0, 0, 0, 0, 0}, "-128 is in range (tie to even)"},
      {-128.5f, {-128, -128, -128, -128, -128}, {0, 0, 0, 0, 0}, "below -128: saturates"},
      {255.5f, {127, 127, 127, 127, 127}, {255, 255, 255, 255, 255}, "u8 top tie: 256 saturates"},
      {1e-45f, {0, 0, 0, 1, 0}, {0, 0, 0, 1, 0}, "FP32 min subnormal: only RU moves"},
      {-1e-45f, {0, 0, 0, 0, -1}, {0, 0, 0, 0, 0}, "negative subnormal: RD -> -1"},
      {0x1p31f,
       {127, 127, 127, 127, 127},
       {255, 255, 255, 255, 255},
       "2^31: saturates (a C cast is UB)"},
      {-3e9f, {-128, -128, -128, -128, -128}, {0, 0, 0, 0, 0}, "-3e9"},
      {0x1p100f, {127, 127, 127, 127, 127}, {255, 255, 255, 255, 255}, "2^100"},
      {inf, {127, 127, 127, 127, 127}, {255, 255, 255, 255, 255}, "+Inf saturates (PTX cvt)"},
      {-inf, {-128, -128, -128, -128, -128}, {0, 0, 0, 0, 0}, "-Inf"},
      {nan, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, "NaN -> 0 (PTX cvt Integer Notes)"},
      {-nan, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, "-NaN -> 0"},
  };
  for (const R& r : rows) {
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(round_to_int<s8>(r.x, kAllRounds[k], IntOverflow::kSaturate), r.s8[k])
          << r.why << " mode " << k;
      EXPECT_EQ(round_to_int<u8>(r.x, kAllRounds[k], IntOverflow::kSaturate), r.u8[k])
          << r.why << " mode " << k;
      EXPECT_EQ(round_to_int<s8>(double(r.x), kAllRounds[k], IntOverflow::kSaturate), r.s8[k])
          << r.why << " f64";
    }
    EXPECT_EQ(cvt_rni_sat_s8(r.x), r.s8[0]) << r.why;
  }
}

// NaN is 0 and +-Inf goes to the range ends under saturate, for every width and mode; under wrap
// +-Inf wraps "from the saturated int64" (formats/intn.hpp): a huge power of two whose low bits
// are all zero, so 0.
template <class I>
void check_specials() {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (Round r : kAllRounds) {
    for (IntOverflow o : {IntOverflow::kSaturate, IntOverflow::kWrap}) {
      EXPECT_EQ(round_to_int<I>(nan, r, o), 0);
      EXPECT_EQ(round_to_int<I>(-double(nan), r, o), 0);
    }
    EXPECT_EQ(round_to_int<I>(inf, r, IntOverflow::kSaturate), I::kMax);
    EXPECT_EQ(round_to_int<I>(-inf, r, IntOverflow::kSaturate), I::kMin);
    EXPECT_EQ(round_to_int<I>(inf, r, IntOverflow::kWrap), 0);
    EXPECT_EQ(round_to_int<I>(-double(inf), r, IntOverflow::kWrap), 0);
  }
}

TEST(Intn, NanAndInfEveryWidth) {
  check_specials<s8>();
  check_specials<s4>();
  check_specials<s2>();
  check_specials<u8>();
  check_specials<u4>();
  check_specials<u2>();
}

// Wrap vs saturate for every width: floor/ceil rounding in double, then clamp (saturate) or the
// modular narrowing above (wrap). Inputs: every quarter-integer in [-600, 600] (ties, exact
// integers and off-tie fractions) plus random doubles up to 2^62, below which a C++ cast chain
// int64 -> intN is defined (FP64 values >= 2^52 are integers: the exp >= 0 branch).
template <class I>
void check_wrap_and_saturate(std::mt19937_64& rng) {
  std::vector<double> xs;
  for (int k = -2400; k <= 2400; ++k) xs.push_back(k / 4.0);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(u(rng), int(rng() % 63)));
  std::size_t bad = 0;
  for (double x : xs) {
    for (Round r : kAllRounds) {
      const std::int64_t e = expect_round(x, r);
      const std::int32_t sat =
          std::int32_t(std::max<std::int64_t>(I::kMin, std::min<std::int64_t>(I::kMax, e)));
      bad += round_to_int<I>(x, r, IntOverflow::kSaturate) != sat;
      if (round_to_int<I>(x, r, IntOverflow::kWrap) != wrap<I>(e) && ++bad <= 5) {
        ADD_FAILURE() << "wrap " << I::kBits << (I::kSigned ? "s" : "u") << " x=" << std::hexfloat
                      << x << " mode " << int(r) << ": want " << std::dec << wrap<I>(e) << ", got "
                      << round_to_int<I>(x, r, IntOverflow::kWrap);
      }
      if (double(float(x)) == x) {
        bad += round_to_int<I>(float(x), r, IntOverflow::kWrap) != wrap<I>(e);
        bad += round_to_int<I>(float(x), r, IntOverflow::kSaturate) != sat;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << I::kBits << (I::kSigned ? " signed" : " unsigned");
}

TEST(Intn, WrapVsSaturateEveryWidth) {
  std::mt19937_64 rng(99);
  check_wrap_and_saturate<s8>(rng);
  check_wrap_and_saturate<s4>(rng);
  check_wrap_and_saturate<s2>(rng);
  check_wrap_and_saturate<u8>(rng);
  check_wrap_and_saturate<u4>(rng);
  check_wrap_and_saturate<u2>(rng);
}

// Golden wrap cases (C++: int8_t(int64_t(x)) after rounding).
TEST(Intn, GoldenWrap) {
  EXPECT_EQ(round_to_int<s8>(200.0f, Round::kNearestEven, IntOverflow::kWrap), -56);  // 200 - 256
  EXPECT_EQ(round_to_int<s8>(-129.0f, Round::kNearestEven, IntOverflow::kWrap), 127);
  EXPECT_EQ(round_to_int<u4>(-1.0f, Round::kNearestEven, IntOverflow::kWrap), 15);
  EXPECT_EQ(round_to_int<u2>(5.5f, Round::kNearestEven, IntOverflow::kWrap), 2);  // 6 mod 4
  EXPECT_EQ(round_to_int<s8>(0x1p31 + 5, Round::kNearestEven, IntOverflow::kWrap),
            5);  // >= 2^31, FP64
  // FP64 integers beyond 2^40 still wrap by their low bits: 2^40 + 1 -> 1, 2^52 + 3 -> 3,
  // -(2^45 + 130) -> -130 mod 256 = 126.
  EXPECT_EQ(round_to_int<s8>(0x1p40 + 1, Round::kNearestEven, IntOverflow::kWrap), 1);
  EXPECT_EQ(round_to_int<s8>(0x1p52 + 3, Round::kNearestEven, IntOverflow::kWrap), 3);
  EXPECT_EQ(round_to_int<s8>(-(0x1p45 + 130), Round::kNearestEven, IntOverflow::kWrap), 126);
  EXPECT_EQ(round_to_int<s8>(0x1p41 + 2.5, Round::kNearestEven, IntOverflow::kWrap),
            2);  // tie -> even 2
  EXPECT_EQ(round_to_int<s8>(0x1p41 + 2.5, Round::kNearestAway, IntOverflow::kWrap), 3);
}

// pack/unpack for every width: element 0 in the least significant bits, zero padding in the last
// byte, every in-range value round-trips, every byte unpacks to its bit fields.
template <class I>
void check_pack() {
  // Every value at every position, for counts 0..(2 bytes + 1 element) (partial last byte).
  for (std::size_t n = 0; n <= std::size_t(2 * I::kPerByte + 1); ++n) {
    for (std::int32_t v = I::kMin; v <= I::kMax; ++v) {
      for (std::size_t pos = 0; pos < n; ++pos) {
        std::vector<std::int32_t> vals(n, 0), back(n, 99);
        vals[pos] = v;
        std::vector<std::uint8_t> bytes(packed_bytes<I>(n) + 1, 0xAA);  // sentinel after the end
        pack<I>(vals.data(), n, bytes.data());
        ASSERT_EQ(bytes.back(), 0xAA) << "pack wrote past packed_bytes";
        ASSERT_EQ(bytes.size() - 1, (n * I::kBits + 7) / 8);
        // The only set bits are v's field at bit offset pos * kBits of the byte stream.
        for (std::size_t b = 0; b + 1 < bytes.size(); ++b) {
          const std::uint32_t field_byte = std::uint32_t(pos * I::kBits / 8);
          const std::uint8_t want =
              b == field_byte ? std::uint8_t((std::uint32_t(v) & I::kMask) << (pos * I::kBits % 8))
                              : 0;
          ASSERT_EQ(bytes[b], want) << "n=" << n << " pos=" << pos << " v=" << v << " byte " << b;
        }
        unpack<I>(bytes.data(), n, back.data());
        ASSERT_EQ(back, vals);
      }
    }
  }
  // Every byte value unpacks to its kPerByte fields, low field first.
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    const std::uint8_t b = std::uint8_t(byte);
    std::int32_t vals[8];
    unpack<I>(&b, I::kPerByte, vals);
    for (int i = 0; i < I::kPerByte; ++i) {
      std::int32_t f = std::int32_t((byte >> (i * I::kBits)) & I::kMask);
      if (I::kSigned && f >= (1 << (I::kBits - 1))) f -= 1 << I::kBits;
      ASSERT_EQ(vals[i], f) << "byte " << byte << " field " << i;
    }
    std::uint8_t again = 0;
    pack<I>(vals, I::kPerByte, &again);
    ASSERT_EQ(again, b);
  }
}

TEST(Intn, PackUnpackEveryWidth) {
  check_pack<s8>();
  check_pack<u8>();
  check_pack<s4>();
  check_pack<u4>();
  check_pack<s2>();
  check_pack<u2>();
  // Golden layouts.
  const std::int32_t u4v[] = {0x1, 0x2, 0xF};
  std::uint8_t u4b[2];
  pack<u4>(u4v, 3, u4b);
  EXPECT_EQ(u4b[0], 0x21);  // element 0 = low nibble
  EXPECT_EQ(u4b[1], 0x0F);  // element 2 alone, high nibble zero-padded
  const std::int32_t u2v[] = {1, 2, 3, 0};
  std::uint8_t u2b;
  pack<u2>(u2v, 4, &u2b);
  EXPECT_EQ(u2b, 0x39);  // 00 11 10 01
  const std::int32_t s8v[] = {-1, 5};
  std::uint8_t s8b[2];
  pack<s8>(s8v, 2, s8b);
  EXPECT_EQ(s8b[0], 0xFF);
  EXPECT_EQ(s8b[1], 0x05);
}

}  // namespace
}  // namespace attnsim
