// Internal to numerics/model_math*.cpp: what the projection kernels of linear_f32 share, one file
// per architecture (model_math_x86.cpp: AVX-512, AVX2; model_math_neon.cpp: NEON), each compiled
// to nothing on the other architectures. The blocking and the stores are plain C++; only the
// micro-kernels (PanelFn) use an instruction set.
#pragma once

#include <cstddef>
#include <limits>

#include "numerics/model_math.hpp"

namespace attnsim::model_math_detail {

// The NEON kernel (model_math_neon.cpp, where ATTNSIM_NEON_KERNELS): false when the active set is
// not neon. The x86 ones are numerics/kernels_x86.hpp's.
bool linear_f32_neon(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                     std::size_t p0, std::size_t p1, float* y, std::size_t ldy);

// R rows × one panel: the 16 FP64 sums of each row into out[R][16], each lane one output's sum
// from +0 in k order.
using PanelFn = void (*)(const double* x, std::size_t ldx, const float* panel, std::size_t k,
                         double* out);

// Stores 16 FP64 sums (+ bias) of one row as FP32 (NaN canonical, as to_f32 in model_math.cpp),
// the first `lanes` of them.
inline void store_row(const double* acc, const float* bias, std::size_t lanes, float* y) {
  for (std::size_t i = 0; i < lanes; ++i) {
    double v = acc[i];
    if (bias != nullptr) v += static_cast<double>(bias[i]);
    y[i] = v != v ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v);
  }
}

// Rows in blocks of kRowBlock (their x stays in cache while every panel passes), each block in
// micro-tiles of R rows: `full` for R rows, tail(nr) for the last nr < R.
template <int R>
void linear_blocked(PanelFn full, PanelFn (*tail)(std::size_t), const double* x, std::size_t rows,
                    std::size_t ldx, const PackedLinear& w, std::size_t p0, std::size_t p1,
                    float* y, std::size_t ldy) {
  constexpr std::size_t P = kLinearPanel;
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

}  // namespace attnsim::model_math_detail
