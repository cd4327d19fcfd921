// avx512::span_add (sim/pipeline/stages/span_lanes.hpp) and avx2::span_add
// (span_lanes_avx2.hpp), the vector forms of cuda_core_span::Span::add
// that decides which outputs of the exact CUDA-core products the FP64 lanes may round: lane by
// lane against Span::add on every FP32 upper half with six low halves (zeros, subnormals, normals
// with every trailing-zero count, Inf, NaN), in random 16-lane (8-lane) sequences with random
// live masks.
// The random-block tests of the kernels cannot see a wrong span: a too-narrow one only matters
// when an FP64 sum rounds and that rounding changes the FP32 result.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: the helpers are AVX-512's
// Last: the AVX-512 helpers.
#include "sim/pipeline/stages/span_lanes.hpp"
#include "sim/pipeline/stages/span_lanes_avx2.hpp"

namespace attnsim {
namespace {

using cuda_core_span::Span;

// Lane l of the result: span_add over x[k][l] for the k with live bit l set (16 lanes: AVX-512,
// 8: AVX2).
ATTNSIM_AVX512 void lanes16(const float* x, const std::uint16_t* live, int steps, Span* out) {
  avx512::SpanLanes s = avx512::span_lanes_empty();
  for (int k = 0; k < steps; ++k) avx512::span_add(s, _mm512_loadu_ps(x + 16 * k), live[k]);
  avx512::store_spans(s, 16, out);
}
ATTNSIM_AVX2 void lanes8(const float* x, const std::uint16_t* live, int steps, Span* out) {
  avx2::SpanLanes s = avx2::span_lanes_empty();
  for (int k = 0; k < steps; ++k) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i m = _mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32(live[k]), bits), bits);
    avx2::span_add(s, _mm256_loadu_ps(x + 8 * k), m);
  }
  avx2::store_spans(s, 8, out);
}

void check_lanes(int width) {
  std::vector<float> pool;
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x0100u, 0x8000u, 0xFFFFu, 0x1234u}) {
      const std::uint32_t b = (hi << 16) | lo;
      float f;
      std::memcpy(&f, &b, 4);
      pool.push_back(f);
    }
  std::mt19937 g(3);
  std::size_t bad = 0, cases = 0;
  for (int rep = 0; rep < 20000; ++rep) {
    const int steps = 1 + int(g() % 12);
    std::vector<float> x(std::size_t(width) * steps);
    std::vector<std::uint16_t> live(static_cast<std::size_t>(steps));
    // Half the cases draw from one exponent band (spans near each other), half from anywhere.
    const std::size_t band = g() % pool.size();
    for (float& v : x) v = pool[(g() & 1) ? (band + g() % 3000) % pool.size() : g() % pool.size()];
    for (auto& m : live) m = std::uint16_t(g() & ((1u << width) - 1u));
    Span got[16];
    if (width == 16) {
      lanes16(x.data(), live.data(), steps, got);
    } else {
      lanes8(x.data(), live.data(), steps, got);
    }
    for (int l = 0; l < width; ++l) {
      Span want;
      for (int k = 0; k < steps; ++k)
        if ((live[std::size_t(k)] >> l) & 1) want.add(x[std::size_t(width * k + l)]);
      ++cases;
      if ((got[l].lo != want.lo || got[l].hi != want.hi || got[l].bad != want.bad) && ++bad <= 3)
        ADD_FAILURE() << "rep " << rep << " lane " << l << ": lo " << got[l].lo << "/" << want.lo
                      << " hi " << got[l].hi << "/" << want.hi << " bad " << got[l].bad << "/"
                      << want.bad;
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << cases << " lanes";
}

TEST(SpanLanes, EqualsSpanAddLaneByLane) {
  if (detected_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  check_lanes(16);
}

TEST(SpanLanes, Avx2EqualsSpanAddLaneByLane) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  check_lanes(8);
}

}  // namespace
}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
