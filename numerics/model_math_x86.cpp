// The projection kernel of numerics/model_math.hpp on AVX-512 and AVX2, and its dispatcher.
// Vectorized across the 16 outputs of a panel (two 8-lane or four 4-lane FP64 registers per row),
// never across k: each lane is one output's FP64 sum in k order, as linear_f32_ref adds it. An FMA
// of an exact product equals the reference's multiply-then-add, so the bits are the reference's.
#include <cmath>
#include <cstdint>
#include <limits>

#include "numerics/dispatch.hpp"
#include "numerics/kernels_x86.hpp"
#include "numerics/model_math.hpp"
#include "numerics/simd.hpp"

namespace attnsim {

#if ATTNSIM_X86_KERNELS
namespace {

constexpr std::size_t P = kLinearPanel;

// Stores 16 FP64 sums (+ bias) of one row as FP32 (NaN canonical, as to_f32 in model_math.cpp),
// the first `lanes` of them.
inline void store_row(const double* acc, const float* bias, std::size_t lanes, float* y) {
  for (std::size_t i = 0; i < lanes; ++i) {
    double v = acc[i];
    if (bias != nullptr) v += static_cast<double>(bias[i]);
    y[i] = v != v ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v);
  }
}

// R rows × one panel: 2R accumulators of 8 lanes.
template <int R>
ATTNSIM_TARGET_AVX512 void panel_avx512(const double* x, std::size_t ldx, const float* panel,
                                        std::size_t k, double* out /* [R][16] */) {
  __m512d acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_pd();
  for (std::size_t j = 0; j < k; ++j) {
    const __m512d w0 = _mm512_cvtps_pd(_mm256_loadu_ps(panel + j * P));
    const __m512d w1 = _mm512_cvtps_pd(_mm256_loadu_ps(panel + j * P + 8));
    for (int r = 0; r < R; ++r) {
      const __m512d xv = _mm512_set1_pd(x[r * ldx + j]);
      acc[r][0] = _mm512_fmadd_pd(xv, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_pd(xv, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_pd(out + r * P, acc[r][0]);
    _mm512_storeu_pd(out + r * P + 8, acc[r][1]);
  }
}

// R rows × one panel: 4R accumulators of 4 lanes.
template <int R>
ATTNSIM_TARGET_AVX2 void panel_avx2(const double* x, std::size_t ldx, const float* panel,
                                    std::size_t k, double* out) {
  __m256d acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_pd();
  }
  for (std::size_t j = 0; j < k; ++j) {
    __m256d w[4];
    for (int q = 0; q < 4; ++q) w[q] = _mm256_cvtps_pd(_mm_loadu_ps(panel + j * P + 4 * q));
    for (int r = 0; r < R; ++r) {
      const __m256d xv = _mm256_broadcast_sd(x + r * ldx + j);
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_fmadd_pd(xv, w[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) _mm256_storeu_pd(out + r * P + 4 * q, acc[r][q]);
  }
}

using PanelFn = void (*)(const double*, std::size_t, const float*, std::size_t, double*);

// Rows in blocks of kRowBlock (their x stays in cache while every panel passes), each block in
// micro-tiles of R rows.
template <int R>
void linear_blocked(PanelFn full, PanelFn (*tail)(std::size_t), const double* x, std::size_t rows,
                    std::size_t ldx, const PackedLinear& w, std::size_t p0, std::size_t p1,
                    float* y, std::size_t ldy) {
  constexpr std::size_t kRowBlock = 48;
  double out[R * P];
  const float* bias = w.bias.empty() ? nullptr : w.bias.data();
  for (std::size_t t0 = 0; t0 < rows; t0 += kRowBlock) {
    const std::size_t t1 = t0 + kRowBlock < rows ? t0 + kRowBlock : rows;
    for (std::size_t p = p0; p < p1; ++p) {
      const float* panel = w.packed.data() + p * w.k * P;
      const std::size_t o0 = p * P;
      const std::size_t lanes = w.n - o0 < P ? w.n - o0 : P;
      for (std::size_t t = t0; t < t1; t += R) {
        const std::size_t nr = t1 - t < std::size_t(R) ? t1 - t : std::size_t(R);
        (nr == std::size_t(R) ? full : tail(nr))(x + t * ldx, ldx, panel, w.k, out);
        for (std::size_t r = 0; r < nr; ++r) {
          store_row(out + r * P, bias ? bias + o0 : nullptr, lanes, y + (t + r) * ldy + o0);
        }
      }
    }
  }
}

PanelFn avx512_tail(std::size_t nr) {
  switch (nr) {
    case 1: return panel_avx512<1>;
    case 2: return panel_avx512<2>;
    case 3: return panel_avx512<3>;
    case 4: return panel_avx512<4>;
    default: return panel_avx512<5>;
  }
}
PanelFn avx2_tail(std::size_t nr) {
  return nr == 1 ? panel_avx2<1> : panel_avx2<2>;
}

}  // namespace

void kernels_x86::linear_f32_avx512(const double* x, std::size_t rows, std::size_t ldx,
                                    const PackedLinear& w, std::size_t p0, std::size_t p1, float* y,
                                    std::size_t ldy) {
  linear_blocked<6>(panel_avx512<6>, avx512_tail, x, rows, ldx, w, p0, p1, y, ldy);
}
void kernels_x86::linear_f32_avx2(const double* x, std::size_t rows, std::size_t ldx,
                                  const PackedLinear& w, std::size_t p0, std::size_t p1, float* y,
                                  std::size_t ldy) {
  linear_blocked<3>(panel_avx2<3>, avx2_tail, x, rows, ldx, w, p0, p1, y, ldy);
}
#endif

void linear_f32(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  array_kernels().linear_f32(x, rows, ldx, w, p0, p1, y, ldy);
}

}  // namespace attnsim
