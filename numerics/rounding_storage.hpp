// Round an FP32 value to a kernel's storage format and decode it back (the operand a GEMM sees),
// with the conversion each format family is reached by.
#pragma once

#include <string>

#include "formats/encoding.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// The conversion each storage format is reached by, named explicitly (STYLE 3). The defaults are
// the instructions the kernels emit, both proven on the H100 (data/hw/README.md):
//  fp8   cvt.rn.satfinite.{e4m3,e5m2}x2.f32: RNE, finite overflow and Inf saturate to +-max
//        (every __nv_fp8_* constructor; FA3/SageAttention FP8 paths)
//  half  cvt.rn.{bf16,f16}.f32: RNE, overflow to +-Inf (IEEE; __float2bfloat16_rn,
//        cutlass::NumericConverter<half_t, float, round_to_nearest>, FA2's convert_type)
struct StoragePolicy {
  Policy fp8 = kCudaSatfinite;
  Policy half = Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
};

// x rounded to the float encoding `e` (fp32, bf16, fp16, e4m3fn, e5m2) under `p` and decoded to
// FP32 (exact: every such format is a subset of FP32).
inline float round_to_storage(float x, Encoding e, const StoragePolicy& p) {
  switch (e) {
    case Encoding::kFp32:
    case Encoding::kFp64:
      return x;
    case Encoding::kBf16:
    case Encoding::kFp16:
      return decode_float_bits(e, encode_float_bits(e, x, p.half));
    case Encoding::kE4m3fn:
    case Encoding::kE5m2:
      return decode_float_bits(e, encode_float_bits(e, x, p.fp8));
    default:
      break;
  }
  return x;
}

// With the kernels' default conversions (StoragePolicy{}).
inline float round_to_storage(float x, Encoding e) {
  return round_to_storage(x, e, StoragePolicy{});
}

// "rne/saturate": the rounding and overflow spellings of formats/policy.hpp (the NaN encoding of
// a kernel's conversion is always CUDA's).
inline std::string policy_name(const Policy& p) {
  return std::string(round_spelling(p.round)) + "/" + overflow_spelling(p.overflow);
}

}  // namespace attnsim
