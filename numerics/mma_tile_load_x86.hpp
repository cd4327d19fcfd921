// Internal to the AVX-512 tile kernels (mma_tile_avx512.cpp, int_mma_tile_x86.cpp): reading 16
// operand elements of a tile (numerics/mma_tile.hpp: encodings or values, the optional position
// index, the two B strides) as raw 32-bit words. Every function is static, always inlined and
// carries the AVX-512 target attribute, so no copy of it is built for any other caller.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "numerics/mma_tile.hpp"

#define ATTNSIM_AVX512_LOAD \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) static inline

namespace attnsim::mma_tile_detail {

// The first `left` lanes (none for left <= 0, all for left >= 16).
ATTNSIM_AVX512_LOAD __mmask16 lanes_below(int left) {
  return __mmask16(left >= 16 ? 0xFFFF : left <= 0 ? 0u : (1u << left) - 1u);
}

// A's row i at instruction positions k0 .. k0 + 15 (positions >= n, and k_index -1, read as 0).
ATTNSIM_AVX512_LOAD __m512i load_a16(const MmaTile& t, int i, int k0) {
  const __mmask16 m = lanes_below(t.n - k0);
  const std::uint32_t* base =
      (t.a_values ? reinterpret_cast<const std::uint32_t*>(t.a_values) : t.a) +
      std::ptrdiff_t(i) * t.lda;
  if (!t.k_index) return _mm512_maskz_loadu_epi32(m, base + k0);
  const __m512i idx = _mm512_maskz_loadu_epi32(m, t.k_index + k0);
  const __mmask16 valid = _mm512_mask_cmpge_epi32_mask(m, idx, _mm512_setzero_si512());
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, idx, base, 4);
}

// The element row of B at instruction position k (its B(k, ·)), or null for a padding position.
ATTNSIM_AVX512_LOAD const std::uint32_t* b_row(const MmaTile& t, int k) {
  const int src = t.k_index ? t.k_index[k] : k;
  if (src < 0) return nullptr;
  return (t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b) +
         std::ptrdiff_t(src) * t.b_k;
}

// B(k, j0 .. j0 + 15) from the row b_row returned (columns >= cols, and a null row, read as 0).
ATTNSIM_AVX512_LOAD __m512i load_b16(const MmaTile& t, const std::uint32_t* row, int j0) {
  if (!row) return _mm512_setzero_si512();
  const __mmask16 m = lanes_below(t.cols - j0);
  if (t.b_n == 1) return _mm512_maskz_loadu_epi32(m, row + j0);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(j0)),
                                         _mm512_set1_epi32(int(t.b_n)));
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, row, 4);
}

}  // namespace attnsim::mma_tile_detail
