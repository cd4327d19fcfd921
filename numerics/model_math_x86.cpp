// The projection kernel of numerics/model_math.hpp on AVX-512 and AVX2 (linear_f32 in
// model_math.cpp dispatches; x86-64 only: this file is empty on other architectures).
// Vectorized across the 16 outputs of a panel (two 8-lane or four 4-lane FP64 registers per row),
// never across k: each lane is one output's FP64 sum in k order, as linear_f32_ref adds it. An FMA
// of an exact product equals the reference's multiply-then-add, so the bits are the reference's.
#include <cmath>
#include <cstdint>
#include <limits>

#include "numerics/kernels_x86.hpp"
#include "numerics/model_math.hpp"
#include "numerics/model_math_kernels.hpp"
#include "numerics/simd.hpp"

#if ATTNSIM_X86_KERNELS
namespace attnsim::model_math_detail {

namespace {

constexpr std::size_t P = kLinearPanel;

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

}  // namespace attnsim::model_math_detail

namespace attnsim::kernels_x86 {

void linear_f32_avx512(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                       std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  using namespace model_math_detail;
  linear_blocked<6>(panel_avx512<6>, avx512_tail, x, rows, ldx, w, p0, p1, y, ldy);
}
void linear_f32_avx2(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                     std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  using namespace model_math_detail;
  linear_blocked<3>(panel_avx2<3>, avx2_tail, x, rows, ldx, w, p0, p1, y, ldy);
}

}  // namespace attnsim::kernels_x86

#endif  // ATTNSIM_X86_KERNELS
