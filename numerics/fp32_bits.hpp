// FP32 bit reinterpretation and AMLA's multiplication by 2^n as an INT32 addition.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/config.hpp"

namespace attnsim {

ATTNSIM_HD constexpr std::int32_t as_int32(float f) { return bit_cast<std::int32_t>(f); }
ATTNSIM_HD constexpr float as_fp32(std::int32_t i) { return bit_cast<float>(i); }

// An INT32 added to an FP32 value's bits, wrapping modulo 2^32 like the hardware's INT32 add (no UB
// here: done in uint32): AMLA's AtomicAdd<INT32> on O in global memory (Alg. 2 lines 16-17).
ATTNSIM_HD constexpr float add_to_bits(float f, std::int32_t i) {
  return as_fp32(std::int32_t(std::uint32_t(as_int32(f)) + std::uint32_t(i)));
}

// AMLA (Liao et al., Eq. 7 and Lemma 3.1): F · 2^n = AS_FP32(AS_INT32(F) + n · 2^23).
ATTNSIM_HD constexpr float mul_pow2_by_int_add(float f, std::int32_t n) {
  return add_to_bits(f, std::int32_t(std::uint32_t(n) << 23));
}

// Lemma 3.1's condition: F's exponent field E satisfies 0 < E < 255 (F normal, not Inf/NaN) and
// -E < n < 255 - E (the result's exponent field stays in 1..254, i.e. the result is normal).
// Outside it the addition is not a multiplication: a zero or subnormal F becomes a normal number
// (0 + n·2^23 is 2^(n-127)), E + n = 255 gives the Inf/NaN patterns, E + n > 255 carries into the
// sign bit, E + n = 0 leaves the mantissa as a subnormal (m·2^-149, not F·2^n), and E + n < 0
// borrows from the sign bit. In general the mantissa is untouched and (sign, E) becomes
// (256·sign + E + n) mod 512 (tests/numerics/fp32_bits_test.cpp checks this field-wise).
ATTNSIM_HD constexpr bool amla_add_valid(float f, std::int32_t n) {
  const std::int32_t e = (as_int32(f) >> 23) & 0xFF;
  return e > 0 && e < 255 && n > -e && n < 255 - e;
}

// The H100's FP32 atomicAdd on global memory (RED.E.ADD.F32.FTZ.RN in the SASS; probed in
// data/hw/h100/amla/amla_probe.txt): subnormal operands and results flushed to zero with their
// sign, round to nearest even, a NaN result as the canonical 0x7FFFFFFF. Host only.
inline float red_add_f32_ftz(float a, float b) {
  auto ftz = [](float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; };
  const float r = ftz(ftz(a) + ftz(b));
  return r != r ? as_fp32(0x7FFFFFFF) : r;
}

}  // namespace attnsim
