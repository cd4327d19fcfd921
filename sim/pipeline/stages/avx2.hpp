// AVX2 helpers of the stage kernels (qk_cuda_core.cpp, pv_cuda_core.cpp): the target attribute
// every AVX2 kernel function carries, lane masks and partial loads and stores through
// vmaskmov. The rules of avx512.hpp hold here too: plain IEEE add/mul and explicit FMA only where
// the reference's bits allow it, never across a reduction, MXCSR at its default. Include it after
// every other header: only functions marked ATTNSIM_AVX2 may use what it defines.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "numerics/avx2_lanes.hpp"
#include "numerics/special.hpp"

// Isa::kAvx2's target set (numerics/simd.hpp), so that avx2_lanes.hpp's helpers inline here.
#define ATTNSIM_AVX2 ATTNSIM_TARGET_AVX2
#define ATTNSIM_AVX2_INLINE ATTNSIM_AVX2_LANES

namespace attnsim::avx2 {

// Lane masks of the first n lanes (n clamped to [0, 8] floats / [0, 4] doubles).
using avx2_lanes::first4;
using avx2_lanes::first8;

// Loads of the first n lanes (the others zero, never read from memory) and stores of them.
ATTNSIM_AVX2_INLINE __m256 load_n(const float* p, int n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first8(n));
}
ATTNSIM_AVX2_INLINE __m256d load_n(const double* p, int n) {
  return n >= 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, first4(n));
}
ATTNSIM_AVX2_INLINE void store_n(float* p, __m256 v, int n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
  } else if (n > 0) {
    _mm256_maskstore_ps(p, first8(n), v);
  }
}
ATTNSIM_AVX2_INLINE void store_n(double* p, __m256d v, int n) {
  if (n >= 4) {
    _mm256_storeu_pd(p, v);
  } else if (n > 0) {
    _mm256_maskstore_pd(p, first4(n), v);
  }
}


// The .ftz state operations on 8 lanes (avx512.hpp's ftz_mul / ftz_add / ftz_fma: the same rule).
ATTNSIM_AVX2_INLINE __m256 daz(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i zero_exp = _mm256_cmpeq_epi32(
      _mm256_and_si256(u, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(int(0x80000000u)));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(u, sign, zero_exp));
}
ATTNSIM_AVX2_INLINE __m256 ftz_result(__m256 r, int* edge) {
  const __m256 a = _mm256_and_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  const __m256 fmin = _mm256_set1_ps(0x1p-126f);
  const __m256 tiny = _mm256_cmp_ps(a, fmin, _CMP_LT_OQ);
  const __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
  *edge = _mm256_movemask_ps(_mm256_cmp_ps(a, fmin, _CMP_EQ_OQ));
  const __m256 sign = _mm256_and_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u))));
  __m256 x = _mm256_blendv_ps(r, sign, tiny);
  return _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), nan);
}
template <class Op>
ATTNSIM_AVX2_INLINE __m256 ftz_edges(__m256 r, int edge, __m256 a, __m256 b, __m256 c, Op op) {
  alignas(32) float ra[8], aa[8], ba[8], ca[8];
  _mm256_store_ps(ra, r);
  _mm256_store_ps(aa, a);
  _mm256_store_ps(ba, b);
  _mm256_store_ps(ca, c);
  for (int l = 0; l < 8; ++l)
    if (edge >> l & 1) ra[l] = op(aa[l], ba[l], ca[l]);
  return _mm256_load_ps(ra);
}
ATTNSIM_AVX2_INLINE __m256 ftz_mul(__m256 a, __m256 b) {
  int edge;
  const __m256 r = ftz_result(_mm256_mul_ps(daz(a), daz(b)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, b, [](float x, float y, float) { return fmul_ftz(x, y); });
}
ATTNSIM_AVX2_INLINE __m256 ftz_add(__m256 a, __m256 b) {
  int edge;
  const __m256 r = ftz_result(_mm256_add_ps(daz(a), daz(b)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, b, [](float x, float y, float) { return fadd_ftz(x, y); });
}
ATTNSIM_AVX2_INLINE __m256 ftz_fma(__m256 a, __m256 b, __m256 c) {
  int edge;
  const __m256 r = ftz_result(_mm256_fmadd_ps(daz(a), daz(b), daz(c)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, c, [](float x, float y, float z) {
    return fma_f32(x, y, z, Round::kNearestEven, true);
  });
}

}  // namespace attnsim::avx2
