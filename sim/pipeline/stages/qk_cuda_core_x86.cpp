// The QKᵀ stage's CUDA-core product chains on AVX-512 and AVX2 (the driver, qk_cuda_core.cpp,
// takes them through qk_chains): qk_ref's bits, 16 or 8 (FP32) and 8 or 4 (FP64) keys per
// register, each lane one output's own k-ordered chain.
//
// The reduction over head_dim is never split: lane j of an accumulator is key j's dot product,
// and its terms enter in k order as in numerics/dot.hpp dot_values. The K block is transposed in
// registers (16 x 16) once per tile and block so that a key vector is one load; Q values are
// broadcast. Register blocking: 4 query rows x 4 key vectors (16 accumulators).
//  kFp32  acc = fl(acc + fl(q·k)), two roundings per term (mul then add, no FMA), from +0.
//  kFp64  acc = fl(acc + q·k) with the product exact (24 + 24 bits fit in 53), so one FMA per
//         term gives the reference's mul-then-add bits.
//  kExact the FP64 sum is exact whenever the operands' exponent span allows it
//         (cuda_core_span.hpp), then rounded once to FP32; every other output takes the
//         reference's dot_exact_f32.
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

// kt[k][j] = K[j][k] for the block's keys (row j at k0 + j·d), zero for j in [cols, ldk).
ATTNSIM_AVX512 void transpose_keys(const float* k0, int d, int cols, float* kt, int ldk) {
  for (int jg = 0; jg < ldk; jg += 16) {
    for (int kg = 0; kg < d; kg += 16) {
      const int nk = std::min(16, d - kg);
      __m512 r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = jg + j < cols ? avx512::load_n(k0 + std::size_t(jg + j) * d + kg, nk)
                             : _mm512_setzero_ps();
      avx512::transpose16(r);
      for (int k = 0; k < nk; ++k) _mm512_storeu_ps(kt + std::size_t(kg + k) * ldk + jg, r[k]);
    }
  }
}

// FP32 chains: acc[r][j] for R rows (q + r·d) and 16·C keys from kt + 16c; n valid keys stored.
template <int R, int C>
ATTNSIM_AVX512 void fp32_tile(const float* q, int d, const float* kt, int ldk, float* acc, int lda,
                              int n) {
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_setzero_ps();
  for (int k = 0; k < d; ++k) {
    __m512 b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_ps(kt + std::size_t(k) * ldk + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(q[std::size_t(r) * d + k]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_add_ps(a[r][c], _mm512_mul_ps(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      avx512::store_n(acc + std::size_t(r) * lda + 16 * c, a[r][c], n - 16 * c);
}

// FP64 chains (8 keys per register) on the FP64 copy of kt: one FMA per exact product.
template <int R, int C>
ATTNSIM_AVX512 void fp64_tile(const float* q, int d, const double* kt, int ldk, double* acc,
                              int lda, int n) {
  __m512d a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_setzero_pd();
  for (int k = 0; k < d; ++k) {
    __m512d b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_pd(kt + std::size_t(k) * ldk + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m512d x = _mm512_set1_pd(double(q[std::size_t(r) * d + k]));
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_pd(x, b[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      avx512::store_n(acc + std::size_t(r) * lda + 8 * c, a[r][c], n - 8 * c);
}

// One register block of `rows` (<= kRows) rows and `vecs` (<= kVecs) key vectors.
template <class Acc, class Kt>
using TileFn = QkTileFn<Acc, Kt>;

template <int R>
constexpr TileFn<float, float> fp32_fns[kVecs] = {fp32_tile<R, 1>, fp32_tile<R, 2>, fp32_tile<R, 3>,
                                                  fp32_tile<R, 4>};
constexpr const TileFn<float, float>* kFp32Fns[kRows] = {fp32_fns<1>, fp32_fns<2>, fp32_fns<3>,
                                                         fp32_fns<4>};
template <int R>
constexpr TileFn<double, double> fp64_fns[kVecs] = {fp64_tile<R, 1>, fp64_tile<R, 2>,
                                                    fp64_tile<R, 3>, fp64_tile<R, 4>};
constexpr const TileFn<double, double>* kFp64Fns[kRows] = {fp64_fns<1>, fp64_fns<2>, fp64_fns<3>,
                                                           fp64_fns<4>};

// --- AVX2: the same chains, 8 (FP32) or 4 (FP64) keys per register -------------------------------

// transpose_keys on AVX2: 8 x 8 blocks transposed in registers (a decode tile, one query row,
// transposes as many elements as it multiplies).
ATTNSIM_AVX2 void transpose_keys_avx2(const float* k0, int d, int cols, float* kt, int ldk) {
  for (int jg = 0; jg < ldk; jg += 8) {
    for (int kg = 0; kg < d; kg += 8) {
      const int nk = std::min(8, d - kg);
      __m256 r[8];
      for (int j = 0; j < 8; ++j)
        r[j] = jg + j < cols ? avx2::load_n(k0 + std::size_t(jg + j) * d + kg, nk)
                             : _mm256_setzero_ps();
      __m256 t[8], u[8];
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
      }
      for (int k = 0; k < nk; ++k) _mm256_storeu_ps(kt + std::size_t(kg + k) * ldk + jg, r[k]);
    }
  }
}

template <int R, int C>
ATTNSIM_AVX2 void fp32_tile_avx2(const float* q, int d, const float* kt, int ldk, float* acc,
                                 int lda, int n) {
  __m256 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm256_setzero_ps();
  for (int k = 0; k < d; ++k) {
    __m256 b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm256_loadu_ps(kt + std::size_t(k) * ldk + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_set1_ps(q[std::size_t(r) * d + k]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm256_add_ps(a[r][c], _mm256_mul_ps(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) avx2::store_n(acc + std::size_t(r) * lda + 8 * c, a[r][c], n - 8 * c);
}

template <int R, int C>
ATTNSIM_AVX2 void fp64_tile_avx2(const float* q, int d, const double* kt, int ldk, double* acc,
                                 int lda, int n) {
  __m256d a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm256_setzero_pd();
  for (int k = 0; k < d; ++k) {
    __m256d b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm256_loadu_pd(kt + std::size_t(k) * ldk + 4 * c);
    for (int r = 0; r < R; ++r) {
      const __m256d x = _mm256_set1_pd(double(q[std::size_t(r) * d + k]));
      for (int c = 0; c < C; ++c) a[r][c] = _mm256_fmadd_pd(x, b[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) avx2::store_n(acc + std::size_t(r) * lda + 4 * c, a[r][c], n - 4 * c);
}

template <int R>
constexpr TileFn<float, float> fp32_fns_avx2[kVecs] = {fp32_tile_avx2<R, 1>, fp32_tile_avx2<R, 2>,
                                                       fp32_tile_avx2<R, 3>, fp32_tile_avx2<R, 4>};
constexpr const TileFn<float, float>* kFp32FnsAvx2[kRows] = {
    fp32_fns_avx2<1>, fp32_fns_avx2<2>, fp32_fns_avx2<3>, fp32_fns_avx2<4>};
template <int R>
constexpr TileFn<double, double> fp64_fns_avx2[kVecs] = {
    fp64_tile_avx2<R, 1>, fp64_tile_avx2<R, 2>, fp64_tile_avx2<R, 3>, fp64_tile_avx2<R, 4>};
constexpr const TileFn<double, double>* kFp64FnsAvx2[kRows] = {
    fp64_fns_avx2<1>, fp64_fns_avx2<2>, fp64_fns_avx2<3>, fp64_fns_avx2<4>};

// Rounds an exact FP64 sum to FP32 as ExactSum::round_f32 does (an exact zero is +0).
ATTNSIM_AVX512 void round_exact_sums(const double* s, float* out, int n) {
  for (int j = 0; j < n; j += 8) {
    const __m512d x = _mm512_add_pd(avx512::load_n(s + j, n - j), _mm512_setzero_pd());
    const __m256 f = _mm512_cvtpd_ps(x);
    _mm256_mask_storeu_ps(out + j, avx512::first8(n - j), f);
  }
}

// The spans (cuda_core_span::Span::add over head_dim) of the block's keys, 16 keys per register
// from the transposed block, into ks[0, cols).
ATTNSIM_AVX512 void key_spans(const float* kt, int d, int ldk, int cols, cuda_core_span::Span* ks) {
  for (int jg = 0; jg < cols; jg += 16) {
    avx512::SpanLanes s = avx512::span_lanes_empty();
    const __mmask16 live = avx512::first16(cols - jg);
    for (int k = 0; k < d; ++k)
      avx512::span_add(s, _mm512_loadu_ps(kt + std::size_t(k) * ldk + jg), live);
    avx512::store_spans(s, cols - jg, ks + jg);
  }
}

// The span of n values.
ATTNSIM_AVX512 cuda_core_span::Span values_span(const float* x, int n) {
  avx512::SpanLanes s = avx512::span_lanes_empty();
  for (int j = 0; j < n; j += 16)
    avx512::span_add(s, avx512::load_n(x + j, n - j), avx512::first16(n - j));
  return avx512::reduce_span(s);
}

// The same on AVX2, 8 keys (FP32) or 4 sums (FP64) per register.
ATTNSIM_AVX2 void round_exact_sums_avx2(const double* s, float* out, int n) {
  for (int j = 0; j < n; j += 4) {
    const __m128 f = _mm256_cvtpd_ps(_mm256_add_pd(avx2::load_n(s + j, n - j), _mm256_setzero_pd()));
    if (n - j >= 4) {
      _mm_storeu_ps(out + j, f);
    } else {
      alignas(16) float t[4];
      _mm_store_ps(t, f);
      for (int l = 0; l < n - j; ++l) out[j + l] = t[l];
    }
  }
}
ATTNSIM_AVX2 void key_spans_avx2(const float* kt, int d, int ldk, int cols,
                                 cuda_core_span::Span* ks) {
  for (int jg = 0; jg < cols; jg += 8) {
    avx2::SpanLanes s = avx2::span_lanes_empty();
    const __m256i live = avx2::first8(cols - jg);
    for (int k = 0; k < d; ++k)
      avx2::span_add(s, _mm256_loadu_ps(kt + std::size_t(k) * ldk + jg), live);
    avx2::store_spans(s, cols - jg, ks + jg);
  }
}
ATTNSIM_AVX2 cuda_core_span::Span values_span_avx2(const float* x, int n) {
  avx2::SpanLanes s = avx2::span_lanes_empty();
  for (int j = 0; j < n; j += 8) avx2::span_add(s, avx2::load_n(x + j, n - j), avx2::first8(n - j));
  return avx2::reduce_span(s);
}

}  // namespace

// The sets' chains (cuda_core_chains.hpp).
const QkChains& qk_chains(CudaCoreKernels set) {
  static const QkChains avx512 = [] {
    QkChains c;
    c.fp32_lanes = 16;
    c.fp64_lanes = 8;
    c.fp32 = kFp32Fns;
    c.fp64 = kFp64Fns;
    c.transpose = transpose_keys;
    c.key_spans = key_spans;
    c.values_span = values_span;
    c.round_exact = round_exact_sums;
    return c;
  }();
  static const QkChains avx2 = [] {
    QkChains c;
    c.fp32_lanes = 8;
    c.fp64_lanes = 4;
    c.fp32 = kFp32FnsAvx2;
    c.fp64 = kFp64FnsAvx2;
    c.transpose = transpose_keys_avx2;
    c.key_spans = key_spans_avx2;
    c.values_span = values_span_avx2;
    c.round_exact = round_exact_sums_avx2;
    return c;
  }();
  return set == CudaCoreKernels::kAvx512 ? avx512 : avx2;
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
