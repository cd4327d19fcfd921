// The operand triples of the FTZ tininess probe (cuda_check/ftz_probe.cu), generated from the case
// index alone so that the GPU probe and the CPU check (tests/hw/ftz_h100_test.cpp) make the same
// bits without carrying any file.
#pragma once

#include <cstdint>

#include "formats/config.hpp"
#include "numerics/digest.hpp"

namespace attnsim::ftzcase {

// Four groups, one after the other in the index space:
//  mul  [0, 2^24): a = ±(1 + m·2^-23)·2^ea, b = ±(1 + n·2^-23)·2^eb with ea + eb = -127, so that
//       |a·b| = 2^-127·(2^23 + m)(2^23 + n)·2^-46 sits next to FLT_MIN = 2^-126: for every
//       mantissa m of a, n is the largest with (2^23 + m)(2^23 + n) <= 2^47 (k = 0: the exact
//       product at or just below FLT_MIN, by less than 2^-149) or the next one (k = 1: just
//       above). ea in [-24, -1] (b stays normal), signs and operand order from a hash. c = ±0.
//  fma  [2^24, 2^24 + 2^23): a·b next to 2^-125 the same way (ea + eb = -126, random m), c =
//       -(1 + j·2^-23)·2^-126 with the opposite sign of a·b (j = 0 in 7 of 8 cases), so the exact
//       sum a·b + c sits at, just below or just above FLT_MIN with bits far below 2^-149.
//  add  [.., + 2^21): a and c of either sign with exponents in [-126, -122] (their sum or
//       difference lands on both sides of FLT_MIN, subnormal differences exact), b = ±(1 + m·2^-23)
//       with exponent -1 or 0 (fma(a, b, c): a product next to FLT_MIN plus c).
//  mix  [.., + 2^21): every operand drawn from subnormals, zeros, the smallest normals, numbers
//       near 1, huge numbers, FLT_MAX, ±Inf and NaN, with random signs.
// Every case is run through mul(a, b), fma(a, b, c) and add(a, c), each .rn and .rn.ftz.
inline constexpr std::uint32_t kMulBegin = 0;
inline constexpr std::uint32_t kFmaBegin = 1u << 24;
inline constexpr std::uint32_t kAddBegin = kFmaBegin + (1u << 23);
inline constexpr std::uint32_t kMixBegin = kAddBegin + (1u << 21);
inline constexpr std::uint32_t kCount = kMixBegin + (1u << 21);
inline constexpr int kChunkBits = 20;  // digests per 2^20 cases
inline constexpr std::uint32_t kChunks = kCount >> kChunkBits;
static_assert((kCount & ((1u << kChunkBits) - 1)) == 0, "whole chunks");

// The six recorded operations, in the order of the recording's datasets.
inline constexpr int kOps = 6;
inline constexpr const char* kOpNames[kOps] = {"mul.rn.f32", "mul.rn.ftz.f32", "fma.rn.f32",
                                               "fma.rn.ftz.f32", "add.rn.f32", "add.rn.ftz.f32"};

struct Triple {
  std::uint32_t a, b, c;
};

ATTNSIM_HD constexpr std::uint32_t fp32_bits(std::uint32_t sign, int exp, std::uint32_t mant) {
  // exp is the unbiased exponent of a normal number; mant may be 2^23 (the next power of two).
  return (sign << 31) + (std::uint32_t(exp + 127) << 23) + mant;
}

// The largest n with (2^23 + m)(2^23 + n) <= 2^(47 + extra): b's mantissa next to the boundary.
ATTNSIM_HD constexpr std::uint32_t boundary_mantissa(std::uint32_t m) {
  return std::uint32_t((1ull << 47) / ((1ull << 23) + m) - (1ull << 23));
}

// A special-heavy random operand for the mix group.
ATTNSIM_HD constexpr std::uint32_t mix_operand(std::uint64_t h) {
  const std::uint32_t sign = std::uint32_t(h >> 63);
  const std::uint32_t mant = std::uint32_t(h) & 0x7FFFFFu;
  switch ((h >> 32) & 15) {
    case 0:
    case 1:
    case 2:
      return (sign << 31) | mant;  // subnormal (or zero)
    case 3:
      return (sign << 31) | (mant & 0xFu);  // tiny subnormal
    case 4:
      return sign << 31;  // ±0
    case 5:
    case 6:
    case 7:
      return (sign << 31) | ((1u + std::uint32_t((h >> 40) & 3)) << 23) | mant;  // 2^-126..2^-123
    case 8:
    case 9:
    case 10:
      return (sign << 31) | ((124u + std::uint32_t((h >> 40) & 7)) << 23) | mant;  // near 1
    case 11:
      return (sign << 31) | ((64u + std::uint32_t((h >> 40) & 63)) << 23) | mant;  // 2^-63..2^0
    case 12:
      return (sign << 31) | ((200u + std::uint32_t((h >> 40) & 53)) << 23) | mant;  // huge
    case 13:
      return (sign << 31) | 0x7F7FFFFFu;  // ±FLT_MAX
    case 14:
      return (sign << 31) | 0x7F800000u;  // ±Inf
    default:
      return (sign << 31) | 0x7F800000u | (mant | 1u);  // NaN (quiet or signalling)
  }
}

ATTNSIM_HD constexpr Triple ftz_case(std::uint32_t i) {
  if (i < kFmaBegin) {
    const std::uint32_t m = i >> 1, k = i & 1u;
    const std::uint64_t h = splitmix64(0xF720000000000000ull ^ m);
    const std::uint32_t n = boundary_mantissa(m) + k;
    const int ea = -1 - int((h >> 8) % 24);
    const std::uint32_t a = fp32_bits(std::uint32_t(h) & 1u, ea, m);
    const std::uint32_t b = fp32_bits(std::uint32_t(h >> 1) & 1u, -127 - ea, n);
    const std::uint32_t c = std::uint32_t(h >> 2) & 1u ? 0x80000000u : 0u;
    return (h >> 3) & 1u ? Triple{b, a, c} : Triple{a, b, c};
  }
  if (i < kAddBegin) {
    const std::uint32_t j = i - kFmaBegin;
    const std::uint64_t h = splitmix64(0xF7A0000000000000ull ^ (j >> 1));
    const std::uint32_t m = std::uint32_t(h >> 40) & 0x7FFFFFu, k = j & 1u;
    const std::uint32_t n = boundary_mantissa(m) + k;
    const int ea = -1 - int((h >> 8) % 23);
    const std::uint32_t sa = std::uint32_t(h) & 1u, sb = std::uint32_t(h >> 1) & 1u;
    const std::uint32_t a = fp32_bits(sa, ea, m), b = fp32_bits(sb, -126 - ea, n);
    const std::uint32_t jc = ((h >> 16) & 7) == 0 ? std::uint32_t((h >> 19) & 7) : 0u;
    const std::uint32_t c = fp32_bits((sa ^ sb) ^ 1u, -126, jc);
    return (h >> 3) & 1u ? Triple{b, a, c} : Triple{a, b, c};
  }
  if (i < kMixBegin) {
    const std::uint64_t h = splitmix64(0xF7AD000000000000ull ^ i);
    const std::uint64_t g = splitmix64(h);
    const std::uint32_t a = fp32_bits(std::uint32_t(h) & 1u, -126 + int((h >> 1) % 5),
                                      std::uint32_t(h >> 8) & 0x7FFFFFu);
    const std::uint32_t c = fp32_bits(std::uint32_t(g) & 1u, -126 + int((g >> 1) % 5),
                                      std::uint32_t(g >> 8) & 0x7FFFFFu);
    const std::uint32_t b = fp32_bits(std::uint32_t(h >> 4) & 1u, -int((h >> 5) & 1),
                                      std::uint32_t(g >> 40) & 0x7FFFFFu);
    return Triple{a, b, c};
  }
  const std::uint64_t h = splitmix64(0xF7E1000000000000ull ^ i);
  return Triple{mix_operand(h), mix_operand(splitmix64(h)), mix_operand(splitmix64(h ^ 0x5A5A))};
}

}  // namespace attnsim::ftzcase
