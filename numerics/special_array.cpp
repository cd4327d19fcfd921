// The MUFU models over arrays (see special_array.hpp): the references are loops over the scalar
// models; the AVX-512 kernels compute the same fixed-point index per lane, gather the recorded
// table entries (vpgatherdd) and rebuild the exponent with the scalar model's integer steps.
#include "numerics/special_array.hpp"

#include <cmath>

#include "formats/float32.hpp"
#include "numerics/isa.hpp"
#include "numerics/simd.hpp"

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

// ---- AVX-512 kernels ---------------------------------------------------------------------------

#if ATTNSIM_X86_KERNELS
namespace {

// The range scaling of the non-.ftz variants multiplies in FP32 like the scalar model; under
// MXCSR.DAZ/FTZ (set by a -ffast-math library) both would flush, but the references are used
// then anyway, as in convert_array.
bool mxcsr_plain() { return (_mm_getcsr() & 0x8040u) == 0; }
bool use_avx512() { return active_isa() >= Isa::kAvx512 && mxcsr_plain(); }

inline __mmask16 tail_mask(std::size_t left) { return __mmask16((1u << left) - 1); }

// Ex2ApproxFtz::bits of 16 lanes.
ATTNSIM_TARGET_AVX512 inline __m512i ex2_ftz_vec(__m512i u, const std::uint32_t* pos,
                                                 const std::uint32_t* negt) {
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
  const __mmask16 live = __mmask16(~big);
  __m512i t = _mm512_mask_i32gather_epi32(zero, live & __mmask16(~neg), f, pos, 4);
  t = _mm512_mask_i32gather_epi32(t, live & neg, f, negt, 4);
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
                                              const std::uint32_t* t1) {
  if constexpr (kVariant == 0) {
    return ex2_ftz_vec(u, t0, t1);
  } else if constexpr (kVariant == 1) {
    // x < -126: r = ex2.ftz(x · 0.5), result r · r (ex2_approx_bits).
    const __m512 x = _mm512_castsi512_ps(u);
    const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_LT_OQ);
    const __m512 xs = _mm512_mask_mul_ps(x, low, x, _mm512_set1_ps(0.5f));
    const __m512 r = _mm512_castsi512_ps(ex2_ftz_vec(_mm512_castps_si512(xs), t0, t1));
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
                                       const std::uint32_t* t0, const std::uint32_t* t1) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_si512(out + i, mufu_vec<kVariant>(_mm512_loadu_si512(x + i), t0, t1));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_epi32(out + i, m,
                             mufu_vec<kVariant>(_mm512_maskz_loadu_epi32(m, x + i), t0, t1));
  }
}

}  // namespace
#endif  // ATTNSIM_X86_KERNELS

void ex2_approx_ftz_array(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
#if ATTNSIM_X86_KERNELS
  if (use_avx512()) return mufu_kernel<0>(x, n, out, ex2.table_data(false), ex2.table_data(true));
#endif
  ex2_approx_ftz_array_ref(x, n, out, ex2);
}
void ex2_approx_array(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2) {
#if ATTNSIM_X86_KERNELS
  if (use_avx512()) return mufu_kernel<1>(x, n, out, ex2.table_data(false), ex2.table_data(true));
#endif
  ex2_approx_array_ref(x, n, out, ex2);
}
void rcp_approx_ftz_array(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
#if ATTNSIM_X86_KERNELS
  if (use_avx512()) return mufu_kernel<2>(x, n, out, rcp.table_data(), nullptr);
#endif
  rcp_approx_ftz_array_ref(x, n, out, rcp);
}
void rcp_approx_array(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp) {
#if ATTNSIM_X86_KERNELS
  if (use_avx512()) return mufu_kernel<3>(x, n, out, rcp.table_data(), nullptr);
#endif
  rcp_approx_array_ref(x, n, out, rcp);
}

}  // namespace attnsim
