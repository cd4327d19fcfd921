// Table-driven FP32 -> 8-bit float conversion and the bf16 bias trick (see convert_table.hpp).
#include "numerics/convert_table.hpp"

#include <type_traits>

namespace attnsim {

template <class Fmt>
ConversionTable ConversionTable::build(Policy policy) {
  static_assert(Fmt::kBits == 8,
                "the 16-bit index is exact only for targets with <= 3 mantissa bits");
  static_assert(Fmt::kManBits <= 3, "the round bit must be FP32 bit 19 or above");
  ConversionTable t(std::is_same_v<Fmt, e4m3fn> ? "e4m3fn" : "e5m2", policy);
  t.table_.resize(std::size_t{1} << 17);
  for (std::uint32_t hi = 0; hi < (1u << 16); ++hi) {
    // Representatives of the two classes: low half zero, and low half 1 (any non-zero low half
    // gives the same result; the long test checks all of them).
    t.table_[hi << 1] = encode<Fmt>(f32_from_bits(hi << 16), policy);
    t.table_[(hi << 1) | 1] = encode<Fmt>(f32_from_bits((hi << 16) | 1u), policy);
  }
  return t;
}

template ConversionTable ConversionTable::build<e4m3fn>(Policy);
template ConversionTable ConversionTable::build<e5m2>(Policy);

void ConversionTable::convert_array(const float* x, std::size_t n, std::uint8_t* out) const {
  const std::uint8_t* table = table_.data();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = f32_bits(x[i]);
    out[i] = table[((u >> 16) << 1) | std::uint32_t((u & 0xFFFFu) != 0)];
  }
}

std::uint16_t bf16_rne_bias(float x, Policy policy) {
  const std::uint32_t u = f32_bits(x);
  // Exponent field 0xFF (Inf, NaN) and non-RNE roundings: the general encoder.
  if ((u & 0x7F800000u) == 0x7F800000u || policy.round != Round::kNearestEven) {
    return encode<bf16>(x, policy);
  }
  const std::uint16_t r = std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  // A finite input rounded to the Inf pattern overflowed: only kInf keeps that.
  if ((r & 0x7FFFu) == 0x7F80u && policy.overflow != Overflow::kInf) return encode<bf16>(x, policy);
  return r;
}

void bf16_convert_array(const float* x, std::size_t n, std::uint16_t* out, Policy policy) {
  if (policy.round != Round::kNearestEven) {
    for (std::size_t i = 0; i < n; ++i) out[i] = encode<bf16>(x[i], policy);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = f32_bits(x[i]);
    const std::uint16_t r = std::uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    // Rare inputs take the policy path: NaN and Inf (input exponent field 0xFF; a NaN's add may
    // even carry into the sign and out of the word, so the input is tested, not the result) and
    // finite overflows (result exponent field 0xFF).
    const bool special = (u & 0x7F800000u) == 0x7F800000u || (r & 0x7F80u) == 0x7F80u;
    out[i] = special ? bf16_rne_bias(x[i], policy) : r;
  }
}

void fp16_convert_array(const float* x, std::size_t n, std::uint16_t* out, Policy policy) {
  for (std::size_t i = 0; i < n; ++i) out[i] = encode<fp16>(x[i], policy);
}

}  // namespace attnsim
