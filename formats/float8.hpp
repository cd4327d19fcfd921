// OCP 8-bit floating point: e4m3fn and e5m2 (OCP OFP8 spec v1.0), with the conversions CUDA and
// ml_dtypes perform named as policies.
#pragma once

#include "formats/exmy.hpp"
#include "formats/float32.hpp"

namespace attnsim {

// e4m3fn: 1-4-3, bias 7, no Inf, NaN = S.1111.111, max 448 (0x7E), min normal 2^-6 (0x08),
// min subnormal 2^-9 (0x01). The "fn" (finite) suffix is ml_dtypes'/LLVM's (ml_dtypes float8.h).
using e4m3fn = FloatFormat<4, 3, Specials::kFn>;
// e5m2: 1-5-2, bias 15, IEEE specials, max 57344 (0x7B), min subnormal 2^-16.
using e5m2 = FloatFormat<5, 2, Specials::kIeee>;

static_assert(e4m3fn::kMaxFinite == 0x7E && e4m3fn::kBias == 7 && e4m3fn::kMaxExp == 8);
static_assert(e5m2::kMaxFinite == 0x7B && e5m2::kInf == 0x7C && e5m2::kQuietNan == 0x7E);
static_assert(e4m3fn::kMinQuantumExp == -9 && e5m2::kMinQuantumExp == -16);

// Named conversions of real stacks (numerics-anchors.md 3.4, 3.5).
// CUDA cvt.rn.satfinite.e4m3x2.f32 / __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3):
ATTNSIM_HD constexpr std::uint8_t e4m3fn_satfinite(float x) {
  return encode<e4m3fn>(x, kCudaSatfinite);
}
// CUDA cvt.rn.satfinite.e5m2x2.f32:
ATTNSIM_HD constexpr std::uint8_t e5m2_satfinite(float x) {
  return encode<e5m2>(x, kCudaSatfinite);
}

}  // namespace attnsim
