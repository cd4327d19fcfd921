// The P·V stage's CUDA-core product chains on AVX-512 and AVX2 (the driver, pv_cuda_core.cpp,
// takes them through pv_chains): pv_ref's bits, 16 or 8 (FP32) and 8 or 4 (FP64) output channels
// per register, each lane one channel's own chain over the block's keys in natural order.
//
// V stays in its natural [key][channel] layout: key j's channels are one load, P[i][j] is
// broadcast. Register blocking: 4 query rows x 4 channel vectors (16 accumulators). The chains
// start from O (into C, FA2 gemm_rs) or from zero (a chunk), exactly as dot_values' C:
//  kFp32  acc = fl(acc + fl(p·v)) per key (no FMA); an FP64 state's O and P enter as FP32.
//  kFp64  acc = fl(acc + p·v); with an FP32 P the product is exact and one FMA gives the
//         reference's mul-then-add bits; an FP64 P (p=fp64) takes the multiply and the add.
//  kExact the FP64 sum where the exponent span proves it exact (cuda_core_span.hpp), rounded once
//         to FP32; the other outputs take the reference's dot_exact_f32.
// A chunk's dequantization by P's and V's per-block scales follows pv_ref operation by operation.
#include <algorithm>
#include <type_traits>

#include "sim/pipeline/stages/cuda_core_chains.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
// Last: the AVX-512 and AVX2 helpers.
#include "sim/pipeline/stages/avx512.hpp"
#include "sim/pipeline/stages/span_lanes.hpp"
#include "sim/pipeline/stages/avx2.hpp"
#include "sim/pipeline/stages/span_lanes_avx2.hpp"

namespace attnsim {

namespace {

constexpr int kRows = kCudaCoreRows;
constexpr int kVecs = kCudaCoreVecs;

// FP32 chains: out[r][c] = c0[r][c] (or +0) + Σ_j p[r][j]·v[j][c] for R rows, 16·C channels, n
// keys; nc valid channels from the block's first.
template <int R, int C>
ATTNSIM_AVX512 void fp32_tile(const float* p, int ldp, const float* v, int ldv, int n,
                              const float* c0, int ldc, float* out, int ldo, int nc) {
  __mmask16 m[C];
  for (int c = 0; c < C; ++c) m[c] = avx512::first16(nc - 16 * c);
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] = c0 ? _mm512_maskz_loadu_ps(m[c], c0 + std::size_t(r) * ldc + 16 * c)
                   : _mm512_setzero_ps();
  for (int j = 0; j < n; ++j) {
    __m512 b[C];
    for (int c = 0; c < C; ++c)
      b[c] = _mm512_maskz_loadu_ps(m[c], v + std::size_t(j) * ldv + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_add_ps(a[r][c], _mm512_mul_ps(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm512_mask_storeu_ps(out + std::size_t(r) * ldo + 16 * c, m[c], a[r][c]);
}

// FP64 chains (8 channels per register) on FP64 copies of P and V. kExactProducts: P's values are
// FP32 values, so p·v is exact and one FMA is the reference's multiply-then-add.
template <int R, int C, bool kExactProducts>
ATTNSIM_AVX512 void fp64_tile(const double* p, int ldp, const double* v, int ldv, int n,
                              const double* c0, int ldc, double* out, int ldo, int nc) {
  __mmask8 m[C];
  for (int c = 0; c < C; ++c) m[c] = avx512::first8(nc - 8 * c);
  __m512d a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] =
          c0 ? _mm512_maskz_loadu_pd(m[c], c0 + std::size_t(r) * ldc + 8 * c) : _mm512_setzero_pd();
  for (int j = 0; j < n; ++j) {
    __m512d b[C];
    for (int c = 0; c < C; ++c)
      b[c] = _mm512_maskz_loadu_pd(m[c], v + std::size_t(j) * ldv + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m512d x = _mm512_set1_pd(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c)
        a[r][c] = kExactProducts ? _mm512_fmadd_pd(x, b[c], a[r][c])
                                 : _mm512_add_pd(a[r][c], _mm512_mul_pd(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm512_mask_storeu_pd(out + std::size_t(r) * ldo + 8 * c, m[c], a[r][c]);
}

using Fp32Fn = void (*)(const float*, int, const float*, int, int, const float*, int, float*, int,
                        int);
using Fp64Fn = void (*)(const double*, int, const double*, int, int, const double*, int, double*,
                        int, int);
template <int R>
constexpr Fp32Fn fp32_fns[kVecs] = {fp32_tile<R, 1>, fp32_tile<R, 2>, fp32_tile<R, 3>,
                                    fp32_tile<R, 4>};
constexpr const Fp32Fn* kFp32Fns[kRows] = {fp32_fns<1>, fp32_fns<2>, fp32_fns<3>, fp32_fns<4>};
template <int R, bool E>
constexpr Fp64Fn fp64_fns[kVecs] = {fp64_tile<R, 1, E>, fp64_tile<R, 2, E>, fp64_tile<R, 3, E>,
                                    fp64_tile<R, 4, E>};
constexpr const Fp64Fn* kFp64Fns[2][kRows] = {
    {fp64_fns<1, false>, fp64_fns<2, false>, fp64_fns<3, false>, fp64_fns<4, false>},
    {fp64_fns<1, true>, fp64_fns<2, true>, fp64_fns<3, true>, fp64_fns<4, true>}};

// --- AVX2: the same chains, 8 (FP32) or 4 (FP64) channels per register ---------------------------

template <int R, int C>
ATTNSIM_AVX2 void fp32_tile_avx2(const float* p, int ldp, const float* v, int ldv, int n,
                                 const float* c0, int ldc, float* out, int ldo, int nc) {
  __m256 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] = c0 ? avx2::load_n(c0 + std::size_t(r) * ldc + 8 * c, nc - 8 * c)
                   : _mm256_setzero_ps();
  for (int j = 0; j < n; ++j) {
    __m256 b[C];
    for (int c = 0; c < C; ++c) b[c] = avx2::load_n(v + std::size_t(j) * ldv + 8 * c, nc - 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_set1_ps(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm256_add_ps(a[r][c], _mm256_mul_ps(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) avx2::store_n(out + std::size_t(r) * ldo + 8 * c, a[r][c], nc - 8 * c);
}

template <int R, int C, bool kExactProducts>
ATTNSIM_AVX2 void fp64_tile_avx2(const double* p, int ldp, const double* v, int ldv, int n,
                                 const double* c0, int ldc, double* out, int ldo, int nc) {
  __m256d a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] = c0 ? avx2::load_n(c0 + std::size_t(r) * ldc + 4 * c, nc - 4 * c)
                   : _mm256_setzero_pd();
  for (int j = 0; j < n; ++j) {
    __m256d b[C];
    for (int c = 0; c < C; ++c) b[c] = avx2::load_n(v + std::size_t(j) * ldv + 4 * c, nc - 4 * c);
    for (int r = 0; r < R; ++r) {
      const __m256d x = _mm256_set1_pd(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c)
        a[r][c] = kExactProducts ? _mm256_fmadd_pd(x, b[c], a[r][c])
                                 : _mm256_add_pd(a[r][c], _mm256_mul_pd(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) avx2::store_n(out + std::size_t(r) * ldo + 4 * c, a[r][c], nc - 4 * c);
}

template <int R>
constexpr Fp32Fn fp32_fns_avx2[kVecs] = {fp32_tile_avx2<R, 1>, fp32_tile_avx2<R, 2>,
                                         fp32_tile_avx2<R, 3>, fp32_tile_avx2<R, 4>};
constexpr const Fp32Fn* kFp32FnsAvx2[kRows] = {fp32_fns_avx2<1>, fp32_fns_avx2<2>,
                                               fp32_fns_avx2<3>, fp32_fns_avx2<4>};
template <int R, bool E>
constexpr Fp64Fn fp64_fns_avx2[kVecs] = {fp64_tile_avx2<R, 1, E>, fp64_tile_avx2<R, 2, E>,
                                         fp64_tile_avx2<R, 3, E>, fp64_tile_avx2<R, 4, E>};
constexpr const Fp64Fn* kFp64FnsAvx2[2][kRows] = {
    {fp64_fns_avx2<1, false>, fp64_fns_avx2<2, false>, fp64_fns_avx2<3, false>,
     fp64_fns_avx2<4, false>},
    {fp64_fns_avx2<1, true>, fp64_fns_avx2<2, true>, fp64_fns_avx2<3, true>,
     fp64_fns_avx2<4, true>}};

// Every row and channel of a [rows][dv] result: c0 rows at ldc (null: from zero). `wide`:
// AVX-512's tiles, else AVX2's.
void fp32_chains(bool wide, const float* p, int ldp, const float* v, int n, int rows, int dv,
                 const float* c0, int ldc, float* out, int ldo) {
  const int lanes = wide ? 16 : 8;
  const Fp32Fn* const* fns = wide ? kFp32Fns : kFp32FnsAvx2;
  for (int i0 = 0; i0 < rows; i0 += kRows) {
    const int r = std::min(kRows, rows - i0);
    for (int c = 0; c < dv; c += lanes * kVecs) {
      const int vecs = std::min(kVecs, (dv - c + lanes - 1) / lanes);
      fns[r - 1][vecs - 1](p + std::size_t(i0) * ldp, ldp, v + c, dv, n,
                           c0 ? c0 + std::size_t(i0) * ldc + c : nullptr, ldc,
                           out + std::size_t(i0) * ldo + c, ldo, dv - c);
    }
  }
}
void fp64_chains(bool wide, bool exact_products, const double* p, int ldp, const double* v, int n,
                 int rows, int dv, const double* c0, int ldc, double* out, int ldo) {
  const int lanes = wide ? 8 : 4;
  const Fp64Fn* const* fns = wide ? kFp64Fns[exact_products] : kFp64FnsAvx2[exact_products];
  for (int i0 = 0; i0 < rows; i0 += kRows) {
    const int r = std::min(kRows, rows - i0);
    for (int c = 0; c < dv; c += lanes * kVecs) {
      const int vecs = std::min(kVecs, (dv - c + lanes - 1) / lanes);
      fns[r - 1][vecs - 1](p + std::size_t(i0) * ldp, ldp, v + c, dv, n,
                                                c0 ? c0 + std::size_t(i0) * ldc + c : nullptr, ldc,
                                                out + std::size_t(i0) * ldo + c, ldo, dv - c);
    }
  }
}

// The spans (cuda_core_span::Span::add over the block's n keys) of V's dv channels, 16 channels
// per register, into vs[0, dv).
ATTNSIM_AVX512 void channel_spans(const float* v, int n, int dv, cuda_core_span::Span* vs) {
  for (int c = 0; c < dv; c += 16) {
    avx512::SpanLanes s = avx512::span_lanes_empty();
    const __mmask16 live = avx512::first16(dv - c);
    for (int j = 0; j < n; ++j)
      avx512::span_add(s, _mm512_maskz_loadu_ps(live, v + std::size_t(j) * dv + c), live);
    avx512::store_spans(s, dv - c, vs + c);
  }
}

// The span of n FP64 values each taken as an FP32 value (RNE, as float(x)).
ATTNSIM_AVX512 cuda_core_span::Span f32_span(const double* x, int n) {
  avx512::SpanLanes s = avx512::span_lanes_empty();
  for (int j = 0; j < n; j += 16) {
    const __m256 a = _mm512_cvtpd_ps(avx512::load_n(x + j, n - j));
    const __m256 b = _mm512_cvtpd_ps(avx512::load_n(x + j + 8, n - j - 8));
    const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
    avx512::span_add(s, v, avx512::first16(n - j));
  }
  return avx512::reduce_span(s);
}

// The same on AVX2, 8 channels or values per register.
ATTNSIM_AVX2 void channel_spans_avx2(const float* v, int n, int dv, cuda_core_span::Span* vs) {
  for (int c = 0; c < dv; c += 8) {
    avx2::SpanLanes s = avx2::span_lanes_empty();
    const __m256i live = avx2::first8(dv - c);
    for (int j = 0; j < n; ++j)
      avx2::span_add(s, avx2::load_n(v + std::size_t(j) * dv + c, dv - c), live);
    avx2::store_spans(s, dv - c, vs + c);
  }
}
ATTNSIM_AVX2 cuda_core_span::Span f32_span_avx2(const double* x, int n) {
  avx2::SpanLanes s = avx2::span_lanes_empty();
  for (int j = 0; j < n; j += 8) {
    const __m128 a = _mm256_cvtpd_ps(avx2::load_n(x + j, n - j));
    const __m128 b = _mm256_cvtpd_ps(avx2::load_n(x + j + 4, n - j - 4));
    avx2::span_add(s, _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1), avx2::first8(n - j));
  }
  return avx2::reduce_span(s);
}

// The chains of each set for the driver.
void fp32_chains_avx512(const float* p, int ldp, const float* v, int n, int rows, int dv,
                        const float* c0, int ldc, float* out, int ldo) {
  fp32_chains(true, p, ldp, v, n, rows, dv, c0, ldc, out, ldo);
}
void fp32_chains_avx2(const float* p, int ldp, const float* v, int n, int rows, int dv,
                      const float* c0, int ldc, float* out, int ldo) {
  fp32_chains(false, p, ldp, v, n, rows, dv, c0, ldc, out, ldo);
}
void fp64_chains_avx512(bool exact_products, const double* p, int ldp, const double* v, int n,
                        int rows, int dv, const double* c0, int ldc, double* out, int ldo) {
  fp64_chains(true, exact_products, p, ldp, v, n, rows, dv, c0, ldc, out, ldo);
}
void fp64_chains_avx2(bool exact_products, const double* p, int ldp, const double* v, int n,
                      int rows, int dv, const double* c0, int ldc, double* out, int ldo) {
  fp64_chains(false, exact_products, p, ldp, v, n, rows, dv, c0, ldc, out, ldo);
}

}  // namespace

// The sets' chains (cuda_core_chains.hpp).
const PvChains& pv_chains(CudaCoreKernels set) {
  static const PvChains avx512 = [] {
    PvChains c;
    c.fp32 = fp32_chains_avx512;
    c.fp64 = fp64_chains_avx512;
    c.channel_spans = channel_spans;
    c.f32_span = f32_span;
    return c;
  }();
  static const PvChains avx2 = [] {
    PvChains c;
    c.fp32 = fp32_chains_avx2;
    c.fp64 = fp64_chains_avx2;
    c.channel_spans = channel_spans_avx2;
    c.f32_span = f32_span_avx2;
    return c;
  }();
  return set == CudaCoreKernels::kAvx512 ? avx512 : avx2;
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
