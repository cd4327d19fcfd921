// 32/64-bit IEEE views (fp32, fp64), the 1-8-13 "fp22" FP8 tensor-core accumulator view, and the
// float <-> format entry points every other format header uses.
#pragma once

#include <cstdint>

#include "formats/config.hpp"
#include "formats/exmy.hpp"

namespace attnsim {

using fp32 = FloatFormat<8, 23, Specials::kIeee>;
using fp64 = FloatFormat<11, 52, Specials::kIeee>;
// fp22: 1 sign, 8 exponent, 13 mantissa bits, FP32's bias. SageAttention2 section 4.3 (and
// thu-ml/SageAttention#287) observe that the FP32 accumulator of FP8 mma on Ada/Hopper keeps only
// 13 explicit mantissa bits, the low 10 being truncated. Storage is the 22-bit field itself;
// fp22_to_fp32_bits() gives the FP32 register view (low 10 bits zero).
using fp22 = FloatFormat<8, 13, Specials::kIeee>;

static_assert(fp32::kMaxFinite == 0x7F7FFFFF && fp32::kQuietNan == 0x7FC00000);
static_assert(fp64::kBias == 1023 && fp22::kBias == 127 && fp22::kMinQuantumExp == -139);

ATTNSIM_HD constexpr std::uint32_t f32_bits(float x) { return bit_cast<std::uint32_t>(x); }
ATTNSIM_HD constexpr float f32_from_bits(std::uint32_t b) { return bit_cast<float>(b); }
ATTNSIM_HD constexpr std::uint64_t f64_bits(double x) { return bit_cast<std::uint64_t>(x); }
ATTNSIM_HD constexpr double f64_from_bits(std::uint64_t b) { return bit_cast<double>(b); }

// FP32 -> Fmt, one rounding.
template <class Fmt>
ATTNSIM_HD constexpr typename Fmt::Storage encode(float x, Policy p) {
  return convert<Fmt, fp32>(f32_bits(x), p);
}
// FP64 -> Fmt, one rounding (never through FP32).
template <class Fmt>
ATTNSIM_HD constexpr typename Fmt::Storage encode(double x, Policy p) {
  return convert<Fmt, fp64>(f64_bits(x), p);
}
// Compile-time-policy spelling (STYLE.md 3): encode<e4m3fn, Round::kNearestEven,
// Overflow::kSaturate, NanEncoding::kCuda>(x).
template <class Fmt, Round R, Overflow O, NanEncoding N, class T>
ATTNSIM_HD constexpr typename Fmt::Storage encode(T x) {
  return encode<Fmt>(x, Policy{R, O, N});
}

// Exact widening. NaNs keep sign and payload (quiet bit set); every other value is exact because
// FP32/FP64 contain every value of every narrower format.
inline constexpr Policy kExactWiden{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee};

template <class Fmt>
ATTNSIM_HD constexpr float decode_f32(typename Fmt::Storage bits) {
  return f32_from_bits(convert<fp32, Fmt>(bits, kExactWiden));
}
template <class Fmt>
ATTNSIM_HD constexpr double decode_f64(typename Fmt::Storage bits) {
  return f64_from_bits(convert<fp64, Fmt>(bits, kExactWiden));
}

// The FP32 register view of an FP32 value truncated to fp22 (low 10 mantissa bits cleared, sign,
// zero, Inf and NaN-ness kept). Truncation is round-toward-zero of the bit field, which is what
// SageAttention2 section 4.3 observed.
ATTNSIM_HD constexpr std::uint32_t fp22_to_fp32_bits(std::uint32_t fp22_bits) {
  return fp22_bits << 10;
}
ATTNSIM_HD constexpr std::uint32_t fp32_truncate_to_fp22_bits(std::uint32_t fp32_bits) {
  // Exactly convert<fp22, fp32>(b, {kTowardZero, kInf, kIeee}) for non-NaN b (tested); NaNs
  // keep their top 13 payload bits plus the quiet bit.
  return is_nan_bits<fp32>(fp32_bits) ? ((fp32_bits | 0x00400000u) & ~0x3FFu)
                                      : (fp32_bits & ~0x3FFu);
}

}  // namespace attnsim
