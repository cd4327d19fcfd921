// Small arithmetic helpers the stage functions share (sim/pipeline/stages/).
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/encoding.hpp"
#include "numerics/fp32_bits.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim::stage_util {

// int32 -> FP32 under a rounding mode (cvt.rn.f32.s32 / __int2float_rz): exact below 2^24.
inline float int_to_f32(std::int32_t v, Round r) {
  if (v > -(1 << 24) && v < (1 << 24)) return float(v);
  return f32_from_bits(encode_float_bits(Encoding::kFp32, double(v), Policy{r, Overflow::kInf,
                                                                            NanEncoding::kCuda}));
}

// The max snapped to an integer in the exponent's units (ceil, or ties away: AMLA CAST_ROUND).
template <class T>
T snap(T x, MaxRound r) {
  if (r == MaxRound::kCeil) return std::ceil(x);
  if (r == MaxRound::kNearest) return std::round(x);
  return x;
}

// O·2^n by an integer addition on the bits (AMLA Eq. 3; FP64: the same trick with 2^52).
inline float int_add_pow2(float o, std::int32_t n) { return mul_pow2_by_int_add(o, n); }
inline double int_add_pow2(double o, std::int32_t n) {
  return f64_from_bits(f64_bits(o) + (std::uint64_t(std::int64_t(n)) << 52));
}

inline int round_up(int n, int k) { return (n + k - 1) / k * k; }

// The encoding bits of a value exactly representable in `e` (a float or integer encoding).
inline std::uint32_t encoding_of(Encoding e, float v) {
  return is_float_encoding(e) ? encode_float_bits(e, v, kCudaRn)
                              : int_to_encoding(e, std::int32_t(v));
}

}  // namespace attnsim::stage_util
