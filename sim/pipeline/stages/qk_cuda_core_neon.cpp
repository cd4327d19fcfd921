// The QKᵀ stage's CUDA-core product models on AArch64 Advanced SIMD (DotModel kFp32, kFp64;
// kExact takes the reference, as on AVX2): qk_ref's bits, 4 (FP32) or 2 (FP64) keys per register,
// each lane one output's own k-ordered chain. qk_cuda_core.cpp's AVX2 kernel in NEON registers.
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
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"
#if ATTNSIM_NEON_KERNELS  // AArch64 only: this file is empty on other architectures
#include "sim/pipeline/stages/neon.hpp"

namespace attnsim {

namespace {

constexpr int kRows = 4;  // query rows per register block
constexpr int kVecs = 4;  // key vectors per register block

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
using TileFn = void (*)(const float*, int, const Kt*, int, Acc*, int, int);

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

template <class T>
void qk_cuda_core(const QkStage& st, const PreparedInput& in, const TileIndex& ti,
                  const BlockView& b, TileBuffers<T>& buf) {
  const int d = in.shape.head_dim;
  const DotModel::Kind kind = st.dot.kind;
  if (kind == DotModel::kExact) return qk_ref(st, in, ti, b, buf);
  const bool fp32 = kind == DotModel::kFp32;
  const int ldk = stage_util::round_up(std::max(b.cols, 1), 16);
  // The block's transposed copy (and its FP64 copy), made once per kv_key (TileBuffers).
  const std::uint64_t key = buf.kv_key;
  if (key == 0 || buf.kt_for != key) {
    buf.kt.resize(std::size_t(d) * ldk);
    transpose_keys(in.k.row(ti.skv, b.j0), d, b.cols, buf.kt.data(), ldk);
    buf.kt_for = key;
  }
  if (!fp32 && (key == 0 || buf.kt_wide_for != key)) {
    buf.kt_wide.resize(std::size_t(d) * ldk);
    for (std::size_t i = 0; i < buf.kt_wide.size(); ++i) buf.kt_wide[i] = double(buf.kt[i]);
    buf.kt_wide_for = key;
  }
  // The chains' results: FP32 (kFp32) or FP64 (kFp64) per [rows][ldk].
  const bool direct = fp32 && std::is_same_v<T, float>;
  float* res_f = nullptr;
  double* res_d = nullptr;
  if (fp32) {
    if constexpr (std::is_same_v<T, float>) {
      res_f = buf.acc.data();
    } else {
      buf.tmp_f.resize(std::size_t(b.rows) * ldk);
      res_f = buf.tmp_f.data();
    }
  } else {
    buf.tmp_d.resize(std::size_t(b.rows) * ldk);
    res_d = buf.tmp_d.data();
  }
  const int lda = direct ? b.bk : ldk;
  const int lanes = fp32 ? 4 : 2;
  // Keys [0, visible(i)) of row i are unmasked (the reference writes 0 for the others).
  auto visible = [&](int i) {
    if (!in.causal) return b.cols;
    return std::clamp(ti.q_begin + i + ti.offset_kv - b.j0 + 1, 0, b.cols);
  };
  for (int i0 = 0; i0 < b.rows; i0 += kRows) {
    const int rows = std::min(kRows, b.rows - i0);
    const int n = visible(i0 + rows - 1);  // the group's last row sees the most keys
    const float* q = in.q.row(ti.sq, ti.q_begin + i0);
    // Full vectors only: kt's rows are ldk (a multiple of 16) long, zero past the block's keys.
    for (int j = 0; j < n; j += lanes * kVecs) {
      const int vecs = std::min(kVecs, (n - j + lanes - 1) / lanes);
      if (fp32) {
        kFp32Fns[rows - 1][vecs - 1](q, d, buf.kt.data() + j, ldk,
                                     res_f + std::size_t(i0) * lda + j, lda, n - j);
      } else {
        kFp64Fns[rows - 1][vecs - 1](q, d, buf.kt_wide.data() + j, ldk,
                                     res_d + std::size_t(i0) * lda + j, lda, n - j);
      }
    }
  }
  // Into acc as T: the chains' values, 0 for masked keys.
  for (int i = 0; i < b.rows; ++i) {
    T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    const int n = visible(i);
    if (!direct) {
      if (fp32) {
        const float* f = res_f + std::size_t(i) * lda;
        for (int j = 0; j < n; ++j) acc[j] = T(f[j]);
      } else {
        const double* x = res_d + std::size_t(i) * lda;
        for (int j = 0; j < n; ++j) acc[j] = T(x[j]);
      }
    }
    for (int j = n; j < b.cols; ++j) acc[j] = T(0);
  }
}

template void qk_cuda_core<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                                  const BlockView&, TileBuffers<float>&);
template void qk_cuda_core<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                                   const BlockView&, TileBuffers<double>&);

}  // namespace attnsim

#endif  // ATTNSIM_NEON_KERNELS
