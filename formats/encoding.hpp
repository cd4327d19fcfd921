// The one run-time enum of storage encodings (what an operand, P or O is stored in), its name
// table and traits, and bit-level encode/decode dispatching to the format headers. The tensor-core
// models (numerics/mma.hpp), the attention pipeline (sim/pipeline/) and the command line all name
// formats through this table, so a format has one spelling everywhere.
#pragma once

#include <cstdint>

#include "formats/config.hpp"
#include "formats/exmy.hpp"
#include "formats/float16.hpp"
#include "formats/float32.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// Names are ml_dtypes'/LLVM's for floats (STYLE.md 2) and PTX's for integers (s8, not int8: CUDA
// owns int4/uint2 as vector types). fp64 is the "no rounding" choice of the simulators (an FP64
// intermediate kept as is); it has no 32-bit encoding.
enum class Encoding : std::uint8_t {
  kFp64,
  kFp32,
  kBf16,
  kFp16,
  kE4m3fn,
  kE5m2,
  kS8,
  kU8,
  kS4,
  kS2
};

struct EncodingTraits {
  Encoding enc;
  const char* name;
  int bits;                       // storage bits of one element
  bool is_float;                  // floating point (else two's-complement or unsigned integer)
  bool is_signed;                 // integers: signed
  int exp_bits;                   // floats: exponent field width
  int man_bits;                   // floats: mantissa field width
  std::int32_t int_min, int_max;  // integers: range
};

// The table, as a switch: namespace-scope constexpr arrays are not readable from device code.
ATTNSIM_HD constexpr EncodingTraits encoding_traits(Encoding e) {
  switch (e) {
    case Encoding::kFp64:
      return {Encoding::kFp64, "fp64", 64, true, true, 11, 52, 0, 0};
    case Encoding::kFp32:
      return {Encoding::kFp32, "fp32", 32, true, true, 8, 23, 0, 0};
    case Encoding::kBf16:
      return {Encoding::kBf16, "bf16", 16, true, true, 8, 7, 0, 0};
    case Encoding::kFp16:
      return {Encoding::kFp16, "fp16", 16, true, true, 5, 10, 0, 0};
    case Encoding::kE4m3fn:
      return {Encoding::kE4m3fn, "e4m3fn", 8, true, true, 4, 3, 0, 0};
    case Encoding::kE5m2:
      return {Encoding::kE5m2, "e5m2", 8, true, true, 5, 2, 0, 0};
    case Encoding::kS8:
      return {Encoding::kS8, "s8", 8, false, true, 0, 0, s8::kMin, s8::kMax};
    case Encoding::kU8:
      return {Encoding::kU8, "u8", 8, false, false, 0, 0, u8::kMin, u8::kMax};
    case Encoding::kS4:
      return {Encoding::kS4, "s4", 4, false, true, 0, 0, s4::kMin, s4::kMax};
    case Encoding::kS2:
      return {Encoding::kS2, "s2", 2, false, true, 0, 0, s2::kMin, s2::kMax};
  }
  return {Encoding::kFp32, "?", 0, false, false, 0, 0, 0, 0};
}
inline constexpr int kEncodingCount = int(Encoding::kS2) + 1;

ATTNSIM_HD constexpr const char* encoding_name(Encoding e) { return encoding_traits(e).name; }
ATTNSIM_HD constexpr bool is_float_encoding(Encoding e) { return encoding_traits(e).is_float; }

// The traits cross-checked against the format types they stand for (STYLE.md 1).
static_assert(encoding_traits(Encoding::kE4m3fn).man_bits == e4m3fn::kManBits &&
              encoding_traits(Encoding::kE5m2).exp_bits == e5m2::kExpBits &&
              encoding_traits(Encoding::kBf16).man_bits == bf16::kManBits &&
              encoding_traits(Encoding::kFp16).exp_bits == fp16::kExpBits &&
              encoding_traits(Encoding::kFp32).man_bits == fp32::kManBits &&
              encoding_traits(Encoding::kS4).int_min == -8);

namespace detail {
ATTNSIM_HD constexpr bool str_eq(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}
}  // namespace detail

// The encoding named `s` (one of the names above); false when there is none.
ATTNSIM_HD constexpr bool parse_encoding(const char* s, Encoding* out) {
  for (int i = 0; i < kEncodingCount; ++i) {
    if (detail::str_eq(s, encoding_traits(Encoding(i)).name)) {
      *out = Encoding(i);
      return true;
    }
  }
  return false;
}

// A float encoding's bits decomposed (sign, significand, exponent), as decompose<Fmt> does.
// fp64 and the integers are not bit encodings of 32 bits or fewer: they decompose to zero here
// (callers check is_float_encoding and the width first).
ATTNSIM_HD constexpr FloatParts decompose_bits(Encoding e, std::uint32_t bits) {
  switch (e) {
    case Encoding::kFp32:
      return decompose<fp32>(bits);
    case Encoding::kBf16:
      return decompose<bf16>(std::uint16_t(bits));
    case Encoding::kFp16:
      return decompose<fp16>(std::uint16_t(bits));
    case Encoding::kE4m3fn:
      return decompose<e4m3fn>(std::uint8_t(bits));
    case Encoding::kE5m2:
      return decompose<e5m2>(std::uint8_t(bits));
    default:
      break;
  }
  return FloatParts{FloatParts::kZero, false, 0, 0, 0};
}

// FP32 or FP64 -> a float encoding of at most 32 bits, one rounding under `p` (an FP64 source is
// rounded once, never through FP32; an FP32 source to fp32 is kept as is).
template <class T>
ATTNSIM_HD constexpr std::uint32_t encode_float_bits(Encoding e, T x, Policy p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
  switch (e) {
    case Encoding::kFp32:
      if constexpr (sizeof(T) == 4) {
        return f32_bits(x);
      } else {
        return encode<fp32>(x, p);
      }
    case Encoding::kBf16:
      return encode<bf16>(x, p);
    case Encoding::kFp16:
      return encode<fp16>(x, p);
    case Encoding::kE4m3fn:
      return encode<e4m3fn>(x, p);
    case Encoding::kE5m2:
      return encode<e5m2>(x, p);
    default:
      break;
  }
  return 0;
}

// A float encoding's bits widened exactly to FP32 (NaNs keep sign and payload, quiet bit set).
ATTNSIM_HD constexpr float decode_float_bits(Encoding e, std::uint32_t bits) {
  switch (e) {
    case Encoding::kFp32:
      return f32_from_bits(bits);
    case Encoding::kBf16:
      return decode_f32<bf16>(std::uint16_t(bits));
    case Encoding::kFp16:
      return decode_f32<fp16>(std::uint16_t(bits));
    case Encoding::kE4m3fn:
      return decode_f32<e4m3fn>(std::uint8_t(bits));
    case Encoding::kE5m2:
      return decode_f32<e5m2>(std::uint8_t(bits));
    default:
      break;
  }
  return 0.0f;
}

// x rounded to a float encoding under `p` and decoded back (the value a kernel holds after the
// conversion); fp32 and fp64 return x as it is (an FP32 input is already an FP32 value).
ATTNSIM_HD constexpr float round_to(Encoding e, float x, Policy p) {
  if (e == Encoding::kFp32 || e == Encoding::kFp64) return x;
  return decode_float_bits(e, encode_float_bits(e, x, p));
}
// The same from an FP64 value: one rounding, never through FP32 (fp64 returns the FP32 value
// nearest x, as an FP32 variable holding it would).
ATTNSIM_HD constexpr float round_to(Encoding e, double x, Policy p) {
  if (e == Encoding::kFp32 || e == Encoding::kFp64) return float(x);
  return decode_float_bits(e, encode_float_bits(e, x, p));
}

// An integer encoding's value from its bits (two's complement or unsigned in the low `bits`).
ATTNSIM_HD constexpr std::int32_t int_from_encoding(Encoding e, std::uint32_t bits) {
  switch (e) {
    case Encoding::kS8:
      return int_from_bits<s8>(std::uint8_t(bits));
    case Encoding::kU8:
      return int_from_bits<u8>(std::uint8_t(bits));
    case Encoding::kS4:
      return int_from_bits<s4>(std::uint8_t(bits));
    case Encoding::kS2:
      return int_from_bits<s2>(std::uint8_t(bits));
    default:
      break;
  }
  return 0;
}

// An integer (already in range) as the encoding's bits.
ATTNSIM_HD constexpr std::uint32_t int_to_encoding(Encoding e, std::int32_t v) {
  switch (e) {
    case Encoding::kS8:
      return int_to_bits<s8>(v);
    case Encoding::kU8:
      return int_to_bits<u8>(v);
    case Encoding::kS4:
      return int_to_bits<s4>(v);
    case Encoding::kS2:
      return int_to_bits<s2>(v);
    default:
      break;
  }
  return 0;
}

// A float or double rounded to an integer encoding under r, saturating (PTX cvt.rni.sat and its
// directed siblings; NaN gives 0).
template <class T>
ATTNSIM_HD constexpr std::int32_t round_to_encoding_int(Encoding e, T x, Round r) {
  switch (e) {
    case Encoding::kS8:
      return round_to_int<s8>(x, r, IntOverflow::kSaturate);
    case Encoding::kU8:
      return round_to_int<u8>(x, r, IntOverflow::kSaturate);
    case Encoding::kS4:
      return round_to_int<s4>(x, r, IntOverflow::kSaturate);
    case Encoding::kS2:
      return round_to_int<s2>(x, r, IntOverflow::kSaturate);
    default:
      break;
  }
  return 0;
}

static_assert(decode_float_bits(Encoding::kE4m3fn, 0x7E) == 448.0f);
static_assert(encode_float_bits(Encoding::kE4m3fn, 1000.0f, kCudaSatfinite) == 0x7E);
static_assert(int_from_encoding(Encoding::kS4, 0x8) == -8 &&
              int_to_encoding(Encoding::kS2, -1) == 3);

}  // namespace attnsim
