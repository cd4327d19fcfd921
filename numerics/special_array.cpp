// The MUFU models over arrays (see special_array.hpp): the references are loops over the scalar
// models; the AVX-512 kernels compute the same fixed-point index per lane, gather the recorded
// table entries (vpgatherdd) and rebuild the exponent with the scalar model's integer steps.
#include "numerics/special_array.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <vector>

#include "formats/float32.hpp"
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "numerics/avx2_lanes.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/isa.hpp"
#include "numerics/kernels_x86.hpp"
#include "numerics/simd.hpp"

// GCC 12's AVX-512 headers also warn `-Wuninitialized` about their own _mm512_undefined_*() in
// the double-precision conversions and gathers below (GCC PR 105593, as simd.hpp says).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace attnsim {

// ---- references --------------------------------------------------------------------------------

void ex2_approx_ftz_array_ref(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  for (std::size_t i = 0; i < n; ++i) out[i] = ex2(x[i]);
}
void ex2_approx_array_ref(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_from_bits(ex2_approx_bits(f32_bits(x[i]), ex2));
}
void rcp_approx_ftz_array_ref(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  for (std::size_t i = 0; i < n; ++i) out[i] = rcp(x[i]);
}
void rcp_approx_array_ref(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_from_bits(rcp_approx_bits(f32_bits(x[i]), rcp));
}

void exp_exact_array_ref(const float* x, std::size_t n, float* out, bool base2) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = base2 ? float(std::exp2(double(x[i]))) : float(std::exp(double(x[i])));
}

// ---- AVX-512 kernels ---------------------------------------------------------------------------

#if ATTNSIM_X86_KERNELS
namespace {

// The range scaling of the non-.ftz variants multiplies in FP32 like the scalar model; under
// MXCSR.DAZ/FTZ (set by a -ffast-math library) both would flush, but the references are used
// then anyway, as in convert_array.
bool mxcsr_plain() { return (_mm_getcsr() & 0x8040u) == 0; }

inline __mmask16 tail_mask(std::size_t left) { return __mmask16((1u << left) - 1); }

// T± of Ex2ApproxFtz in 4 MiB instead of 64: T±[f] = P±(f) + code±(f) − bias±, P± a prediction
// of 2^(±f·2^-23) in the entry's bit units by double-precision operations (predict8: the same
// vector code builds the codes and reads them, so only the codes' range needs checking, which
// build_ex2_compact does on every entry), code± a 2-bit number. On the H100's tables P± is within
// a few units of T± (the MUFU result lies within about 2 ulp of 2^x): codes 0..2 for T+ and 0..3
// for T-. The 32 MiB tables' random gathers miss the caches and the TLB (11 ns per lane on this
// CPU); the 2 MiB of codes a sign reads fit the L2 cache.
struct Ex2Compact {
  alignas(64) double e[2][16];  // 2^(±i/16)
  double c1[2], c2, c3[2], c4;  // the quartic of 2^(±r) = 1 + r·(c1 + r·(c2 + r·(c3 + r·c4)))
  std::int32_t bias[2];
  // Entry f of T+ in word f/16, of T- in word 2^19 + f/16: 4 MiB on 2 MiB pages where the
  // kernel grants them (random gathers over 4 KiB pages miss the first-level TLB).
  std::unique_ptr<std::uint32_t, void (*)(void*)> codes{nullptr, &std::free};
  const std::uint32_t* words = nullptr;  // codes.get(): the kernels call no inline STL function
};

// P± of 8 lanes (neg: the T- lanes): 2^(±f·2^-23) = 2^(±(f>>19)/16) · 2^(±r), r = (f mod 2^19)
// · 2^-23 < 2^-4, in the bit pattern's units (T+ = 0x3F000000 + y·2^23 for y in [1, 2), T- =
// 0x3E800000 + y·2^24 for y in (1/2, 1]), truncated. No gather: a vector gather costs about
// 30 cycles on this CPU even from the L1 cache.
ATTNSIM_TARGET_AVX512 inline __m256i ex2_predict8(__m256i f, __mmask8 neg, const Ex2Compact& c) {
  const __m512d r = _mm512_mul_pd(
      _mm512_cvtepi32_pd(_mm256_and_si256(f, _mm256_set1_epi32(0x7FFFF))), _mm512_set1_pd(0x1p-23));
  const __m512d c1 = _mm512_mask_blend_pd(neg, _mm512_set1_pd(c.c1[0]), _mm512_set1_pd(c.c1[1]));
  const __m512d c3 = _mm512_mask_blend_pd(neg, _mm512_set1_pd(c.c3[0]), _mm512_set1_pd(c.c3[1]));
  __m512d q = _mm512_mul_pd(_mm512_set1_pd(c.c4), r);
  q = _mm512_add_pd(q, c3);
  q = _mm512_mul_pd(q, r);
  q = _mm512_add_pd(q, _mm512_set1_pd(c.c2));
  q = _mm512_mul_pd(q, r);
  q = _mm512_add_pd(q, c1);
  q = _mm512_mul_pd(q, r);
  q = _mm512_add_pd(q, _mm512_set1_pd(1.0));
  const __m512i idx = _mm512_cvtepu32_epi64(_mm256_srli_epi32(f, 19));
  const __m512d ep = _mm512_permutex2var_pd(_mm512_load_pd(c.e[0]), idx, _mm512_load_pd(c.e[0] + 8));
  const __m512d en = _mm512_permutex2var_pd(_mm512_load_pd(c.e[1]), idx, _mm512_load_pd(c.e[1] + 8));
  const __m512d y = _mm512_mul_pd(_mm512_mask_blend_pd(neg, ep, en), q);
  const __m512d z =
      _mm512_mul_pd(y, _mm512_mask_blend_pd(neg, _mm512_set1_pd(0x1p23), _mm512_set1_pd(0x1p24)));
  const __m256i base = _mm256_mask_blend_epi32(neg, _mm256_set1_epi32(0x3F000000),
                                               _mm256_set1_epi32(0x3E800000));
  return _mm256_add_epi32(_mm512_cvttpd_epi32(z), base);
}

ATTNSIM_TARGET_AVX512 inline __m512i ex2_predict16(__m512i f, __mmask16 neg, const Ex2Compact& c) {
  const __m256i p0 = ex2_predict8(_mm512_castsi512_si256(f), __mmask8(neg), c);
  const __m256i p1 = ex2_predict8(_mm512_extracti64x4_epi64(f, 1), __mmask8(neg >> 8), c);
  return _mm512_inserti64x4(_mm512_castsi256_si512(p0), p1, 1);
}

// P± of every f of one sign, into p[2^23].
ATTNSIM_TARGET_AVX512 void ex2_predict_all(const Ex2Compact& c, bool negative, std::int32_t* p) {
  const __m512i step = _mm512_set1_epi32(16);
  __m512i f = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::uint32_t i = 0; i < (1u << 23); i += 16, f = _mm512_add_epi32(f, step))
    _mm512_storeu_si512(p + i, ex2_predict16(f, negative ? __mmask16(0xFFFF) : 0, c));
}

// P± of 4 lanes on AVX2: ex2_predict8's operations in the same order on 4 FP64 lanes (every one
// an IEEE operation, so the same bits), the 16-entry table read by a gather from the L1 cache.
// negm: all-ones in the T- lanes.
ATTNSIM_TARGET_AVX2 inline __m128i ex2_predict4(__m128i f, __m128i negm, const Ex2Compact& c) {
  const __m256d neg = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(negm));
  const __m256d r = _mm256_mul_pd(
      _mm256_cvtepi32_pd(_mm_and_si128(f, _mm_set1_epi32(0x7FFFF))), _mm256_set1_pd(0x1p-23));
  const __m256d c1 = _mm256_blendv_pd(_mm256_set1_pd(c.c1[0]), _mm256_set1_pd(c.c1[1]), neg);
  const __m256d c3 = _mm256_blendv_pd(_mm256_set1_pd(c.c3[0]), _mm256_set1_pd(c.c3[1]), neg);
  __m256d q = _mm256_mul_pd(_mm256_set1_pd(c.c4), r);
  q = _mm256_add_pd(q, c3);
  q = _mm256_mul_pd(q, r);
  q = _mm256_add_pd(q, _mm256_set1_pd(c.c2));
  q = _mm256_mul_pd(q, r);
  q = _mm256_add_pd(q, c1);
  q = _mm256_mul_pd(q, r);
  q = _mm256_add_pd(q, _mm256_set1_pd(1.0));
  // Index i of e[0] (T+) or 16 + i (e[1], T-).
  const __m128i idx =
      _mm_add_epi32(_mm_srli_epi32(f, 19), _mm_and_si128(negm, _mm_set1_epi32(16)));
  const __m256d e = _mm256_i32gather_pd(&c.e[0][0], idx, 8);
  const __m256d y = _mm256_mul_pd(e, q);
  const __m256d z =
      _mm256_mul_pd(y, _mm256_blendv_pd(_mm256_set1_pd(0x1p23), _mm256_set1_pd(0x1p24), neg));
  const __m128i base = _mm_blendv_epi8(_mm_set1_epi32(0x3F000000), _mm_set1_epi32(0x3E800000), negm);
  return _mm_add_epi32(_mm256_cvttpd_epi32(z), base);
}

ATTNSIM_TARGET_AVX2 inline __m256i ex2_predict8_avx2(__m256i f, __m256i negm, const Ex2Compact& c) {
  const __m128i p0 = ex2_predict4(_mm256_castsi256_si128(f), _mm256_castsi256_si128(negm), c);
  const __m128i p1 =
      ex2_predict4(_mm256_extracti128_si256(f, 1), _mm256_extracti128_si256(negm, 1), c);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(p0), p1, 1);
}

ATTNSIM_TARGET_AVX2 void ex2_predict_all_avx2(const Ex2Compact& c, bool negative,
                                              std::int32_t* p) {
  const __m256i step = _mm256_set1_epi32(8);
  const __m256i negm = _mm256_set1_epi32(negative ? -1 : 0);
  __m256i f = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::uint32_t i = 0; i < (1u << 23); i += 8, f = _mm256_add_epi32(f, step))
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), ex2_predict8_avx2(f, negm, c));
}

// The compact form of ex2's tables, or none when an entry's difference from P± needs more than 2
// bits (not so for the H100's tables: tests/numerics/special_array_test.cpp). Built with the
// AVX-512 or the AVX2 prediction (the same bits: tests/numerics/special_array_test.cpp
// Ex2EveryTableEntry, run at each instruction set, reads every entry through both), by what the
// CPU has.
std::shared_ptr<const void> build_ex2_compact(const Ex2ApproxFtz& ex2) {
  auto c = std::make_shared<Ex2Compact>();
  for (int i = 0; i < 16; ++i) {
    c->e[0][i] = std::exp2(double(i) / 16.0);
    c->e[1][i] = std::exp2(-double(i) / 16.0);
  }
  const double ln2 = 0.69314718055994530942;
  c->c1[0] = ln2;
  c->c1[1] = -ln2;
  c->c2 = ln2 * ln2 / 2.0;
  c->c3[0] = ln2 * ln2 * ln2 / 6.0;
  c->c3[1] = -c->c3[0];
  c->c4 = ln2 * ln2 * ln2 * ln2 / 24.0;
  constexpr std::size_t kBytes = std::size_t{4} << 20;
  c->codes.reset(static_cast<std::uint32_t*>(std::aligned_alloc(std::size_t{2} << 20, kBytes)));
  if (!c->codes) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(c->codes.get(), kBytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages work too
#endif
  std::memset(c->codes.get(), 0, kBytes);
  c->words = c->codes.get();
  std::vector<std::int32_t> p(std::size_t{1} << 23);
  for (int s = 0; s < 2; ++s) {
    if (detected_isa() >= Isa::kAvx512) {
      ex2_predict_all(*c, s == 1, p.data());
    } else {
      ex2_predict_all_avx2(*c, s == 1, p.data());
    }
    const std::uint32_t* t = ex2.table_data(s == 1);
    std::int32_t lo = 0, hi = 0;
    for (std::uint32_t f = 0; f < (1u << 23); ++f) {
      const std::int32_t d = std::int32_t(t[f]) - p[f];
      lo = f == 0 ? d : std::min(lo, d);
      hi = f == 0 ? d : std::max(hi, d);
    }
    if (hi - lo > 3) return nullptr;
    c->bias[s] = -lo;
    std::uint32_t* w = c->codes.get() + (std::size_t(s) << 19);
    for (std::uint32_t f = 0; f < (1u << 23); ++f)
      w[f >> 4] |= std::uint32_t(std::int32_t(t[f]) - p[f] - lo) << (2 * (f & 15));
  }
  return c;
}

const Ex2Compact* ex2_compact(const Ex2ApproxFtz& ex2) {
  return static_cast<const Ex2Compact*>(ex2.derived(&build_ex2_compact));
}

// T±[f] of 16 lanes (f < 2^23) from the compact form.
ATTNSIM_TARGET_AVX512 inline __m512i ex2_compact_lookup(__m512i f, __mmask16 neg,
                                                        const Ex2Compact& c) {
  __m512i word = _mm512_srli_epi32(f, 4);
  word = _mm512_mask_add_epi32(word, neg, word, _mm512_set1_epi32(1 << 19));
  const __m512i w = _mm512_i32gather_epi32(word, c.words, 4);
  const __m512i code = _mm512_and_si512(
      _mm512_srlv_epi32(w, _mm512_slli_epi32(_mm512_and_si512(f, _mm512_set1_epi32(15)), 1)),
      _mm512_set1_epi32(3));
  const __m512i bias =
      _mm512_mask_blend_epi32(neg, _mm512_set1_epi32(c.bias[0]), _mm512_set1_epi32(c.bias[1]));
  return _mm512_sub_epi32(_mm512_add_epi32(ex2_predict16(f, neg, c), code), bias);
}

// Ex2ApproxFtz::bits of 16 lanes: T± gathered from the tables (pos, negt) or, with cmp, from
// their compact form.
ATTNSIM_TARGET_AVX512 inline __m512i ex2_ftz_vec(__m512i u, const std::uint32_t* pos,
                                                 const std::uint32_t* negt, const Ex2Compact* cmp) {

  const __m512i zero = _mm512_setzero_si512();
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(0xFF));
  const __m512i m = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFF));
  const __mmask16 neg = _mm512_cmplt_epi32_mask(u, zero);
  const __mmask16 nan =
      _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)) & _mm512_cmpneq_epi32_mask(m, zero);
  const __mmask16 big = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(127 + 7));
  const __mmask16 normal = _mm512_cmpneq_epi32_mask(e, zero);
  // K = trunc(|x| · 2^23) = sig << (e - 127) or sig >> (127 - e) (0 past 31 bits, 0 for e = 0).
  const __m512i sig = _mm512_or_si512(m, _mm512_set1_epi32(0x800000));
  const __m512i sh = _mm512_sub_epi32(e, _mm512_set1_epi32(127));
  const __mmask16 up = _mm512_cmpge_epi32_mask(sh, zero);
  __m512i k = _mm512_srlv_epi32(sig, _mm512_sub_epi32(zero, sh));
  k = _mm512_mask_sllv_epi32(k, up, sig, sh);
  k = _mm512_maskz_mov_epi32(normal, k);
  const __m512i a = _mm512_srli_epi32(k, 23);
  const __m512i f = _mm512_and_si512(k, _mm512_set1_epi32(0x7FFFFF));
  __m512i t;
  if (cmp) {
    t = ex2_compact_lookup(f, neg, *cmp);
  } else {
    const __mmask16 live = __mmask16(~big);
    t = _mm512_mask_i32gather_epi32(zero, live & __mmask16(~neg), f, pos, 4);
    t = _mm512_mask_i32gather_epi32(t, live & neg, f, negt, 4);
  }
  const __m512i sa = _mm512_mask_sub_epi32(a, neg, zero, a);
  const __m512i re = _mm512_add_epi32(
      _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(t, 23), _mm512_set1_epi32(0xFF)),
                       _mm512_set1_epi32(127)),
      sa);
  __m512i r = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(re, _mm512_set1_epi32(127)), 23),
                              _mm512_and_si512(t, _mm512_set1_epi32(0x7FFFFF)));
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  r = _mm512_mask_mov_epi32(r, _mm512_cmplt_epi32_mask(re, _mm512_set1_epi32(-126)), zero);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(re, _mm512_set1_epi32(127)), inf);
  r = _mm512_mask_mov_epi32(r, big, _mm512_maskz_mov_epi32(__mmask16(~neg), inf));
  return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FFFFFFF));
}

// RcpApproxFtz::bits of 16 lanes.
ATTNSIM_TARGET_AVX512 inline __m512i rcp_ftz_vec(__m512i u, const std::uint32_t* table) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(int(0x80000000u)));
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(0xFF));
  const __m512i m = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFF));
  const __mmask16 special = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF));
  const __mmask16 zero_in = _mm512_cmpeq_epi32_mask(e, zero);
  const __m512i tm =
      _mm512_mask_i32gather_epi32(zero, __mmask16(~(special | zero_in)), m, table, 4);
  // re = (exponent of tm) - (e - 127); the result's biased exponent is re + 127.
  const __m512i re = _mm512_sub_epi32(
      _mm512_and_si512(_mm512_srli_epi32(tm, 23), _mm512_set1_epi32(0xFF)), e);
  __m512i r = _mm512_or_si512(
      sign, _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(re, _mm512_set1_epi32(127)), 23),
                            _mm512_and_si512(tm, _mm512_set1_epi32(0x7FFFFF))));
  r = _mm512_mask_mov_epi32(r, _mm512_cmplt_epi32_mask(re, _mm512_set1_epi32(-126)), sign);
  r = _mm512_mask_mov_epi32(r, zero_in, _mm512_or_si512(sign, _mm512_set1_epi32(0x7F800000)));
  const __mmask16 nan = special & _mm512_cmpneq_epi32_mask(m, zero);
  r = _mm512_mask_mov_epi32(r, special, sign);
  return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FFFFFFF));
}

ATTNSIM_TARGET_AVX512 inline __m512i canonical_vec_nan(__m512 v) {
  return _mm512_mask_mov_epi32(_mm512_castps_si512(v), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                               _mm512_set1_epi32(0x7FFFFFFF));
}

// kVariant: 0 ex2.ftz, 1 ex2 (range scaled), 2 rcp.ftz, 3 rcp (range scaled).
template <int kVariant>
ATTNSIM_TARGET_AVX512 inline __m512i mufu_vec(__m512i u, const std::uint32_t* t0,
                                              const std::uint32_t* t1, const Ex2Compact* cmp) {
  if constexpr (kVariant == 0) {
    return ex2_ftz_vec(u, t0, t1, cmp);
  } else if constexpr (kVariant == 1) {
    // x < -126: r = ex2.ftz(x · 0.5), result r · r (ex2_approx_bits).
    const __m512 x = _mm512_castsi512_ps(u);
    const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_LT_OQ);
    const __m512 xs = _mm512_mask_mul_ps(x, low, x, _mm512_set1_ps(0.5f));
    const __m512 r = _mm512_castsi512_ps(ex2_ftz_vec(_mm512_castps_si512(xs), t0, t1, cmp));
    return canonical_vec_nan(_mm512_mask_mul_ps(r, low, r, r));
  } else if constexpr (kVariant == 2) {
    return rcp_ftz_vec(u, t0);
  } else {
    // |x| >= 2^126: rcp.ftz(x · 0.25) · 0.25; |x| < 2^-126: rcp.ftz(x · 2^24) · 2^24
    // (rcp_approx_bits).
    const __m512 x = _mm512_castsi512_ps(u);
    const __m512 a = _mm512_abs_ps(x);
    const __mmask16 big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p126f), _CMP_GE_OQ);
    const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ);
    __m512 s = _mm512_set1_ps(1.0f);
    s = _mm512_mask_mov_ps(s, big, _mm512_set1_ps(0.25f));
    s = _mm512_mask_mov_ps(s, small, _mm512_set1_ps(16777216.0f));
    const __mmask16 scaled = big | small;
    const __m512 xs = _mm512_mask_mul_ps(x, scaled, x, s);
    const __m512 r = _mm512_castsi512_ps(rcp_ftz_vec(_mm512_castps_si512(xs), t0));
    const __m512i rs = canonical_vec_nan(_mm512_mul_ps(r, s));
    return _mm512_mask_mov_epi32(_mm512_castps_si512(r), scaled, rs);
  }
}

template <int kVariant>
ATTNSIM_TARGET_AVX512 void mufu_kernel(const float* x, std::size_t n, float* out,
                                       const std::uint32_t* t0, const std::uint32_t* t1,
                                       const Ex2Compact* cmp) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_si512(out + i, mufu_vec<kVariant>(_mm512_loadu_si512(x + i), t0, t1, cmp));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_epi32(out + i, m,
                             mufu_vec<kVariant>(_mm512_maskz_loadu_epi32(m, x + i), t0, t1, cmp));
  }
}

// ---- the same on AVX2 (8 lanes; lane masks are all-ones compare results) ----

using avx2_lanes::select;

// T±[f] of 8 lanes from the compact form (ex2_compact_lookup).
// The code words' indices of 8 lanes.
ATTNSIM_TARGET_AVX2 inline __m256i ex2_code_word8(__m256i f, __m256i negm) {
  return _mm256_add_epi32(_mm256_srli_epi32(f, 4),
                          _mm256_and_si256(negm, _mm256_set1_epi32(1 << 19)));
}

// w: the lanes' code words (words[ex2_code_word8(f, negm)]).
ATTNSIM_TARGET_AVX2 inline __m256i ex2_compact_lookup8(__m256i f, __m256i negm, __m256i w,
                                                       const Ex2Compact& c) {
  const __m256i code = _mm256_and_si256(
      _mm256_srlv_epi32(w, _mm256_slli_epi32(_mm256_and_si256(f, _mm256_set1_epi32(15)), 1)),
      _mm256_set1_epi32(3));
  const __m256i bias = select(negm, _mm256_set1_epi32(c.bias[1]), _mm256_set1_epi32(c.bias[0]));
  return _mm256_sub_epi32(_mm256_add_epi32(ex2_predict8_avx2(f, negm, c), code), bias);
}

// The fields of ex2_ftz_vec8's input: the T- lanes, K = trunc(|x| · 2^23)'s integer part a and
// fraction f (0 past 31 bits, 0 for a zero or subnormal x). vpsrlvd/vpsllvd give 0 for counts
// above 31, as their AVX-512 forms do.
struct Ex2Fields8 {
  __m256i negm, a, f;
};
ATTNSIM_TARGET_AVX2 inline Ex2Fields8 ex2_fields8(__m256i u) {
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi32(-1);
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xFF));
  const __m256i m = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFF));
  const __m256i normal = _mm256_xor_si256(_mm256_cmpeq_epi32(e, zero), ones);
  const __m256i sig = _mm256_or_si256(m, _mm256_set1_epi32(0x800000));
  const __m256i sh = _mm256_sub_epi32(e, _mm256_set1_epi32(127));
  const __m256i up = _mm256_cmpgt_epi32(sh, ones);
  __m256i k = _mm256_srlv_epi32(sig, _mm256_sub_epi32(zero, sh));
  k = select(up, _mm256_sllv_epi32(sig, sh), k);
  k = _mm256_and_si256(k, normal);
  return {_mm256_cmpgt_epi32(zero, u), _mm256_srli_epi32(k, 23),
          _mm256_and_si256(k, _mm256_set1_epi32(0x7FFFFF))};
}

// Ex2ApproxFtz::bits of 8 lanes (ex2_ftz_vec); with cmp, w holds the lanes' code words
// (ex2_code_word8).
ATTNSIM_TARGET_AVX2 inline __m256i ex2_ftz_vec8(__m256i u, const std::uint32_t* pos,
                                                const std::uint32_t* negt, const Ex2Compact* cmp,
                                                __m256i w) {
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi32(-1);
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xFF));
  const __m256i m = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFF));
  const __m256i nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(m, zero),
                                          _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF)));
  const __m256i big = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(127 + 6));
  const Ex2Fields8 fl = ex2_fields8(u);
  const __m256i negm = fl.negm, a = fl.a, f = fl.f;
  __m256i t;
  if (cmp) {
    t = ex2_compact_lookup8(f, negm, w, *cmp);
  } else {
    const __m256i live = _mm256_xor_si256(big, ones);
    t = _mm256_mask_i32gather_epi32(zero, reinterpret_cast<const int*>(pos), f,
                                    _mm256_andnot_si256(negm, live), 4);
    t = _mm256_mask_i32gather_epi32(t, reinterpret_cast<const int*>(negt), f,
                                    _mm256_and_si256(negm, live), 4);
  }
  const __m256i sa = select(negm, _mm256_sub_epi32(zero, a), a);
  const __m256i re = _mm256_add_epi32(
      _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(t, 23), _mm256_set1_epi32(0xFF)),
                       _mm256_set1_epi32(127)),
      sa);
  __m256i r = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_add_epi32(re, _mm256_set1_epi32(127)), 23),
      _mm256_and_si256(t, _mm256_set1_epi32(0x7FFFFF)));
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  r = select(_mm256_cmpgt_epi32(_mm256_set1_epi32(-126), re), zero, r);
  r = select(_mm256_cmpgt_epi32(re, _mm256_set1_epi32(127)), inf, r);
  r = select(big, _mm256_andnot_si256(negm, inf), r);
  return select(nan, _mm256_set1_epi32(0x7FFFFFFF), r);
}

// RcpApproxFtz::bits of 8 lanes (rcp_ftz_vec).
ATTNSIM_TARGET_AVX2 inline __m256i rcp_ftz_vec8(__m256i u, const std::uint32_t* table) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(int(0x80000000u)));
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xFF));
  const __m256i m = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFF));
  const __m256i special = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF));
  const __m256i zero_in = _mm256_cmpeq_epi32(e, zero);
  const __m256i tm = _mm256_mask_i32gather_epi32(
      zero, reinterpret_cast<const int*>(table), m,
      _mm256_xor_si256(_mm256_or_si256(special, zero_in), _mm256_set1_epi32(-1)), 4);
  const __m256i re = _mm256_sub_epi32(
      _mm256_and_si256(_mm256_srli_epi32(tm, 23), _mm256_set1_epi32(0xFF)), e);
  __m256i r = _mm256_or_si256(
      sign, _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(re, _mm256_set1_epi32(127)), 23),
                            _mm256_and_si256(tm, _mm256_set1_epi32(0x7FFFFF))));
  r = select(_mm256_cmpgt_epi32(_mm256_set1_epi32(-126), re), sign, r);
  r = select(zero_in, _mm256_or_si256(sign, _mm256_set1_epi32(0x7F800000)), r);
  const __m256i nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(m, zero), special);
  r = select(special, sign, r);
  return select(nan, _mm256_set1_epi32(0x7FFFFFFF), r);
}

ATTNSIM_TARGET_AVX2 inline __m256i canonical_vec_nan8(__m256 v) {
  return select(_mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)),
             _mm256_set1_epi32(0x7FFFFFFF), _mm256_castps_si256(v));
}

// The input ex2_ftz_vec8 sees for variant kVariant (0 or 1): x, or x · 0.5 below -126 (*low:
// those lanes).
template <int kVariant>
ATTNSIM_TARGET_AVX2 inline __m256 ex2_input8(__m256i u, __m256* low) {
  const __m256 x = _mm256_castsi256_ps(u);
  if constexpr (kVariant == 0) {
    *low = _mm256_setzero_ps();
    return x;
  } else {
    *low = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(0.5f)), *low);
  }
}

// kVariant as mufu_vec; w: the code words of ex2's compact form (variants 0 and 1 with cmp).
template <int kVariant>
ATTNSIM_TARGET_AVX2 inline __m256i mufu_vec8(__m256i u, const std::uint32_t* t0,
                                             const std::uint32_t* t1, const Ex2Compact* cmp,
                                             __m256i w) {
  if constexpr (kVariant == 0) {
    return ex2_ftz_vec8(u, t0, t1, cmp, w);
  } else if constexpr (kVariant == 1) {
    __m256 low;
    const __m256 xs = ex2_input8<1>(u, &low);
    const __m256 r = _mm256_castsi256_ps(ex2_ftz_vec8(_mm256_castps_si256(xs), t0, t1, cmp, w));
    return canonical_vec_nan8(_mm256_blendv_ps(r, _mm256_mul_ps(r, r), low));
  } else if constexpr (kVariant == 2) {
    return rcp_ftz_vec8(u, t0);
  } else {
    const __m256 x = _mm256_castsi256_ps(u);
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 big = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p126f), _CMP_GE_OQ);
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    __m256 s = _mm256_set1_ps(1.0f);
    s = _mm256_blendv_ps(s, _mm256_set1_ps(0.25f), big);
    s = _mm256_blendv_ps(s, _mm256_set1_ps(16777216.0f), small);
    const __m256 scaled = _mm256_or_ps(big, small);
    const __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, s), scaled);
    const __m256 r = _mm256_castsi256_ps(rcp_ftz_vec8(_mm256_castps_si256(xs), t0));
    const __m256i rs = canonical_vec_nan8(_mm256_mul_ps(r, s));
    return select(_mm256_castps_si256(scaled), rs, _mm256_castps_si256(r));
  }
}

// The code words of 8 lanes for ex2's compact form (ex2_compact_lookup8's w).
template <int kVariant>
ATTNSIM_TARGET_AVX2 inline __m256i ex2_words8(__m256i u, const Ex2Compact& c) {
  __m256 low;
  const Ex2Fields8 fl = ex2_fields8(_mm256_castps_si256(ex2_input8<kVariant>(u, &low)));
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(c.words),
                                ex2_code_word8(fl.f, fl.negm), 4);
}

template <int kVariant>
ATTNSIM_TARGET_AVX2 void mufu_kernel_avx2(const float* x, std::size_t n, float* out,
                                          const std::uint32_t* t0, const std::uint32_t* t1,
                                          const Ex2Compact* cmp) {
  // ex2 with the compact form: the code words of a chunk are gathered first, in a loop of little
  // else, so that many of their cache misses are in flight at once (one 8-lane gather per output
  // vector keeps too few: the 4 MiB of codes do not fit the L2 cache), then the chunk computed.
  constexpr int kChunk = 64;
  const bool words = kVariant <= 1 && cmp;
  alignas(32) std::uint32_t w[kChunk];
  std::size_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    if (words)
      for (int j = 0; j < kChunk; j += 8)
        _mm256_store_si256(
            reinterpret_cast<__m256i*>(w + j),
            ex2_words8<kVariant == 1 ? 1 : 0>(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + j)), *cmp));
    for (int j = 0; j < kChunk; j += 8)
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + i + j),
          mufu_vec8<kVariant>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + j)), t0,
                              t1, cmp, _mm256_load_si256(reinterpret_cast<const __m256i*>(w + j))));
  }
  for (; i < n; i += 8) {
    const __m256i m = avx2_lanes::first8(int(n - i));
    const __m256i v = _mm256_maskload_epi32(reinterpret_cast<const int*>(x + i), m);
    const __m256i wv = words ? ex2_words8<kVariant == 1 ? 1 : 0>(v, *cmp) : _mm256_setzero_si256();
    _mm256_maskstore_epi32(reinterpret_cast<int*>(out + i), m,
                           mufu_vec8<kVariant>(v, t0, t1, cmp, wv));
  }
}

// The Taylor coefficients 1/i! of exp_f64_8's and exp_f64_4's degree-13 polynomial.
constexpr double kExpTaylor[14] = {1.0,        1.0,          1.0 / 2,        1.0 / 6,
                                   1.0 / 24,   1.0 / 120,    1.0 / 720,      1.0 / 5040,
                                   1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
                                   1.0 / 479001600, 1.0 / 6227020800.0};

// float(exp(double(x))) of 8 lanes (base2: exp2); `slow` receives the lanes the reference must
// compute (NaN, +Inf, a subnormal or overflowing FP32 result, an FP64 value within 64 ulps of an
// FP32 rounding boundary). Arguments at or below -104 (-150 for exp2) give +0 directly: their
// exact exponential lies below 2^-150, half the smallest subnormal.
ATTNSIM_TARGET_AVX512 inline __m256 exp_f64_8(__m256 xf, bool base2, __mmask8* slow) {
  const __m512d x = _mm512_cvtps_pd(xf);
  const __m512d lo = _mm512_set1_pd(base2 ? -126.0 : -87.0);
  const __m512d hi = _mm512_set1_pd(base2 ? 127.5 : 88.3);
  const __m512d zero_at = _mm512_set1_pd(base2 ? -150.0 : -104.0);
  const __mmask8 in = _mm512_cmp_pd_mask(x, lo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(x, hi, _CMP_LE_OQ);
  const __mmask8 zero = _mm512_cmp_pd_mask(x, zero_at, _CMP_LE_OQ);
  const __m512d xs = _mm512_mask_mov_pd(_mm512_setzero_pd(), in, x);
  __m512d k, r;
  if (base2) {
    k = _mm512_roundscale_pd(xs, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_mul_pd(_mm512_sub_pd(xs, k), _mm512_set1_pd(0x1.62e42fefa39efp-1));
  } else {
    k = _mm512_roundscale_pd(_mm512_mul_pd(xs, _mm512_set1_pd(0x1.71547652b82fep0)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Cody-Waite: k·ln2_hi is exact (ln2_hi has 32 significant bits, |k| <= 128).
    r = _mm512_sub_pd(xs, _mm512_mul_pd(k, _mm512_set1_pd(0x1.62e42feep-1)));
    r = _mm512_sub_pd(r, _mm512_mul_pd(k, _mm512_set1_pd(0x1.a39ef35793c76p-33)));
  }
  // e^r, |r| <= 0.35: Taylor to degree 13 (truncation below 5e-18 relative), Horner.
  __m512d p = _mm512_set1_pd(kExpTaylor[13]);
  for (int i = 12; i >= 0; --i) p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(kExpTaylor[i]));
  const __m512i e = _mm512_slli_epi64(
      _mm512_add_epi64(_mm512_cvtpd_epi64(k), _mm512_set1_epi64(1023)), 52);
  const __m512d y = _mm512_mul_pd(p, _mm512_castsi512_pd(e));
  // The FP32 rounding boundaries (midpoints) of a normal FP64 value: the 29 bits below FP32's
  // last place equal 2^28.
  const __m512i low = _mm512_and_si512(_mm512_castpd_si512(y), _mm512_set1_epi64((1ll << 29) - 1));
  const __m512i d = _mm512_abs_epi64(_mm512_sub_epi64(low, _mm512_set1_epi64(1ll << 28)));
  const __mmask8 near = _mm512_cmple_epi64_mask(d, _mm512_set1_epi64(64));
  *slow = __mmask8(~(in | zero)) | (in & near);
  return _mm256_maskz_mov_ps(in, _mm512_cvtpd_ps(y));  // +0 for the zero lanes
}

// exp_exact_array over n values; the lanes exp_f64_8 hands back are recomputed by the caller:
// their indices go to slow_at (at most n), their count is returned.
ATTNSIM_TARGET_AVX512 std::size_t exp_exact_kernel(const float* x, std::size_t n, float* out,
                                                   bool base2, std::uint32_t* slow_at) {
  std::size_t ns = 0;
  for (std::size_t i = 0; i < n; i += 8) {
    const std::size_t m = n - i < 8 ? n - i : 8;
    const __mmask8 live = __mmask8((1u << m) - 1u);
    __mmask8 slow;
    const __m256 r = exp_f64_8(_mm256_maskz_loadu_ps(live, x + i), base2, &slow);
    _mm256_mask_storeu_ps(out + i, live, r);
    for (unsigned s = slow & live; s != 0; s &= s - 1)
      slow_at[ns++] = std::uint32_t(i + std::size_t(__builtin_ctz(s)));
  }
  return ns;
}

// exp_f64_8 on AVX2, 4 lanes: the same FP64 operations in the same order (every one an IEEE
// operation: the same bits); k, an integer of at most 8 bits, converts exactly through int32.
// Returns the 4 FP32 results, *slow the lanes (bits 0-3) the reference must compute.
ATTNSIM_TARGET_AVX2 inline __m128 exp_f64_4(__m128 xf, bool base2, int* slow) {
  const __m256d x = _mm256_cvtps_pd(xf);
  const __m256d lo = _mm256_set1_pd(base2 ? -126.0 : -87.0);
  const __m256d hi = _mm256_set1_pd(base2 ? 127.5 : 88.3);
  const __m256d zero_at = _mm256_set1_pd(base2 ? -150.0 : -104.0);
  const __m256d in = _mm256_and_pd(_mm256_cmp_pd(x, lo, _CMP_GE_OQ), _mm256_cmp_pd(x, hi, _CMP_LE_OQ));
  const __m256d zero = _mm256_cmp_pd(x, zero_at, _CMP_LE_OQ);
  const __m256d xs = _mm256_and_pd(in, x);
  __m256d k, r;
  if (base2) {
    k = _mm256_round_pd(xs, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_mul_pd(_mm256_sub_pd(xs, k), _mm256_set1_pd(0x1.62e42fefa39efp-1));
  } else {
    k = _mm256_round_pd(_mm256_mul_pd(xs, _mm256_set1_pd(0x1.71547652b82fep0)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_sub_pd(xs, _mm256_mul_pd(k, _mm256_set1_pd(0x1.62e42feep-1)));
    r = _mm256_sub_pd(r, _mm256_mul_pd(k, _mm256_set1_pd(0x1.a39ef35793c76p-33)));
  }
  __m256d p = _mm256_set1_pd(kExpTaylor[13]);
  for (int i = 12; i >= 0; --i) p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(kExpTaylor[i]));
  const __m256i e = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)), _mm256_set1_epi64x(1023)), 52);
  const __m256d y = _mm256_mul_pd(p, _mm256_castsi256_pd(e));
  const __m256i low =
      _mm256_and_si256(_mm256_castpd_si256(y), _mm256_set1_epi64x((1ll << 29) - 1));
  const __m256i d = _mm256_sub_epi64(low, _mm256_set1_epi64x(1ll << 28));
  const __m256i near = _mm256_and_si256(_mm256_cmpgt_epi64(d, _mm256_set1_epi64x(-65)),
                                        _mm256_cmpgt_epi64(_mm256_set1_epi64x(65), d));
  const int in_bits = _mm256_movemask_pd(in), zero_bits = _mm256_movemask_pd(zero);
  const int near_bits = _mm256_movemask_pd(_mm256_castsi256_pd(near));
  *slow = (~(in_bits | zero_bits) & 0xF) | (in_bits & near_bits);
  // The 4 FP64 lane masks as 4 FP32 lane masks (the low half of each), +0 for the other lanes.
  const __m128 in4 = _mm_castsi128_ps(avx2_lanes::narrow_mask(_mm256_castpd_si256(in)));
  return _mm_and_ps(_mm256_cvtpd_ps(y), in4);
}

ATTNSIM_TARGET_AVX2 std::size_t exp_exact_kernel_avx2(const float* x, std::size_t n, float* out,
                                                      bool base2, std::uint32_t* slow_at) {
  std::size_t ns = 0;
  for (std::size_t i = 0; i < n; i += 4) {
    const std::size_t m = n - i < 4 ? n - i : 4;
    const __m128i live = _mm_cmpgt_epi32(_mm_set1_epi32(int(m)), _mm_setr_epi32(0, 1, 2, 3));
    int slow;
    const __m128 r = exp_f64_4(_mm_maskload_ps(x + i, live), base2, &slow);
    _mm_maskstore_ps(out + i, live, r);
    for (unsigned sb = unsigned(slow) & ((1u << m) - 1u); sb != 0; sb &= sb - 1)
      slow_at[ns++] = std::uint32_t(i + std::size_t(__builtin_ctz(sb)));
  }
  return ns;
}

}  // namespace
#endif  // ATTNSIM_X86_KERNELS

// ---- the instruction sets' entry points (numerics/dispatch.cpp's tables) ----------------------

#if ATTNSIM_X86_KERNELS
namespace kernels_x86 {

namespace {

// exp_exact in chunks, so that the indices of the lanes for the reference fit a small buffer; x
// may be out (each chunk's arguments are read before its results are written, the slow lanes'
// again from a copy).
template <class Kernel>
void exp_exact_chunks(const float* x, std::size_t n, float* out, bool base2, Kernel kernel) {
  constexpr std::size_t kChunk = 1024;
  std::uint32_t slow_at[kChunk];
  float xin[kChunk];
  for (std::size_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::size_t m = std::min(kChunk, n - i0);
    std::copy(x + i0, x + i0 + m, xin);
    const std::size_t ns = kernel(xin, m, out + i0, base2, slow_at);
    for (std::size_t k = 0; k < ns; ++k)
      exp_exact_array_ref(xin + slow_at[k], 1, out + i0 + slow_at[k], base2);
  }
}

}  // namespace

// Each entry takes its kernel under MXCSR's default (else the reference).
void exp_exact_avx512(const float* x, std::size_t n, float* out, bool base2) {
  if (!mxcsr_plain()) return exp_exact_array_ref(x, n, out, base2);
  exp_exact_chunks(x, n, out, base2, exp_exact_kernel);
}
void exp_exact_avx2(const float* x, std::size_t n, float* out, bool base2) {
  if (!mxcsr_plain()) return exp_exact_array_ref(x, n, out, base2);
  exp_exact_chunks(x, n, out, base2, exp_exact_kernel_avx2);
}
void ex2_approx_ftz_avx512(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  if (!mxcsr_plain()) return ex2_approx_ftz_array_ref(x, n, out, ex2);
  mufu_kernel<0>(x, n, out, ex2.table_data(false), ex2.table_data(true), ex2_compact(ex2));
}
void ex2_approx_ftz_avx2(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  if (!mxcsr_plain()) return ex2_approx_ftz_array_ref(x, n, out, ex2);
  mufu_kernel_avx2<0>(x, n, out, ex2.table_data(false), ex2.table_data(true), ex2_compact(ex2));
}
void ex2_approx_avx512(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  if (!mxcsr_plain()) return ex2_approx_array_ref(x, n, out, ex2);
  mufu_kernel<1>(x, n, out, ex2.table_data(false), ex2.table_data(true), ex2_compact(ex2));
}
void ex2_approx_avx2(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  if (!mxcsr_plain()) return ex2_approx_array_ref(x, n, out, ex2);
  mufu_kernel_avx2<1>(x, n, out, ex2.table_data(false), ex2.table_data(true), ex2_compact(ex2));
}
void rcp_approx_ftz_avx512(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  if (!mxcsr_plain()) return rcp_approx_ftz_array_ref(x, n, out, rcp);
  mufu_kernel<2>(x, n, out, rcp.table_data(), nullptr, nullptr);
}
void rcp_approx_ftz_avx2(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  if (!mxcsr_plain()) return rcp_approx_ftz_array_ref(x, n, out, rcp);
  mufu_kernel_avx2<2>(x, n, out, rcp.table_data(), nullptr, nullptr);
}
void rcp_approx_avx512(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  if (!mxcsr_plain()) return rcp_approx_array_ref(x, n, out, rcp);
  mufu_kernel<3>(x, n, out, rcp.table_data(), nullptr, nullptr);
}
void rcp_approx_avx2(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  if (!mxcsr_plain()) return rcp_approx_array_ref(x, n, out, rcp);
  mufu_kernel_avx2<3>(x, n, out, rcp.table_data(), nullptr, nullptr);
}

}  // namespace kernels_x86
#endif  // ATTNSIM_X86_KERNELS

// ---- the public functions: the active set's entries (numerics/dispatch.hpp) --------------------

bool ex2_array_compact_tables(const Ex2ApproxFtz& ex2) {
#if ATTNSIM_X86_KERNELS
  if (detected_isa() >= Isa::kAvx2) return ex2_compact(ex2) != nullptr;
#endif
  (void)ex2;
  return false;
}

void exp_exact_array(const float* x, std::size_t n, float* out, bool base2) {
  array_kernels().exp_exact(x, n, out, base2);
}
void ex2_approx_ftz_array(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  array_kernels().ex2_approx_ftz(x, n, out, ex2);
}
void ex2_approx_array(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
  array_kernels().ex2_approx(x, n, out, ex2);
}
void rcp_approx_ftz_array(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  array_kernels().rcp_approx_ftz(x, n, out, rcp);
}
void rcp_approx_array(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
  array_kernels().rcp_approx(x, n, out, rcp);
}

// ---- lg2 and the libdevice functions over arrays (every CPU) -----------------------------------

void lg2_approx_ftz_array_ref(const float* x, std::size_t n, float* out, const Lg2ApproxFtz& lg2) {
  for (std::size_t i = 0; i < n; ++i) out[i] = lg2(x[i]);
}
void lg2_approx_array_ref(const float* x, std::size_t n, float* out, const Lg2ApproxFtz& lg2) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_from_bits(lg2_approx_bits(f32_bits(x[i]), lg2));
}
void expf_libdevice_array_ref(const float* x, std::size_t n, float* out, bool ftz) {
  for (std::size_t i = 0; i < n; ++i) out[i] = expf_libdevice(x[i], ftz);
}
void fast_expf_array_ref(const float* x, std::size_t n, float* out, bool ftz) {
  for (std::size_t i = 0; i < n; ++i) out[i] = fast_expf(x[i], ftz);
}
void fast_logf_array_ref(const float* x, std::size_t n, float* out, bool ftz) {
  for (std::size_t i = 0; i < n; ++i) out[i] = fast_logf(x[i], ftz);
}
void tanhf_libdevice_array_ref(const float* x, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = tanhf_libdevice(x[i]);
}

namespace {

constexpr std::size_t kAhead = 16;  // lg2: elements between a prefetch and the read of its entry
constexpr std::size_t kChunk = 256;  // the exponentials: arguments per MUFU array call

template <class Lookup>
void lg2_prefetched(const float* x, std::size_t n, float* out, const Lg2ApproxFtz& lg2,
                    Lookup lookup) {
  const std::uint64_t* t = lg2.table_data();
  for (std::size_t i = 0; i < std::min(n, kAhead); ++i)
    __builtin_prefetch(t + (f32_bits(x[i]) & 0x7FFFFFu));
  for (std::size_t i = 0; i < n; ++i) {
    // The entry a normal input reads (a subnormal one reads another: a prefetch only wasted).
    if (i + kAhead < n) __builtin_prefetch(t + (f32_bits(x[i + kAhead]) & 0x7FFFFFu));
    out[i] = lookup(x[i]);
  }
}

}  // namespace

void lg2_approx_ftz_array(const float* x, std::size_t n, float* out, const Lg2ApproxFtz& lg2) {
  lg2_prefetched(x, n, out, lg2, [&](float v) { return lg2(v); });
}
void lg2_approx_array(const float* x, std::size_t n, float* out, const Lg2ApproxFtz& lg2) {
  lg2_prefetched(x, n, out, lg2,
                 [&](float v) { return f32_from_bits(lg2_approx_bits(f32_bits(v), lg2)); });
}

void expf_libdevice_array(const float* x, std::size_t n, float* out, bool ftz) {
  float r[kChunk], scale[kChunk];
  for (std::size_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::size_t m = std::min(kChunk, n - i0);
    for (std::size_t j = 0; j < m; ++j) {
      const ExpfLibdeviceSteps s = expf_libdevice_reduce(x[i0 + j], ftz);
      r[j] = s.r;
      scale[j] = s.scale;
    }
    ex2_approx_ftz_array(r, m, r);  // both branches call ex2.approx.ftz
    for (std::size_t j = 0; j < m; ++j) out[i0 + j] = expf_libdevice_finish(r[j], scale[j], ftz);
  }
}

void fast_expf_array(const float* x, std::size_t n, float* out, bool ftz) {
  constexpr float kLog2e = 0x1.715476p+0f;  // 0x3FB8AA3B, as fast_expf
  float y[kChunk];
  for (std::size_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::size_t m = std::min(kChunk, n - i0);
    for (std::size_t j = 0; j < m; ++j) y[j] = ftz ? fmul_ftz(x[i0 + j], kLog2e) : x[i0 + j] * kLog2e;
    if (ftz) {
      ex2_approx_ftz_array(y, m, y);
      // The MUFU's NaN is already canonical (Ex2ApproxFtz::bits); fast_expf's canonical() keeps it.
      for (std::size_t j = 0; j < m; ++j)
        out[i0 + j] = std::isnan(y[j]) ? f32_from_bits(0x7FFFFFFFu) : y[j];
    } else {
      ex2_approx_array(y, m, out + i0);
    }
  }
}

void fast_logf_array(const float* x, std::size_t n, float* out, bool ftz) {
  constexpr float kLn2 = 0x1.62e43p-1f;  // 0x3F317218, as fast_logf
  float y[kChunk];
  for (std::size_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::size_t m = std::min(kChunk, n - i0);
    if (ftz) {
      lg2_approx_ftz_array(x + i0, m, y);
    } else {
      lg2_approx_array(x + i0, m, y);
    }
    for (std::size_t j = 0; j < m; ++j) {
      const float v = ftz ? fmul_ftz(y[j], kLn2) : y[j] * kLn2;
      out[i0 + j] = std::isnan(v) ? f32_from_bits(0x7FFFFFFFu) : v;
    }
  }
}

void tanhf_libdevice_array(const float* x, std::size_t n, float* out) {
  float a[kChunk], y[kChunk];
  std::uint32_t big[kChunk];
  for (std::size_t i0 = 0; i0 < n; i0 += kChunk) {
    const std::size_t m = std::min(kChunk, n - i0);
    // The lanes at or above 0.6 through the MUFU steps together; the others by the polynomial.
    std::size_t nb = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const float v = x[i0 + j];
      a[j] = tanhf_libdevice_abs(v);
      if (a[j] >= 0.6f) {
        y[nb] = a[j] * f32_from_bits(0x4038AA3Bu);
        big[nb++] = std::uint32_t(j);
      } else {
        out[i0 + j] = tanhf_libdevice_poly(v);
      }
    }
    ex2_approx_ftz_array(y, nb, y);
    for (std::size_t k = 0; k < nb; ++k) y[k] = y[k] + 1.0f;
    rcp_approx_ftz_array(y, nb, y);
    for (std::size_t k = 0; k < nb; ++k) {
      const std::size_t j = big[k];
      out[i0 + j] = tanhf_libdevice_finish(x[i0 + j], a[j], y[k]);
    }
  }
}

}  // namespace attnsim
