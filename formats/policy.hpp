// Rounding, overflow and NaN-encoding policies: every conversion names all three explicitly.
#pragma once

#include <cstdint>

#include "formats/config.hpp"

namespace attnsim {

// Rounding of a value that falls between two representable neighbours.
// kNearestEven is IEEE roundTiesToEven (CUDA cvt.rn / cvt.rni, ml_dtypes, torch).
// kNearestAway is ties-away-from-zero (C roundf, qtorch, microxcaling "nearest",
// CUTLASS round_half_ulp_truncate).
enum class Round : std::uint8_t { kNearestEven, kNearestAway, kTowardZero, kUp, kDown };

// What a finite value whose rounded magnitude exceeds the format's max finite becomes, and what
// +-Inf inputs become.
//  kSaturate       +-max finite, Inf inputs too: CUDA cvt.rn.satfinite / __NV_SATFINITE (PTX ISA:
//                  "|x| > MAX_NORM -> sign-preserved MAX_NORM"), CUTLASS float_e4m3_t.
//  kSaturateFinite finite overflow -> +-max, but Inf inputs stay Inf (or become NaN where the
//                  format has no Inf): ml_dtypes ConvertFrom<kSaturate=true>.
//  kNaN            NaN (sign kept): OCP non-saturating E4M3, CUDA __NV_NOSAT, ml_dtypes astype.
//  kInf            +-Inf (IEEE 754 default): E5M2/BF16/FP16 non-saturating. For a format without
//                  Inf (e4m3fn) it falls back to kNaN; the command line rejects that combination.
// Directed roundings follow IEEE 754-2019 section 7.4 whatever the policy: an overflow that rounds
// toward zero (RZ; RD for positive; RU for negative) gives +-max finite, never Inf or NaN.
enum class Overflow : std::uint8_t { kSaturate, kSaturateFinite, kNaN, kInf };

// Which NaN bit pattern a NaN input (not an overflow) is encoded as.
//  kCuda      sign dropped, all-ones magnitude: e4m3fn/e5m2 0x7F, bf16/fp16 0x7FFF, fp32
//             0x7FFFFFFF (CUDA cuda_fp8.hpp float path, cuda_fp16.hpp host __internal_float2half,
//             CUTLASS host; device cvt patterns are recorded in data/hw).
//  kMlDtypes  sign kept, quiet NaN with only the top mantissa bit set: e5m2 0x7E/0xFE, bf16
//             0x7FC0/0xFFC0, fp16 0x7E00/0xFE00; e4m3fn 0x7F/0xFF (ml_dtypes float8.h, Eigen).
//  kIeee      sign kept, payload truncated to the format, quiet bit forced (x86 F16C
//             _cvtss_sh, IEEE 754 section 6.2.3).
// NaNs made by an overflow under Overflow::kNaN always keep the sign (CUDA __NV_NOSAT and
// ml_dtypes agree on that) and use the kCuda/kMlDtypes magnitude of the chosen encoding.
enum class NanEncoding : std::uint8_t { kCuda, kMlDtypes, kIeee };

// The three choices together; passed by value to every conversion.
struct Policy {
  Round round;
  Overflow overflow;
  NanEncoding nan;

  ATTNSIM_HD constexpr bool operator==(const Policy& o) const {
    return round == o.round && overflow == o.overflow && nan == o.nan;
  }
  ATTNSIM_HD constexpr bool operator!=(const Policy& o) const { return !(*this == o); }
};

// The spellings of the policies, one table each, in enum order: the command line (`attnsim convert
// --round/--overflow/--nan-encoding`), method strings and describe() lines all use these.
inline constexpr const char* kRoundNames[] = {"rne", "rna", "rz", "ru", "rd"};
inline constexpr const char* kOverflowNames[] = {"saturate", "saturate-finite", "nan", "inf"};
inline constexpr const char* kNanEncodingNames[] = {"cuda", "ml_dtypes", "ieee"};
static_assert(int(Round::kDown) == 4 && int(Overflow::kInf) == 3 && int(NanEncoding::kIeee) == 2);

ATTNSIM_HD constexpr const char* round_spelling(Round r) { return kRoundNames[int(r)]; }
ATTNSIM_HD constexpr const char* overflow_spelling(Overflow o) { return kOverflowNames[int(o)]; }
ATTNSIM_HD constexpr const char* nan_encoding_spelling(NanEncoding n) {
  return kNanEncodingNames[int(n)];
}

// Named policies for the conventions that real stacks use.
// CUDA cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (every __nv_fp8_* constructor, SageAttention's V path).
inline constexpr Policy kCudaSatfinite{Round::kNearestEven, Overflow::kSaturate,
                                       NanEncoding::kCuda};
// CUDA cvt.rn.{bf16,f16}.f32 and every other round-to-nearest-even conversion of a GPU kernel
// without .satfinite (IEEE overflow to Inf, the device's NaN 0x7FFF): what `__float2half_rn`,
// `__float2bfloat16_rn`, `.to(torch.float16)` and the kernels' epilogue casts do.
inline constexpr Policy kCudaRn{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
// ml_dtypes astype / OCP non-saturating E4M3 (overflow -> NaN).
inline constexpr Policy kMlDtypesE4m3{Round::kNearestEven, Overflow::kNaN, NanEncoding::kMlDtypes};
// ml_dtypes astype for IEEE-like formats (e5m2, bf16, fp16): overflow -> Inf.
inline constexpr Policy kMlDtypesIeee{Round::kNearestEven, Overflow::kInf, NanEncoding::kMlDtypes};
// IEEE 754 default conversion (cvt.rn.f16.f32, cvt.rn.bf16.f32 without .satfinite).
inline constexpr Policy kIeeeNearestEven{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee};

}  // namespace attnsim
