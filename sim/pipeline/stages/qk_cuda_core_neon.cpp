// The QKᵀ stage's CUDA-core product chains on AArch64 Advanced SIMD (the driver, qk_cuda_core.cpp,
// takes them through qk_chains; kExact's span tests are the plain loops): qk_ref's bits, 4 (FP32)
// or 2 (FP64) keys per register, each lane one output's own k-ordered chain:
// qk_cuda_core_x86.cpp's AVX2 chains in NEON registers.
//
// The reduction over head_dim is never split: lane j of an accumulator is key j's dot product,
// and its terms enter in k order as in numerics/dot.hpp dot_values. The K block is transposed by a
// plain loop once per block (the layout of qk_cuda_core.cpp, kept in TileBuffers::kt) so that a
// key vector is one load; Q values are broadcast. Register blocking: 4 query rows x 4 key vectors
// (16 accumulators of the 32 vector registers).
//  kFp32  acc = fl(acc + fl(q·k)), two roundings per term (vmulq_f32 then vaddq_f32, no FMA),
//         from +0.
//  kFp64  acc = fl(acc + q·k) with the product exact (24 + 24 bits fit in 53), so one FMA
//         (vfmaq_f64) per term gives the reference's mul-then-add bits.
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

constexpr int kRows = kCudaCoreRows;
constexpr int kVecs = kCudaCoreVecs;

// kt[k][j] = K[j][k] for the block's keys (row j at k0 + j·d), zero for j in [cols, ldk).
void transpose_keys(const float* k0, int d, int cols, float* kt, int ldk) {
  for (int k = 0; k < d; ++k)
    for (int j = 0; j < ldk; ++j)
      kt[std::size_t(k) * ldk + j] = j < cols ? k0[std::size_t(j) * d + k] : 0.0f;
}

// FP32 chains: acc[r][j] for R rows (q + r·d) and 4·C keys from kt; n valid keys stored.
template <int R, int C>
void fp32_tile(const float* q, int d, const float* kt, int ldk, float* acc, int lda, int n) {
  float32x4_t a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = vdupq_n_f32(0.0f);
  for (int k = 0; k < d; ++k) {
    float32x4_t b[C];
    for (int c = 0; c < C; ++c) b[c] = vld1q_f32(kt + std::size_t(k) * ldk + 4 * c);
    for (int r = 0; r < R; ++r) {
      const float32x4_t x = vdupq_n_f32(q[std::size_t(r) * d + k]);
      for (int c = 0; c < C; ++c) a[r][c] = vaddq_f32(a[r][c], vmulq_f32(x, b[c]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) neon::store_n(acc + std::size_t(r) * lda + 4 * c, a[r][c], n - 4 * c);
}

// FP64 chains (2 keys per register) on the FP64 copy of kt: one FMA per exact product.
template <int R, int C>
void fp64_tile(const float* q, int d, const double* kt, int ldk, double* acc, int lda, int n) {
  float64x2_t a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = vdupq_n_f64(0.0);
  for (int k = 0; k < d; ++k) {
    float64x2_t b[C];
    for (int c = 0; c < C; ++c) b[c] = vld1q_f64(kt + std::size_t(k) * ldk + 2 * c);
    for (int r = 0; r < R; ++r) {
      const float64x2_t x = vdupq_n_f64(double(q[std::size_t(r) * d + k]));
      for (int c = 0; c < C; ++c) a[r][c] = vfmaq_f64(a[r][c], x, b[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) neon::store_n(acc + std::size_t(r) * lda + 2 * c, a[r][c], n - 2 * c);
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

}  // namespace

// The neon set's chains (cuda_core_chains.hpp): kExact by the plain span loops.
const QkChains& qk_chains(CudaCoreKernels) {
  static const QkChains neon = [] {
    QkChains c;
    c.fp32_lanes = 4;
    c.fp64_lanes = 2;
    c.fp32 = kFp32Fns;
    c.fp64 = kFp64Fns;
    c.transpose = transpose_keys;
    c.key_spans = key_spans_plain;
    c.values_span = values_span_plain;
    c.round_exact = round_exact_sums_plain;
    return c;
  }();
  return neon;
}

}  // namespace attnsim

#endif  // ATTNSIM_NEON_KERNELS
