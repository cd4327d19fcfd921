// Table-driven FP32 -> e4m3fn/e5m2 conversion for whole arrays, bit-identical to encode<>, and
// the FP32 -> bf16 round-to-nearest-even bias trick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float32.hpp"
#include "formats/float8.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// Why 2^16 entries suffice. An FP32 value is
//
//   bit 31 | 30 ........ 23 | 22 ....... 16 | 15 ........ 0
//   sign   | exponent (8)   | mantissa hi 7 | mantissa lo 16
//   \______________ index (16 bits) ______/ \ sticky only /
//
// An 8-bit target keeps at most 3 mantissa bits (e4m3fn; e5m2 keeps 2), so its last kept bit is
// FP32 bit 20 (21) for normal results and a higher bit for subnormal ones; the round bit is then
// bit >= 19. Everything below bit 16 can only act as sticky: whether it is zero decides ties
// (RNE/RNA), directed roundings of inexact values, zero vs subnormal FP32 inputs, and Inf vs NaN
// (exponent 0xFF). NaN payloads reach an 8-bit encoding only through their top bits (kIeee keeps
// the top 2 for e5m2; e4m3fn has one NaN per sign). So the result is a function of
// (upper 16 bits, low half != 0) for every Policy, and the table stores both bytes per index.
// tests/numerics/convert_table_long_test.cpp checks this against encode<> over all 2^32 inputs.
class ConversionTable {
 public:
  // Fmt is e4m3fn or e5m2; the table is filled from encode<Fmt>(x, policy) (2^17 conversions).
  template <class Fmt>
  static ConversionTable build(Policy policy);

  std::uint8_t convert(float x) const {
    const std::uint32_t u = f32_bits(x);
    return table_[((u >> 16) << 1) | std::uint32_t((u & 0xFFFFu) != 0)];
  }
  // out[i] = convert(x[i]); x and out may not overlap.
  void convert_array(const float* x, std::size_t n, std::uint8_t* out) const;

  Policy policy() const { return policy_; }
  // e.g. "e4m3fn"; the format the table was built for.
  const char* format_name() const { return format_name_; }

 private:
  ConversionTable(const char* name, Policy policy) : format_name_(name), policy_(policy) {}
  const char* format_name_;
  Policy policy_;
  std::vector<std::uint8_t> table_;  // [index << 1 | (low half != 0)], 128 KiB
};

extern template ConversionTable ConversionTable::build<e4m3fn>(Policy);
extern template ConversionTable ConversionTable::build<e5m2>(Policy);

// FP32 -> bf16 under round-to-nearest-even by the bias trick: bf16 has FP32's exponent range, so
// RNE at bit 16 is one integer add,
//   (u + 0x7FFF + ((u >> 16) & 1)) >> 16,
// exact for every finite input including subnormals; a carry out of the mantissa is the correct
// exponent increment and 0x7F7F8000.. rounds to the Inf pattern (IEEE overflow). Inputs that are
// NaN or Inf, and finite overflows under a saturating policy, go to encode<bf16>(x, policy)
// (NaN per policy.nan). policy.round must be kNearestEven, else every element goes to encode<bf16>.
std::uint16_t bf16_rne_bias(float x, Policy policy);
void bf16_convert_array(const float* x, std::size_t n, std::uint16_t* out, Policy policy);

// FP32 -> fp16 through the generic encoder, element by element: neither shortcut applies (fp16's
// round bit is FP32 bit 12, below any 16-bit index, and its exponent range differs from FP32's,
// so no single bias add rounds subnormal results). Kept here so that callers convert whole
// arrays to every output format through one header.
void fp16_convert_array(const float* x, std::size_t n, std::uint16_t* out, Policy policy);

}  // namespace attnsim
