// span_lanes.hpp's SpanLanes on AVX2: cuda_core_span::Span::add of 8 FP32 lanes at a time, lane
// masks as all-ones compare results. The same steps as the AVX-512 form (the lsb and top of a
// significand from the exponents of its exact FP32 conversions, the lowest set bit as sig & −sig).
// Include last, after avx2.hpp's other users: only ATTNSIM_AVX2 functions may use it (tested lane
// by lane against Span::add in tests/sim/pipeline/stages/span_lanes_test.cpp).
#pragma once

#include <cstdint>

#include "sim/pipeline/stages/avx2.hpp"
#include "sim/pipeline/stages/cuda_core_span.hpp"

namespace attnsim::avx2 {

struct SpanLanes {
  __m256i lo, hi, bad;  // bad: all-ones in the lanes that saw an Inf or NaN
};
ATTNSIM_AVX2_INLINE SpanLanes span_lanes_empty() {
  return {_mm256_set1_epi32(1 << 20), _mm256_set1_epi32(-(1 << 20)), _mm256_setzero_si256()};
}
ATTNSIM_AVX2_INLINE __m256i exponent_of_int(__m256i v) {  // floor(log2 v), 0 < v < 2^24
  return _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(v)), 23),
                          _mm256_set1_epi32(127));
}
// Span::add of the lanes in `live` (all-ones lanes).
ATTNSIM_AVX2_INLINE void span_add(SpanLanes& s, __m256 x, __m256i live) {
  const __m256i u = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF));
  // u < 2^31: the unsigned test u >= 0x7F800000 is a signed one.
  const __m256i special =
      _mm256_and_si256(live, _mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x7F7FFFFF)));
  s.bad = _mm256_or_si256(s.bad, special);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i m = _mm256_andnot_si256(_mm256_or_si256(special, _mm256_cmpeq_epi32(u, zero)), live);
  const __m256i e = _mm256_srli_epi32(u, 23);
  const __m256i den = _mm256_cmpeq_epi32(e, zero);
  const __m256i sig = avx2_lanes::select(
      den, u,
      _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x800000)));
  const __m256i base =
      avx2_lanes::select(den, _mm256_set1_epi32(-149), _mm256_sub_epi32(e, _mm256_set1_epi32(150)));
  const __m256i low = _mm256_and_si256(sig, _mm256_sub_epi32(zero, sig));
  // Lanes outside m may hold sig = 0 (a zero): their results are never merged.
  const __m256i lsb = _mm256_add_epi32(base, exponent_of_int(low));
  const __m256i top = _mm256_add_epi32(base, exponent_of_int(sig));
  s.lo = avx2_lanes::select(m, _mm256_min_epi32(s.lo, lsb), s.lo);
  s.hi = avx2_lanes::select(m, _mm256_max_epi32(s.hi, top), s.hi);
}

// The first n (<= 8) lanes as Spans, one per lane.
ATTNSIM_AVX2_INLINE void store_spans(const SpanLanes& s, int n, cuda_core_span::Span* out) {
  alignas(32) std::int32_t lo[8], hi[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lo), s.lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(hi), s.hi);
  const int bad = _mm256_movemask_ps(_mm256_castsi256_ps(s.bad));
  for (int l = 0; l < 8 && l < n; ++l)
    out[l] = cuda_core_span::Span{lo[l], hi[l], ((bad >> l) & 1) != 0};
}

// Every lane's values as one Span.
ATTNSIM_AVX2_INLINE cuda_core_span::Span reduce_span(const SpanLanes& s) {
  cuda_core_span::Span out[8];
  store_spans(s, 8, out);
  cuda_core_span::Span r = out[0];
  for (int l = 1; l < 8; ++l) {
    r.lo = out[l].lo < r.lo ? out[l].lo : r.lo;
    r.hi = out[l].hi > r.hi ? out[l].hi : r.hi;
    r.bad = r.bad || out[l].bad;
  }
  return r;
}

}  // namespace attnsim::avx2
