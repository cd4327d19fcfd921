// The one parametric binary floating-point format (1 sign, E exponent, M mantissa bits) and the
// one integer-only conversion routine that every concrete format uses.
//
//   bit:   [ S | E exponent bits (biased) | M mantissa bits ]
//
// Two families of special values (STYLE.md 2, names as in ml_dtypes/LLVM):
//   Specials::kIeee   all-ones exponent = Inf (mantissa 0) or NaN (e5m2, fp16, bf16, fp32, fp22)
//   Specials::kFn     "finite": no Inf; only S.1111.111 is NaN, so the all-ones exponent still
//                     holds finite values (OCP E4M3 "e4m3fn", max 448)
//
// Conversion works on (sign, integer significand, binary exponent) triples with guard/round/sticky
// bits and assembles the result bits directly: no libm, no ldexp, no floating-point arithmetic at
// all, so the result does not depend on the host FPU's rounding mode, FTZ/DAZ or FMA contraction.
// (Same approach as CUTLASS exmy_base.h round_significand and CPFloat's mask rounding.)
// FP64 sources are converted in one rounding step, never through FP32 (numerics-anchors.md 3.1:
// CUTLASS bfloat16_t(double) and universal double-round; ml_dtypes and CUDA's
// __nv_cvt_double_to_fp8 do not).
#pragma once

#include <cstdint>
#include <type_traits>

#include "formats/config.hpp"
#include "formats/policy.hpp"

namespace attnsim {

enum class Specials : std::uint8_t { kIeee, kFn };

template <int kBits>
using StorageFor = std::conditional_t<
    (kBits <= 8), std::uint8_t,
    std::conditional_t<(kBits <= 16), std::uint16_t,
                       std::conditional_t<(kBits <= 32), std::uint32_t, std::uint64_t>>>;

template <int kExp, int kMan, Specials kSpec>
struct FloatFormat {
  static_assert(kExp >= 2 && kExp <= 11 && kMan >= 1 && kMan <= 52, "unsupported layout");
  static constexpr int kExpBits = kExp;
  static constexpr int kManBits = kMan;
  static constexpr int kBits = 1 + kExp + kMan;
  static constexpr Specials kSpecials = kSpec;
  static constexpr bool kHasInf = kSpec == Specials::kIeee;
  using Storage = StorageFor<kBits>;

  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr std::uint64_t kExpFieldMax = (std::uint64_t{1} << kExp) - 1;
  static constexpr std::uint64_t kManMask = (std::uint64_t{1} << kMan) - 1;
  static constexpr std::uint64_t kSignBit = std::uint64_t{1} << (kBits - 1);
  static constexpr std::uint64_t kAbsMask = kSignBit - 1;
  // Largest finite magnitude: IEEE formats lose the all-ones exponent to Inf/NaN; fn formats
  // lose only the all-ones mantissa of the all-ones exponent.
  static constexpr std::uint64_t kMaxFinite = kHasInf ? (((kExpFieldMax - 1) << kMan) | kManMask)
                                                      : ((kExpFieldMax << kMan) | (kManMask - 1));
  static constexpr std::uint64_t kInf = kExpFieldMax << kMan;  // kIeee only
  static constexpr std::uint64_t kNanAllOnes = kAbsMask;       // CUDA's canonical NaN magnitude
  static constexpr std::uint64_t kQuietNan =                   // IEEE 754 6.2.1 quiet NaN
      kHasInf ? (kInf | (std::uint64_t{1} << (kMan - 1))) : kAbsMask;
  static constexpr std::uint64_t kMinNormal = std::uint64_t{1} << kMan;
  static constexpr std::uint64_t kMinSubnormal = 1;
  static constexpr int kMinNormalExp = 1 - kBias;                  // unbiased
  static constexpr int kMaxExp = int(kMaxFinite >> kMan) - kBias;  // unbiased, of max finite
  static constexpr int kMinQuantumExp = kMinNormalExp - kMan;      // exponent of the subnormal lsb
};

// A decoded value: kFinite means sig * 2^exp with sig != 0; kNaN keeps the mantissa left-aligned
// in `payload` (bit 63 = first mantissa bit) so a NaN can carry its payload to another format.
struct FloatParts {
  enum Kind : std::uint8_t { kZero, kFinite, kInf, kNaN };
  Kind kind;
  bool neg;
  int exp;
  std::uint64_t sig;
  std::uint64_t payload;
};

template <class Fmt>
ATTNSIM_HD constexpr bool is_nan_bits(typename Fmt::Storage bits) {
  const std::uint64_t a = std::uint64_t{bits} & Fmt::kAbsMask;
  return Fmt::kHasInf ? a > Fmt::kInf : a == Fmt::kAbsMask;
}

template <class Fmt>
ATTNSIM_HD constexpr bool is_inf_bits(typename Fmt::Storage bits) {
  return Fmt::kHasInf && (std::uint64_t{bits} & Fmt::kAbsMask) == Fmt::kInf;
}

template <class Fmt>
ATTNSIM_HD constexpr FloatParts decompose(typename Fmt::Storage bits) {
  const std::uint64_t b = bits;
  const bool neg = (b & Fmt::kSignBit) != 0;
  const std::uint64_t e = (b >> Fmt::kManBits) & Fmt::kExpFieldMax;
  const std::uint64_t m = b & Fmt::kManMask;
  if (is_nan_bits<Fmt>(bits)) {
    return {FloatParts::kNaN, neg, 0, 0, m << (64 - Fmt::kManBits)};
  }
  if (is_inf_bits<Fmt>(bits)) return {FloatParts::kInf, neg, 0, 0, 0};
  if (e == 0 && m == 0) return {FloatParts::kZero, neg, 0, 0, 0};
  if (e == 0) return {FloatParts::kFinite, neg, Fmt::kMinQuantumExp, m, 0};
  return {FloatParts::kFinite, neg, int(e) - Fmt::kBias - Fmt::kManBits, m | Fmt::kMinNormal, 0};
}

namespace detail {

template <class Fmt>
ATTNSIM_HD constexpr std::uint64_t nan_magnitude(NanEncoding enc) {
  return enc == NanEncoding::kCuda ? Fmt::kNanAllOnes : Fmt::kQuietNan;
}

// Result of an overflow (finite value whose rounded magnitude exceeds max finite).
template <class Fmt>
ATTNSIM_HD constexpr std::uint64_t overflow_result(bool neg, Policy p) {
  const std::uint64_t sign = neg ? Fmt::kSignBit : 0;
  // IEEE 754-2019 7.4: rounding toward zero never produces an infinity.
  const bool toward_zero = p.round == Round::kTowardZero || (p.round == Round::kDown && !neg) ||
                           (p.round == Round::kUp && neg);
  if (toward_zero || p.overflow == Overflow::kSaturate || p.overflow == Overflow::kSaturateFinite) {
    return sign | Fmt::kMaxFinite;
  }
  if (p.overflow == Overflow::kInf && Fmt::kHasInf) return sign | Fmt::kInf;
  return sign | nan_magnitude<Fmt>(p.nan);
}

// sig · 2^-shift rounded to an integer under r, for the value's sign `neg`: the guard (round bit)
// and sticky logic shared by every float and integer conversion. shift <= 0 shifts left exactly.
ATTNSIM_HD constexpr std::uint64_t shift_round(std::uint64_t sig, int shift, bool neg, Round r) {
  if (shift <= 0) return sig << (-shift);
  std::uint64_t kept = 0;
  bool round_bit = false;
  bool sticky = false;
  if (shift < 64) {
    kept = sig >> shift;
    round_bit = ((sig >> (shift - 1)) & 1) != 0;
    sticky = (sig & ((std::uint64_t{1} << (shift - 1)) - 1)) != 0;
  } else if (shift == 64) {
    round_bit = (sig >> 63) != 0;
    sticky = (sig << 1) != 0;
  } else {
    sticky = sig != 0;  // far below half a unit
  }
  bool up = false;
  switch (r) {
    case Round::kNearestEven:
      up = round_bit && (sticky || (kept & 1));
      break;
    case Round::kNearestAway:
      up = round_bit;
      break;
    case Round::kTowardZero:
      up = false;
      break;
    case Round::kUp:
      up = !neg && (round_bit || sticky);
      break;
    case Round::kDown:
      up = neg && (round_bit || sticky);
      break;
  }
  return kept + (up ? 1 : 0);
}

}  // namespace detail

// Round a decoded value into Fmt under policy p. All integer arithmetic.
template <class Fmt>
ATTNSIM_HD constexpr typename Fmt::Storage round_pack(FloatParts x, Policy p) {
  using S = typename Fmt::Storage;
  const std::uint64_t sign = x.neg ? Fmt::kSignBit : 0;
  switch (x.kind) {
    case FloatParts::kZero:
      return S(sign);
    case FloatParts::kNaN:
      if (p.nan == NanEncoding::kCuda) return S(Fmt::kNanAllOnes);
      if (p.nan == NanEncoding::kMlDtypes || !Fmt::kHasInf) return S(sign | Fmt::kQuietNan);
      // kIeee: keep the top payload bits, force the quiet bit.
      return S(sign | Fmt::kQuietNan | (x.payload >> (64 - Fmt::kManBits)));
    case FloatParts::kInf:
      if (p.overflow == Overflow::kSaturate) return S(sign | Fmt::kMaxFinite);
      if (Fmt::kHasInf && p.overflow != Overflow::kNaN) return S(sign | Fmt::kInf);
      return S(sign | detail::nan_magnitude<Fmt>(p.nan));
    case FloatParts::kFinite:
      break;
  }
  // value = sig * 2^exp. Unbiased exponent of the leading bit:
  const int msb = 63 - countl_zero64(x.sig);
  const int e_lead = x.exp + msb;
  // Exponent of the result's lsb: normal numbers keep kManBits fraction bits, subnormals share
  // the fixed quantum 2^kMinQuantumExp.
  const int q = (e_lead > Fmt::kMinNormalExp ? e_lead : Fmt::kMinNormalExp) - Fmt::kManBits;
  // Overflow before rounding (avoids shifting huge exponents): the lead exponent already exceeds
  // the largest finite exponent by more than rounding can explain.
  if (e_lead > Fmt::kMaxExp + 1) return S(detail::overflow_result<Fmt>(x.neg, p));
  const int shift = q - x.exp;  // number of significand bits dropped
  const std::uint64_t kept = detail::shift_round(x.sig, shift, x.neg, p.round);
  if (kept == 0) return S(sign);
  // Assemble: subnormal quantum -> biased exponent 0; a carry out of the significand moves into
  // the exponent field by itself (the classic "add the significand to the shifted exponent").
  const std::uint64_t mag = (std::uint64_t(q - Fmt::kMinQuantumExp) << Fmt::kManBits) + kept;
  if (mag > Fmt::kMaxFinite) return S(detail::overflow_result<Fmt>(x.neg, p));
  return S(sign | mag);
}

// Any format to any format, one rounding.
template <class To, class From>
ATTNSIM_HD constexpr typename To::Storage convert(typename From::Storage bits, Policy p) {
  return round_pack<To>(decompose<From>(bits), p);
}

}  // namespace attnsim
