// The projection kernel of numerics/model_math.hpp on AArch64 Advanced SIMD (linear_f32 in
// model_math.cpp dispatches; AArch64 only: this file is empty on other architectures).
// Vectorized across the 16 outputs of a panel (eight 2-lane FP64 registers per row), never across
// k: each lane is one output's FP64 sum in k order, as linear_f32_ref adds it. A product of two
// FP32 values is exact in FP64, so one FMA (vfmaq_f64) per term equals the reference's
// multiply-then-add and the bits are the reference's.
#include <cstddef>

#include "numerics/isa.hpp"
#include "numerics/model_math.hpp"
#include "numerics/model_math_kernels.hpp"
#include "numerics/simd.hpp"

#if ATTNSIM_NEON_KERNELS
namespace attnsim::model_math_detail {

namespace {

constexpr std::size_t P = kLinearPanel;

// R rows × one panel: 8R accumulators of 2 lanes (R = 3: 24 of the 32 vector registers, the
// panel's 16 weights converted 4 at a time).
template <int R>
void panel_neon(const double* x, std::size_t ldx, const float* panel, std::size_t k,
                double* out /* [R][16] */) {
  float64x2_t acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 8; ++q) acc[r][q] = vdupq_n_f64(0.0);
  for (std::size_t j = 0; j < k; ++j) {
    float64x2_t xv[R];
    for (int r = 0; r < R; ++r) xv[r] = vdupq_n_f64(x[r * ldx + j]);
    for (int q = 0; q < 4; ++q) {
      const float32x4_t w4 = vld1q_f32(panel + j * P + 4 * q);
      const float64x2_t w_lo = vcvt_f64_f32(vget_low_f32(w4));  // outputs 4q, 4q+1 (exact)
      const float64x2_t w_hi = vcvt_high_f64_f32(w4);           // outputs 4q+2, 4q+3
      for (int r = 0; r < R; ++r) {
        acc[r][2 * q] = vfmaq_f64(acc[r][2 * q], xv[r], w_lo);
        acc[r][2 * q + 1] = vfmaq_f64(acc[r][2 * q + 1], xv[r], w_hi);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 8; ++q) vst1q_f64(out + r * P + 2 * q, acc[r][q]);
}

PanelFn neon_tail(std::size_t nr) { return nr == 1 ? panel_neon<1> : panel_neon<2>; }

}  // namespace

bool linear_f32_neon(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                     std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  if (active_isa() != Isa::kNeon) return false;
  linear_blocked<3>(panel_neon<3>, neon_tail, x, rows, ldx, w, p0, p1, y, ldy);
  return true;
}

}  // namespace attnsim::model_math_detail

#endif  // ATTNSIM_NEON_KERNELS
