// formats/: hand-picked cases written as bit patterns, each naming its rounding case, and the
// special values where CUDA satfinite (cuda_fp8.hpp), ml_dtypes (float8.h) and OCP's
// non-saturating conversion (OCP 8-bit Floating Point Specification, 2023) disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "formats/float16.hpp"
#include "formats/float8.hpp"

namespace attnsim {
namespace {

constexpr Policy kSat = kCudaSatfinite;  // CUDA
constexpr Policy kMl8 = kMlDtypesE4m3;   // ml_dtypes e4m3fn
constexpr Policy kMlI = kMlDtypesIeee;   // ml_dtypes e5m2/bf16/fp16
constexpr Policy kMlSat{Round::kNearestEven, Overflow::kSaturateFinite,
                        NanEncoding::kMlDtypes};  // ml_dtypes kSaturate
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Specials, E4m3fnTable34) {
  // input                      CUDA satfinite   ml_dtypes astype  ml_dtypes kSaturate
  EXPECT_EQ(encode<e4m3fn>(464.0f, kSat), 0x7E);  // tie 448|480: even mantissa 110 -> 448
  EXPECT_EQ(encode<e4m3fn>(464.0f, kMl8), 0x7E);
  EXPECT_EQ(encode<e4m3fn>(std::nextafter(464.0f, 500.f), kSat),
            0x7E);  // above tie: overflow, clamped
  EXPECT_EQ(encode<e4m3fn>(std::nextafter(464.0f, 500.f), kMl8), 0x7F);  // overflow -> NaN
  EXPECT_EQ(encode<e4m3fn>(479.99f, kMl8), 0x7F);
  EXPECT_EQ(encode<e4m3fn>(480.0f, kMlSat), 0x7E);
  EXPECT_EQ(encode<e4m3fn>(-1000.0f, kSat), 0xFE);
  EXPECT_EQ(encode<e4m3fn>(-1000.0f, kMl8), 0xFF);  // NaN keeps the sign
  EXPECT_EQ(encode<e4m3fn>(kInf, kSat), 0x7E);      // satfinite: Inf -> max
  EXPECT_EQ(encode<e4m3fn>(-kInf, kSat), 0xFE);
  EXPECT_EQ(encode<e4m3fn>(kInf, kMlSat), 0x7F);  // ml_dtypes kSaturate: Inf -> NaN
  EXPECT_EQ(encode<e4m3fn>(-kInf, kMl8), 0xFF);
  EXPECT_EQ(encode<e4m3fn>(kNaN, kSat), 0x7F);
  EXPECT_EQ(encode<e4m3fn>(-kNaN, kSat), 0x7F);      // CUDA drops the NaN sign (float source)
  EXPECT_EQ(encode<e4m3fn>(-kNaN, kMl8), 0xFF);      // ml_dtypes keeps it
  EXPECT_EQ(encode<e4m3fn>(0x1p-10f, kSat), 0x00);   // tie 0|2^-9: even -> 0
  EXPECT_EQ(encode<e4m3fn>(0x1.8p-9f, kSat), 0x02);  // tie 2^-9|2^-8 (codes 1, 2): even -> 2
  EXPECT_EQ(encode<e4m3fn>(-0.0f, kSat), 0x80);
  EXPECT_EQ(encode<e4m3fn>(0x1p-6f, kSat), 0x08);  // min normal
}

TEST(Specials, E5m2Table35) {
  EXPECT_EQ(encode<e5m2>(58000.0f, kSat), 0x7B);
  EXPECT_EQ(encode<e5m2>(58000.0f, kMlI), 0x7B);
  EXPECT_EQ(encode<e5m2>(61439.99f, kMlI), 0x7B);
  EXPECT_EQ(encode<e5m2>(61440.0f, kMlI),
            0x7C);  // tie 57344 (odd 11) | 65536: even -> overflow -> Inf
  EXPECT_EQ(encode<e5m2>(61440.0f, kSat), 0x7B);
  EXPECT_EQ(encode<e5m2>(kInf, kSat), 0x7B);
  EXPECT_EQ(encode<e5m2>(-kInf, kMlSat), 0xFC);  // kSaturate keeps Inf
  EXPECT_EQ(encode<e5m2>(kNaN, kSat), 0x7F);     // CUDA
  EXPECT_EQ(encode<e5m2>(kNaN, kMlI), 0x7E);     // ml_dtypes quiet NaN
  EXPECT_EQ(encode<e5m2>(-kNaN, kMlI), 0xFE);
  EXPECT_EQ(encode<e5m2>(0x1p-17f, kSat), 0x00);  // tie 0|2^-16 -> 0
}

TEST(Specials, SixteenBit) {
  const Policy rne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  EXPECT_EQ(encode<fp16>(65504.0f, rne), 0x7BFF);
  EXPECT_EQ(encode<fp16>(65519.99f, rne), 0x7BFF);
  EXPECT_EQ(encode<fp16>(65520.0f, rne), 0x7C00);   // tie 65504 (odd) | 65536 -> Inf
  EXPECT_EQ(encode<fp16>(65520.0f, kSat), 0x7BFF);  // cvt.rn.satfinite.f16.f32
  EXPECT_EQ(encode<fp16>(0x1p-25f, rne), 0x0000);   // tie 0|2^-24 -> 0
  EXPECT_EQ(encode<fp16>(kNaN, rne), 0x7FFF);       // CUDA (and the H100's cvt, data/hw)
  EXPECT_EQ(encode<fp16>(-kNaN, kMlI), 0xFE00);
  EXPECT_EQ(encode<fp16>(std::bit_cast<float>(0xFFA00001u),
                         Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee}),
            0xFF00);  // sign and top payload kept, quiet bit set
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x7F7F7FFFu), rne), 0x7F7F);  // below the tie
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x7F7F8000u), rne), 0x7F80);  // tie, odd -> Inf
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x3F808000u), rne), 0x3F80);  // tie, even stays
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x3F818000u), rne), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x3F808000u),
                         Policy{Round::kNearestAway, Overflow::kInf, NanEncoding::kCuda}),
            0x3F81);  // ties away
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x00000001u), rne),
            0x0000);  // FP32 min subnormal -> 0 (below half)
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x00008000u), rne), 0x0000);  // tie -> even 0
  EXPECT_EQ(encode<bf16>(std::bit_cast<float>(0x00018000u), rne), 0x0002);  // subnormal tie -> even
  EXPECT_EQ(encode<bf16>(kNaN, kMlI), 0x7FC0);
  EXPECT_EQ(encode<bf16>(-kNaN, kSat), 0x7FFF);
}

TEST(Specials, DirectedOverflowFollowsIeee74) {
  // Overflow rounding toward zero gives max finite whatever the policy (IEEE 754-2019 7.4).
  const Policy rz_inf{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda};
  const Policy ru_inf{Round::kUp, Overflow::kInf, NanEncoding::kCuda};
  const Policy rd_nan{Round::kDown, Overflow::kNaN, NanEncoding::kCuda};
  EXPECT_EQ(encode<fp16>(1e6f, rz_inf), 0x7BFF);
  EXPECT_EQ(encode<fp16>(1e6f, ru_inf), 0x7C00);
  EXPECT_EQ(encode<fp16>(-1e6f, ru_inf), 0xFBFF);
  EXPECT_EQ(encode<e4m3fn>(1000.0f, rd_nan), 0x7E);
  EXPECT_EQ(encode<e4m3fn>(-1000.0f, rd_nan), 0xFF);
  EXPECT_EQ(encode<e4m3fn>(449.0f, Policy{Round::kUp, Overflow::kSaturate, NanEncoding::kCuda}),
            0x7E);
}

TEST(Specials, Fp22TruncationView) {
  // fp32_truncate_to_fp22_bits == RZ conversion to fp22, viewed back in FP32 (low 10 bits zero).
  const Policy rz{Round::kTowardZero, Overflow::kInf, NanEncoding::kIeee};
  std::uint32_t x = 12345;
  for (int i = 0; i < 2000000; ++i) {
    x = x * 1664525u + 1013904223u;
    if (is_nan_bits<fp32>(x)) continue;
    ASSERT_EQ(fp32_truncate_to_fp22_bits(x), fp22_to_fp32_bits(convert<fp22, fp32>(x, rz)))
        << std::hex << x;
  }
  EXPECT_EQ(fp32_truncate_to_fp22_bits(0x3F800001u),
            0x3F800000u);  // 1 + 2^-23 -> 1 (SageAttention2 4.3)
  EXPECT_EQ(fp32_truncate_to_fp22_bits(0x3F800400u), 0x3F800400u);  // 1 + 2^-13 kept
  EXPECT_EQ(fp32_truncate_to_fp22_bits(0xBF8003FFu), 0xBF800000u);  // toward zero for negatives
  EXPECT_EQ(fp32_truncate_to_fp22_bits(0x7FC00001u) & 0x7FC00000u, 0x7FC00000u);  // NaN stays NaN
}

}  // namespace
}  // namespace attnsim
