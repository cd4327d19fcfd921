// Internal to the AVX2 kernels (numerics/ and sim/pipeline/stages/): lane masks as all-ones
// compare results (AVX2 has no mask registers) and selection by them. Every function is static,
// always inlined and carries ATTNSIM_TARGET_AVX2's target, so no copy of it is built for any
// other caller (numerics/simd.hpp).
#pragma once

#include "numerics/simd.hpp"

#if ATTNSIM_X86_KERNELS
#define ATTNSIM_AVX2_LANES                                                               \
  __attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"), always_inline)) static \
  inline

namespace attnsim::avx2_lanes {

// All-ones in the first n 32-bit lanes (n clamped to [0, 8]) / 64-bit lanes (to [0, 4]).
ATTNSIM_AVX2_LANES __m256i first8(int n) {
  const int k = n < 0 ? 0 : n > 8 ? 8 : n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
ATTNSIM_AVX2_LANES __m256i first4(int n) {
  const long long k = n < 0 ? 0 : n > 4 ? 4 : n;
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3));
}

// yes where mask, else no.
ATTNSIM_AVX2_LANES __m256i select(__m256i mask, __m256i yes, __m256i no) {
  return _mm256_blendv_epi8(no, yes, mask);
}

// Four 64-bit lane masks (all-ones or zero) as four 32-bit lane masks: the low half of each.
ATTNSIM_AVX2_LANES __m128i narrow_mask(__m256i m) {
  return _mm_castps_si128(_mm_shuffle_ps(_mm_castsi128_ps(_mm256_castsi256_si128(m)),
                                         _mm_castsi128_ps(_mm256_extracti128_si256(m, 1)),
                                         _MM_SHUFFLE(2, 0, 2, 0)));
}

// The 8 x 8 transpose of int32 rows r[0..7] in place.
ATTNSIM_AVX2_LANES void transpose8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

}  // namespace attnsim::avx2_lanes
#endif
