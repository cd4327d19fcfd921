// AVX2 helpers of the stage kernels (qk_cuda_core.cpp, pv_cuda_core.cpp): the target attribute
// every AVX2 kernel function carries, lane masks and partial loads and stores through
// vmaskmov. The rules of avx512.hpp hold here too: plain IEEE add/mul and explicit FMA only where
// the reference's bits allow it, never across a reduction, MXCSR at its default. Include it after
// every other header: only functions marked ATTNSIM_AVX2 may use what it defines.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "numerics/avx2_lanes.hpp"

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

}  // namespace attnsim::avx2
