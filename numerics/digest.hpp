// Order-independent 64-bit digests of "output of f at every input i", shared by the GPU probes in
// cuda_check/ and the CPU tests that check the models against what the probes recorded.
#pragma once

#include <cstdint>

#include "formats/config.hpp"

namespace attnsim {

// splitmix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
ATTNSIM_HD constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Contribution of one (input index, output bits) pair. A chunk's digest is the wrapping sum of
// the contributions of its inputs, so GPU threads can add them in any order. Two recordings that
// differ in any output differ in the digest except with probability about 2^-64 per chunk.
ATTNSIM_HD constexpr std::uint64_t digest_term(std::uint32_t index, std::uint32_t output) {
  return splitmix64((std::uint64_t{index} << 32) | output);
}

// Inputs of a chunked 2^32 sweep: chunk c holds inputs [c * 2^24, (c + 1) * 2^24).
inline constexpr int kDigestChunkBits = 24;
inline constexpr int kDigestChunks = 1 << (32 - kDigestChunkBits);

// The adversarial FP32 sample recorded in full: every upper half (sign, exponent, top 7 mantissa
// bits) combined with low halves that sit on, just below and just above the rounding points of
// bf16 (bit 15) and fp16 normals (bit 12), plus one pseudo-random low half. The 8-bit formats round
// at bit 19 or higher, so their ties and neighbours are covered by the upper half alone.
// (A switch, not an array: namespace-scope constexpr arrays are not readable from device code.)
inline constexpr int kSampleLowCount = 10;
inline constexpr std::uint32_t kSampleSize = 65536u * kSampleLowCount;

ATTNSIM_HD constexpr std::uint32_t sample_low_pattern(std::uint32_t hi, std::uint32_t j) {
  switch (j) {
    case 0:
      return 0x0000;
    case 1:
      return 0x0001;
    case 2:
      return 0x0FFF;  // fp16 normal: just below the tie
    case 3:
      return 0x1000;  // fp16 normal: tie
    case 4:
      return 0x1001;  // fp16 normal: just above the tie
    case 5:
      return 0x7FFF;  // bf16: just below the tie
    case 6:
      return 0x8000;  // bf16: tie
    case 7:
      return 0x8001;  // bf16: just above the tie
    case 8:
      return 0xFFFF;
    default:
      return std::uint32_t(splitmix64(hi) & 0xFFFF);
  }
}

ATTNSIM_HD constexpr std::uint32_t sample_input(std::uint32_t i) {
  const std::uint32_t hi = i / kSampleLowCount;
  return (hi << 16) | sample_low_pattern(hi, i % kSampleLowCount);
}

}  // namespace attnsim
