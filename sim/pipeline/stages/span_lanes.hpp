// cuda_core_span::Span over AVX-512 lanes for the exact CUDA-core kernels (qk_cuda_core.cpp,
// pv_cuda_core.cpp): Span::add of 16 values at a time into per-lane bounds, and the lanes as
// Spans (one per lane, or reduced to one). Include last, after avx512.hpp's other users: only
// ATTNSIM_AVX512 functions may use it (tested lane by lane against Span::add in
// tests/sim/pipeline/stages/span_lanes_test.cpp).
#pragma once

#include <cstdint>

#include "sim/pipeline/stages/avx512.hpp"
#include "sim/pipeline/stages/cuda_core_span.hpp"

namespace attnsim::avx512 {

// cuda_core_span::Span::add of 16 FP32 lanes (those in `live`) into per-lane bounds: lo = min
// lsb, hi = max top over the non-zero values, `bad` the lanes that saw an Inf or NaN. The lsb and
// top of a significand come from the exponents of its FP32 conversions (exact: below 2^24), the
// lowest set bit as sig & −sig.
struct SpanLanes {
  __m512i lo, hi;
  __mmask16 bad;
};
ATTNSIM_AVX512_INLINE SpanLanes span_lanes_empty() {
  return {_mm512_set1_epi32(1 << 20), _mm512_set1_epi32(-(1 << 20)), 0};
}
ATTNSIM_AVX512_INLINE __m512i exponent_of_int(__m512i v) {  // floor(log2 v), 0 < v < 2^24
  return _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(v)), 23),
                          _mm512_set1_epi32(127));
}
ATTNSIM_AVX512_INLINE void span_add(SpanLanes& s, __m512 x, __mmask16 live) {
  const __m512i u = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 special = _mm512_mask_cmpge_epu32_mask(live, u, _mm512_set1_epi32(0x7F800000));
  s.bad |= special;
  const __mmask16 m = _mm512_mask_test_epi32_mask(live & __mmask16(~special), u, u);
  const __m512i e = _mm512_srli_epi32(u, 23);
  const __mmask16 den = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
  const __m512i sig = _mm512_mask_mov_epi32(
      _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFF)), _mm512_set1_epi32(0x800000)),
      den, u);
  const __m512i base = _mm512_mask_mov_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(150)), den,
                                             _mm512_set1_epi32(-149));
  const __m512i low = _mm512_and_si512(sig, _mm512_sub_epi32(_mm512_setzero_si512(), sig));
  // Lanes outside m may hold sig = 0 (a zero): their results are never merged.
  const __m512i lsb = _mm512_add_epi32(base, exponent_of_int(low));
  const __m512i top = _mm512_add_epi32(base, exponent_of_int(sig));
  s.lo = _mm512_mask_min_epi32(s.lo, m, s.lo, lsb);
  s.hi = _mm512_mask_max_epi32(s.hi, m, s.hi, top);
}

// The first n (<= 16) lanes as Spans, one per lane.
ATTNSIM_AVX512_INLINE void store_spans(const SpanLanes& s, int n, cuda_core_span::Span* out) {
  alignas(64) std::int32_t lo[16], hi[16];
  _mm512_store_si512(lo, s.lo);
  _mm512_store_si512(hi, s.hi);
  for (int l = 0; l < 16 && l < n; ++l)
    out[l] = cuda_core_span::Span{lo[l], hi[l], ((s.bad >> l) & 1) != 0};
}

// Every lane's values as one Span.
ATTNSIM_AVX512_INLINE cuda_core_span::Span reduce_span(const SpanLanes& s) {
  return cuda_core_span::Span{_mm512_reduce_min_epi32(s.lo), _mm512_reduce_max_epi32(s.hi),
                              s.bad != 0};
}

}  // namespace attnsim::avx512
