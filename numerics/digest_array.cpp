#include "numerics/digest_array.hpp"

#include "numerics/digest.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/kernels_x86.hpp"
#include "numerics/simd.hpp"

// GCC 12's AVX-512 headers warn `-Wuninitialized` about their own _mm512_undefined_*() inside
// _mm512_reduce_add_epi64 (GCC PR 105593, as simd.hpp says).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace attnsim {

std::uint64_t digest_sum_ref(std::uint32_t first, const std::uint32_t* out, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += digest_term(std::uint32_t(first + i), out[i]);
  return sum;
}

#if ATTNSIM_X86_KERNELS
namespace {

// splitmix64 on 8 lanes: the same shifts, xors and 64-bit multiplies (vpmullq) per lane.
ATTNSIM_TARGET_AVX512 inline __m512i splitmix64_x8(__m512i z) {
  z = _mm512_add_epi64(z, _mm512_set1_epi64(std::int64_t(0x9E3779B97F4A7C15ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(std::int64_t(0xBF58476D1CE4E5B9ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(std::int64_t(0x94D049BB133111EBull)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

}  // namespace

// Eight outputs per step: (index << 32) | output in each 64-bit lane, the terms added lane-wise,
// the lanes added at the end; the tail (n mod 8) through the reference.
ATTNSIM_TARGET_AVX512 std::uint64_t kernels_x86::digest_sum_avx512(std::uint32_t first,
                                                                   const std::uint32_t* out,
                                                                   std::size_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i idx0 = _mm256_add_epi32(_mm256_set1_epi32(int(first + std::uint32_t(i))), lane);
    const __m256i idx1 = _mm256_add_epi32(_mm256_set1_epi32(int(first + std::uint32_t(i + 8))), lane);
    const __m512i z0 = _mm512_or_si512(_mm512_slli_epi64(_mm512_cvtepu32_epi64(idx0), 32),
                                       _mm512_cvtepu32_epi64(_mm256_loadu_si256(
                                           reinterpret_cast<const __m256i*>(out + i))));
    const __m512i z1 = _mm512_or_si512(_mm512_slli_epi64(_mm512_cvtepu32_epi64(idx1), 32),
                                       _mm512_cvtepu32_epi64(_mm256_loadu_si256(
                                           reinterpret_cast<const __m256i*>(out + i + 8))));
    acc0 = _mm512_add_epi64(acc0, splitmix64_x8(z0));
    acc1 = _mm512_add_epi64(acc1, splitmix64_x8(z1));
  }
  std::uint64_t sum = std::uint64_t(_mm512_reduce_add_epi64(_mm512_add_epi64(acc0, acc1)));
  return sum + digest_sum_ref(std::uint32_t(first + i), out + i, n - i);
}
#endif

std::uint64_t digest_sum(std::uint32_t first, const std::uint32_t* out, std::size_t n) {
  return array_kernels().digest_sum(first, out, n);
}

}  // namespace attnsim
