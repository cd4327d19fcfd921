// The P·V stage's CUDA-core product chains on AArch64 Advanced SIMD (the driver, pv_cuda_core.cpp,
// takes them through pv_chains; kExact's span tests are the plain loops): pv_ref's bits, 4 (FP32)
// or 2 (FP64) output channels per register, each lane one channel's own chain over the block's
// keys in natural order: pv_cuda_core_x86.cpp's AVX2 chains in NEON registers.
//
// V stays in its natural [key][channel] layout: key j's channels are one load, P[i][j] is
// broadcast. Register blocking: 4 query rows x 4 channel vectors (16 accumulators):
//  kFp32  acc = fl(acc + fl(p·v)) per key (vmulq_f32 then vaddq_f32, no FMA).
//  kFp64  acc = fl(acc + p·v); with an FP32 P the product is exact and one FMA (vfmaq_f64) gives
//         the reference's mul-then-add bits; an FP64 P (p=fp64) takes the multiply and the add.
#include <algorithm>
#include <type_traits>

#include "numerics/isa.hpp"
#include "sim/pipeline/stages/cuda_core_chains.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"
#if ATTNSIM_NEON_KERNELS  // AArch64 only: this file is empty on other architectures
#include "sim/pipeline/stages/neon.hpp"

namespace attnsim {

namespace {

constexpr int kRows = kCudaCoreRows;  // query rows per register block
constexpr int kVecs = kCudaCoreVecs;  // channel vectors per register block

// FP32 chains: out[r][c] = c0[r][c] (or +0) + Σ_j p[r][j]·v[j][c] for R rows, 4·C channels, n
// keys; nc valid channels from the block's first.
template <int R, int C>
void fp32_tile(const float* p, int ldp, const float* v, int ldv, int n, const float* c0, int ldc,
               float* out, int ldo, int nc) {
  float32x4_t a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] = c0 ? neon::load_n(c0 + std::size_t(r) * ldc + 4 * c, nc - 4 * c) : vdupq_n_f32(0.0f);
  for (int j = 0; j < n; ++j) {
    float32x4_t b[C];
    for (int c = 0; c < C; ++c) b[c] = neon::load_n(v + std::size_t(j) * ldv + 4 * c, nc - 4 * c);
    for (int r = 0; r < R; ++r) {
      const float32x4_t x = vdupq_n_f32(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c) a[r][c] = vaddq_f32(a[r][c], vmulq_f32(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) neon::store_n(out + std::size_t(r) * ldo + 4 * c, a[r][c], nc - 4 * c);
}

// FP64 chains (2 channels per register) on FP64 copies of P and V. kExactProducts: P's values are
// FP32 values, so p·v is exact and one FMA is the reference's multiply-then-add.
template <int R, int C, bool kExactProducts>
void fp64_tile(const double* p, int ldp, const double* v, int ldv, int n, const double* c0, int ldc,
               double* out, int ldo, int nc) {
  float64x2_t a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      a[r][c] = c0 ? neon::load_n(c0 + std::size_t(r) * ldc + 2 * c, nc - 2 * c) : vdupq_n_f64(0.0);
  for (int j = 0; j < n; ++j) {
    float64x2_t b[C];
    for (int c = 0; c < C; ++c) b[c] = neon::load_n(v + std::size_t(j) * ldv + 2 * c, nc - 2 * c);
    for (int r = 0; r < R; ++r) {
      const float64x2_t x = vdupq_n_f64(p[std::size_t(r) * ldp + j]);
      for (int c = 0; c < C; ++c)
        a[r][c] = kExactProducts ? vfmaq_f64(a[r][c], x, b[c])
                                 : vaddq_f64(a[r][c], vmulq_f64(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) neon::store_n(out + std::size_t(r) * ldo + 2 * c, a[r][c], nc - 2 * c);
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

// Every row and channel of a [rows][dv] result: c0 rows at ldc (null: from zero).
void fp32_chains(const float* p, int ldp, const float* v, int n, int rows, int dv, const float* c0,
                 int ldc, float* out, int ldo) {
  constexpr int lanes = 4;
  for (int i0 = 0; i0 < rows; i0 += kRows) {
    const int r = std::min(kRows, rows - i0);
    for (int c = 0; c < dv; c += lanes * kVecs) {
      const int vecs = std::min(kVecs, (dv - c + lanes - 1) / lanes);
      kFp32Fns[r - 1][vecs - 1](p + std::size_t(i0) * ldp, ldp, v + c, dv, n,
                                c0 ? c0 + std::size_t(i0) * ldc + c : nullptr, ldc,
                                out + std::size_t(i0) * ldo + c, ldo, dv - c);
    }
  }
}
void fp64_chains(bool exact_products, const double* p, int ldp, const double* v, int n, int rows,
                 int dv, const double* c0, int ldc, double* out, int ldo) {
  constexpr int lanes = 2;
  for (int i0 = 0; i0 < rows; i0 += kRows) {
    const int r = std::min(kRows, rows - i0);
    for (int c = 0; c < dv; c += lanes * kVecs) {
      const int vecs = std::min(kVecs, (dv - c + lanes - 1) / lanes);
      kFp64Fns[exact_products][r - 1][vecs - 1](p + std::size_t(i0) * ldp, ldp, v + c, dv, n,
                                                c0 ? c0 + std::size_t(i0) * ldc + c : nullptr, ldc,
                                                out + std::size_t(i0) * ldo + c, ldo, dv - c);
    }
  }
}

}  // namespace

// The neon set's chains (cuda_core_chains.hpp): kExact by the plain span loops.
const PvChains& pv_chains(CudaCoreKernels) {
  static const PvChains neon = [] {
    PvChains c;
    c.fp32 = fp32_chains;
    c.fp64 = fp64_chains;
    c.channel_spans = channel_spans_plain;
    c.f32_span = f32_span_plain;
    return c;
  }();
  return neon;
}

}  // namespace attnsim

#endif  // ATTNSIM_NEON_KERNELS
