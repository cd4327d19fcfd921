// formats/encoding.hpp: the run-time Encoding table against the compile-time format types it
// dispatches to, over every encoding of every format of 16 bits or fewer.
#include "formats/encoding.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <set>
#include <string>

namespace attnsim {
namespace {

TEST(Encoding, NamesAreUniqueAndParseBack) {
  std::set<std::string> names;
  for (int i = 0; i < kEncodingCount; ++i) {
    const Encoding e = Encoding(i);
    const EncodingTraits t = encoding_traits(e);
    EXPECT_EQ(t.enc, e);
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    Encoding back;
    ASSERT_TRUE(parse_encoding(t.name, &back)) << t.name;
    EXPECT_EQ(back, e);
  }
  Encoding x;
  EXPECT_FALSE(parse_encoding("e4m3", &x));  // ml_dtypes' name is e4m3fn
  EXPECT_FALSE(parse_encoding("int8", &x));  // PTX's name is s8
  EXPECT_FALSE(parse_encoding("", &x));
}

template <class Fmt>
void expect_float_dispatch(Encoding e) {
  const EncodingTraits t = encoding_traits(e);
  EXPECT_EQ(t.bits, Fmt::kBits);
  EXPECT_EQ(t.exp_bits, Fmt::kExpBits);
  EXPECT_EQ(t.man_bits, Fmt::kManBits);
  for (std::uint32_t b = 0; b < (1u << Fmt::kBits); ++b) {
    const auto s = typename Fmt::Storage(b);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(decode_float_bits(e, b)),
              std::bit_cast<std::uint32_t>(decode_f32<Fmt>(s)))
        << t.name << " " << b;
    const FloatParts p = decompose_bits(e, b), q = decompose<Fmt>(s);
    ASSERT_TRUE(p.kind == q.kind && p.neg == q.neg && p.sig == q.sig &&
                (p.kind != FloatParts::kFinite || p.exp == q.exp))
        << t.name << " " << b;
    // Every non-NaN encoding survives decode -> encode.
    if (!is_nan_bits<Fmt>(s)) {
      ASSERT_EQ(encode_float_bits(e, decode_float_bits(e, b), kIeeeNearestEven), b) << t.name;
      ASSERT_EQ(encode_float_bits(e, double(decode_float_bits(e, b)), kIeeeNearestEven), b);
    }
  }
  // Rounding under the caller's policy, from FP32 and from FP64 (one rounding, never via FP32).
  const float x = 1.0f + 0x1p-20f;
  EXPECT_EQ(encode_float_bits(e, x, kIeeeNearestEven), encode<Fmt>(x, kIeeeNearestEven));
  const double y = 1.0 + 0x1p-40;
  EXPECT_EQ(encode_float_bits(e, y, Policy{Round::kUp, Overflow::kInf, NanEncoding::kCuda}),
            encode<Fmt>(y, Policy{Round::kUp, Overflow::kInf, NanEncoding::kCuda}));
}

TEST(Encoding, FloatDispatchEqualsTheFormatTypes) {
  expect_float_dispatch<bf16>(Encoding::kBf16);
  expect_float_dispatch<fp16>(Encoding::kFp16);
  expect_float_dispatch<e4m3fn>(Encoding::kE4m3fn);
  expect_float_dispatch<e5m2>(Encoding::kE5m2);
  EXPECT_EQ(encode_float_bits(Encoding::kFp32, 1.5f, kCudaSatfinite), 0x3FC00000u);
  // FP64 -> FP32 rounds once (RNE: the tie 1 + 2^-24 goes to 1; RU goes up).
  EXPECT_EQ(encode_float_bits(Encoding::kFp32, 1.0 + 0x1p-24, kIeeeNearestEven), 0x3F800000u);
  EXPECT_EQ(encode_float_bits(Encoding::kFp32, 1.0 + 0x1p-24,
                              Policy{Round::kUp, Overflow::kInf, NanEncoding::kCuda}),
            0x3F800001u);
}

template <class Fmt>
void expect_int_dispatch(Encoding e) {
  const EncodingTraits t = encoding_traits(e);
  EXPECT_FALSE(t.is_float);
  EXPECT_EQ(t.bits, Fmt::kBits);
  EXPECT_EQ(t.is_signed, Fmt::kSigned);
  EXPECT_EQ(t.int_min, Fmt::kMin);
  EXPECT_EQ(t.int_max, Fmt::kMax);
  for (std::int32_t v = Fmt::kMin; v <= Fmt::kMax; ++v) {
    ASSERT_EQ(int_to_encoding(e, v), int_to_bits<Fmt>(v));
    ASSERT_EQ(int_from_encoding(e, int_to_encoding(e, v)), v);
  }
  EXPECT_EQ(round_to_encoding_int(e, 1e9f, Round::kNearestEven), Fmt::kMax);  // saturates
  EXPECT_EQ(round_to_encoding_int(e, 0.5, Round::kNearestEven), 0);           // tie to even
}

TEST(Encoding, IntegerDispatchEqualsTheFormatTypes) {
  expect_int_dispatch<s8>(Encoding::kS8);
  expect_int_dispatch<u8>(Encoding::kU8);
  expect_int_dispatch<s4>(Encoding::kS4);
  expect_int_dispatch<s2>(Encoding::kS2);
}

}  // namespace
}  // namespace attnsim
