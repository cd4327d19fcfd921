// AVX-512 helpers of the stage kernels (sim/pipeline/stages/*_avx512.cpp, *_cuda_core.cpp): the
// target attribute every kernel function carries, lane masks, partial loads and stores, and the
// in-register transposes. Include this header last, after every other header: only functions
// marked ATTNSIM_AVX512 may use what it defines (numerics/isa.hpp selects them at run time).
//
// Bit-exactness rules of the kernels (sim/pipeline/README.md, "Fast kernels"): plain IEEE
// add/sub/mul/div and explicit FMA (_mm512_fmadd_*) only where the reference calls std::fma;
// never across a reduction; MXCSR left at its default (round to nearest even, no FTZ/DAZ).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "numerics/special.hpp"

// GCC 12's intrinsics initialise their "undefined" operands from themselves (`__m512 __Y = __Y;`
// in _mm512_undefined_ps), which -Wmaybe-uninitialized reports at every inlined shuffle and
// conversion; the value is never read (the instructions ignore the pass-through operand).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same, in _mm512_cvtpd_ps (PR 105593)
#endif

// Every kernel function (and helper) that uses AVX-512 carries this attribute; nothing is compiled
// with -mavx512* (or -mfma: every AVX-512 CPU has FMA, isa.cpp checks both) so that no inline function of a shared header is built for AVX-512 by accident.
#define ATTNSIM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define ATTNSIM_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), always_inline)) inline

namespace attnsim::avx512 {

// The first n lanes (n clamped to [0, 16] / [0, 8]).
ATTNSIM_AVX512_INLINE __mmask16 first16(int n) {
  return n <= 0 ? __mmask16(0) : n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}
ATTNSIM_AVX512_INLINE __mmask8 first8(int n) {
  return n <= 0 ? __mmask8(0) : n >= 8 ? __mmask8(0xFF) : __mmask8((1u << n) - 1u);
}

// 16 floats from p, lanes >= n zero (never read).
ATTNSIM_AVX512_INLINE __m512 load_n(const float* p, int n) {
  return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(first16(n), p);
}
ATTNSIM_AVX512_INLINE void store_n(float* p, __m512 x, int n) {
  if (n >= 16) {
    _mm512_storeu_ps(p, x);
  } else {
    _mm512_mask_storeu_ps(p, first16(n), x);
  }
}
ATTNSIM_AVX512_INLINE __m512d load_n(const double* p, int n) {
  return n >= 8 ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd(first8(n), p);
}
ATTNSIM_AVX512_INLINE void store_n(double* p, __m512d x, int n) {
  if (n >= 8) {
    _mm512_storeu_pd(p, x);
  } else {
    _mm512_mask_storeu_pd(p, first8(n), x);
  }
}

// x > y ? x : y lane by lane with the reference's comparison (`x > m ? x : m`): a NaN x never
// wins, and of two equal values (±0) the running one stays.
ATTNSIM_AVX512_INLINE __m512 max_keep(__m512 running, __m512 x) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, running, _CMP_GT_OQ), running, x);
}

// The 16 x 16 transpose of rows r[0..15] (each 16 floats) in place: r[i][j] <- r[j][i].
ATTNSIM_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // t[2m] = a0 b0 a1 b1 | a4 b4 a5 b5 | ..., t[2m+1] = a2 b2 a3 b3 | ... (per 128-bit lane)
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // r[4g + c] holds column c (+4·lane) of rows 4g..4g+3 in each 128-bit lane.
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);      // lanes 0,2 of rows 0-3 | 4-7
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);  // lanes 1,3
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);            // column c
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);        // column 8 + c
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);   // column 4 + c
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);  // column 12 + c
  }
}


// The .ftz state operations on 16 lanes (stage_util::state_mul / state_add / state_fma with ftz:
// fmul_ftz, fadd_ftz, fma_f32(.., RN, ftz)): operands whose exponent field is 0 read as zeros of
// their sign, the IEEE RN result, NaN results as the GPU's 0x7FFFFFFF, results below FLT_MIN
// flushed to zeros of their sign, and a result of magnitude FLT_MIN (tiny or not depends on the
// exact value: the scalar rule decides) recomputed lane by lane by the scalar operation.
ATTNSIM_AVX512_INLINE __m512 daz(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 sub = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
  return _mm512_castsi512_ps(
      _mm512_mask_and_epi32(u, sub, u, _mm512_set1_epi32(int(0x80000000u))));
}
ATTNSIM_AVX512_INLINE __m512 ftz_result(__m512 r, __mmask16* edge) {
  const __m512 a = _mm512_abs_ps(r), fmin = _mm512_set1_ps(0x1p-126f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(a, fmin, _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
  *edge = _mm512_cmp_ps_mask(a, fmin, _CMP_EQ_OQ);
  __m512i u = _mm512_castps_si512(r);
  u = _mm512_mask_and_epi32(u, tiny, u, _mm512_set1_epi32(int(0x80000000u)));
  u = _mm512_mask_mov_epi32(u, nan, _mm512_set1_epi32(0x7FFFFFFF));
  return _mm512_castsi512_ps(u);
}
// Lanes of `edge` recomputed by op(a, b, c).
template <class Op>
ATTNSIM_AVX512_INLINE __m512 ftz_edges(__m512 r, __mmask16 edge, __m512 a, __m512 b, __m512 c,
                                        Op op) {
  alignas(64) float ra[16], aa[16], ba[16], ca[16];
  _mm512_store_ps(ra, r);
  _mm512_store_ps(aa, a);
  _mm512_store_ps(ba, b);
  _mm512_store_ps(ca, c);
  for (int l = 0; l < 16; ++l)
    if (edge >> l & 1u) ra[l] = op(aa[l], ba[l], ca[l]);
  return _mm512_load_ps(ra);
}
ATTNSIM_AVX512_INLINE __m512 ftz_mul(__m512 a, __m512 b) {
  __mmask16 edge;
  const __m512 r = ftz_result(_mm512_mul_ps(daz(a), daz(b)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, b, [](float x, float y, float) { return fmul_ftz(x, y); });
}
ATTNSIM_AVX512_INLINE __m512 ftz_add(__m512 a, __m512 b) {
  __mmask16 edge;
  const __m512 r = ftz_result(_mm512_add_ps(daz(a), daz(b)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, b, [](float x, float y, float) { return fadd_ftz(x, y); });
}
ATTNSIM_AVX512_INLINE __m512 ftz_fma(__m512 a, __m512 b, __m512 c) {
  __mmask16 edge;
  const __m512 r = ftz_result(_mm512_fmadd_ps(daz(a), daz(b), daz(c)), &edge);
  if (!edge) return r;
  return ftz_edges(r, edge, a, b, c, [](float x, float y, float z) {
    return fma_f32(x, y, z, Round::kNearestEven, true);
  });
}

}  // namespace attnsim::avx512
