// Round an FP32 value to a kernel's storage format and decode it back (the operand a GEMM sees).
#pragma once

#include <string>

#include "formats/float16.hpp"
#include "formats/float32.hpp"
#include "formats/float8.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// Formats a tensor is stored in before it feeds a matrix product.
enum class Storage { kFp32, kBf16, kFp16, kE4m3fn, kE5m2 };

inline std::string storage_name(Storage s) {
  switch (s) {
    case Storage::kFp32:
      return "fp32";
    case Storage::kBf16:
      return "bf16";
    case Storage::kFp16:
      return "fp16";
    case Storage::kE4m3fn:
      return "e4m3fn";
    case Storage::kE5m2:
      return "e5m2";
  }
  return "?";
}

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

// x rounded to `s` under `p` and decoded to FP32 (exact: every format here is a subset of FP32).
inline float round_to_storage(float x, Storage s, const StoragePolicy& p) {
  switch (s) {
    case Storage::kFp32:
      return x;
    case Storage::kBf16:
      return decode_f32<bf16>(encode<bf16>(x, p.half));
    case Storage::kFp16:
      return decode_f32<fp16>(encode<fp16>(x, p.half));
    case Storage::kE4m3fn:
      return decode_f32<e4m3fn>(encode<e4m3fn>(x, p.fp8));
    case Storage::kE5m2:
      return decode_f32<e5m2>(encode<e5m2>(x, p.fp8));
  }
  return x;
}

// With the kernels' default conversions (StoragePolicy{}).
inline float round_to_storage(float x, Storage s) {
  return round_to_storage(x, s, StoragePolicy{});
}

inline std::string policy_name(const Policy& p) {
  std::string r = p.round == Round::kNearestEven   ? "rne"
                  : p.round == Round::kNearestAway ? "rna"
                  : p.round == Round::kTowardZero  ? "rz"
                  : p.round == Round::kUp          ? "ru"
                                                   : "rd";
  r += p.overflow == Overflow::kSaturate         ? "/sat"
       : p.overflow == Overflow::kSaturateFinite ? "/satfinite-keepinf"
       : p.overflow == Overflow::kNaN            ? "/nan"
                                                 : "/inf";
  return r;
}

}  // namespace attnsim
