// NEON helpers of the stage kernels (qk_cuda_core_neon.cpp, pv_cuda_core_neon.cpp): loads and
// stores of a register's first n lanes. AArch64 Advanced SIMD has no masked loads, so a partial
// vector goes through a small buffer: lanes past n are zero and never read from memory, nor
// written. The rules of avx512.hpp hold here too: plain IEEE add and multiply (vaddq, vmulq; the
// build's -ffp-contract=off keeps GCC from fusing them), an explicit FMA (vfmaq_f64) only where
// the reference's bits allow it, never across a reduction, FPCR at its default (round to nearest
// even, no flush to zero: Advanced SIMD on AArch64 follows FPCR, and Linux starts every thread at
// its default). Advanced SIMD is part of the AArch64 base architecture: no target attribute, and
// these inline functions can be shared by every caller.
#pragma once

#include "numerics/isa.hpp"
#if !ATTNSIM_NEON_KERNELS
#error "sim/pipeline/stages/neon.hpp is for AArch64 builds (ATTNSIM_NEON_KERNELS) only"
#endif

#include <arm_neon.h>

namespace attnsim::neon {

// The first n lanes from p (n clamped to [0, 4] floats / [0, 2] doubles), the others zero.
inline float32x4_t load_n(const float* p, int n) {
  if (n >= 4) return vld1q_f32(p);
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < n; ++i) t[i] = p[i];
  return vld1q_f32(t);
}
inline float64x2_t load_n(const double* p, int n) {
  if (n >= 2) return vld1q_f64(p);
  double t[2] = {0.0, 0.0};
  if (n == 1) t[0] = p[0];
  return vld1q_f64(t);
}

// The first n lanes of v to p (n clamped as above).
inline void store_n(float* p, float32x4_t v, int n) {
  if (n >= 4) {
    vst1q_f32(p, v);
    return;
  }
  float t[4];
  vst1q_f32(t, v);
  for (int i = 0; i < n; ++i) p[i] = t[i];
}
inline void store_n(double* p, float64x2_t v, int n) {
  if (n >= 2) {
    vst1q_f64(p, v);
  } else if (n == 1) {
    vst1q_lane_f64(p, v, 0);
  }
}

}  // namespace attnsim::neon
