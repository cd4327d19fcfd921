// The P·V stage's CUDA-core product models on AArch64 Advanced SIMD (DotModel kFp32, kFp64;
// kExact takes the reference, as on AVX2): pv_ref's bits, 4 (FP32) or 2 (FP64) output channels
// per register, each lane one channel's own chain over the block's keys in natural order.
// pv_cuda_core.cpp's AVX2 kernel in NEON registers.
//
// V stays in its natural [key][channel] layout: key j's channels are one load, P[i][j] is
// broadcast. Register blocking: 4 query rows x 4 channel vectors (16 accumulators). The chains
// start from O (into C, FA2 gemm_rs) or from zero (a chunk), exactly as dot_values' C:
//  kFp32  acc = fl(acc + fl(p·v)) per key (vmulq_f32 then vaddq_f32, no FMA); an FP64 state's O
//         and P enter as FP32.
//  kFp64  acc = fl(acc + p·v); with an FP32 P the product is exact and one FMA (vfmaq_f64) gives
//         the reference's mul-then-add bits; an FP64 P (p=fp64) takes the multiply and the add.
// A chunk's dequantization by P's and V's per-block scales follows pv_ref operation by operation.
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
constexpr int kVecs = 4;  // channel vectors per register block

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

template <class T>
void pv_cuda_core(const PvStage& st, const PStage& pst, const PreparedInput& in,
                  const TileIndex& ti, const BlockView& b, TileState<T>& state,
                  TileBuffers<T>& buf) {
  const int dv = state.dv, bk = b.bk, n = b.cols, rows = b.rows;
  const DotModel::Kind kind = st.dot.kind;
  if (kind == DotModel::kExact) return pv_ref(st, pst, in, ti, b, state, buf);
  const bool chunked = st.acc == PvAccumulate::kChunk;
  const bool v_chunk_scale = in.v.scaled() && in.v.key_dependent_scale;
  const bool p_scaled = pst.scale != PScale::kNone;
  const bool p_fp64 = std::is_same_v<T, double> && pst.enc == Encoding::kFp64;
  const float* v = in.v.row(ti.skv, b.j0);
  const std::size_t rd = std::size_t(rows) * dv;
  // The chains' results as values of T, [rows][dv]: O itself (into C) or the chunk.
  T* res = chunked ? buf.chunk.data() : state.o.data();

  if (kind == DotModel::kFp32) {
    // P as the FP32 operand register holds it (an FP64 P rounded to FP32, as dot_values does).
    const float* p = buf.pf.data();
    if (p_fp64) {
      buf.tmp_p.resize(std::size_t(rows) * bk);
      for (std::size_t k = 0; k < buf.tmp_p.size(); ++k) buf.tmp_p[k] = float(buf.pc[k]);
      p = buf.tmp_p.data();
    }
    if constexpr (std::is_same_v<T, float>) {
      fp32_chains(p, bk, v, n, rows, dv, chunked ? nullptr : res, dv, res, dv);
    } else {
      // An FP64 state's O enters the FP32 chain rounded to FP32 (dot_values: float(c)).
      buf.tmp_f.resize(rd);
      if (!chunked)
        for (std::size_t k = 0; k < rd; ++k) buf.tmp_f[k] = float(res[k]);
      fp32_chains(p, bk, v, n, rows, dv, chunked ? nullptr : buf.tmp_f.data(), dv,
                  buf.tmp_f.data(), dv);
      for (std::size_t k = 0; k < rd; ++k) res[k] = T(buf.tmp_f[k]);
    }
  } else {
    // kFp64: FP64 copies of V's block (made once per kv_key, TileBuffers) and of P (FP32 values,
    // or the FP64 P of p=fp64).
    const std::uint64_t key = buf.kv_key;
    if (key == 0 || buf.v_wide_for != key) {
      buf.v_wide.resize(std::size_t(n) * dv);
      for (std::size_t k = 0; k < buf.v_wide.size(); ++k) buf.v_wide[k] = double(v[k]);
      buf.v_wide_for = key;
    }
    buf.tmp_pd.resize(std::size_t(rows) * bk);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < n; ++j) {
        const std::size_t ij = std::size_t(i) * bk + j;
        buf.tmp_pd[ij] = p_fp64 ? double(buf.pc[ij]) : double(buf.pf[ij]);
      }
    // An FP64 state's FP64 chain runs in place on O or the chunk; an FP32 one on an FP64 copy.
    double* out;
    const double* c0 = nullptr;
    if constexpr (std::is_same_v<T, double>) {
      if (!chunked) c0 = res;
      out = res;
    } else {
      buf.tmp_d.resize(rd);
      out = buf.tmp_d.data();
      if (!chunked) {
        for (std::size_t k = 0; k < rd; ++k) out[k] = double(res[k]);
        c0 = out;
      }
    }
    fp64_chains(!p_fp64, buf.tmp_pd.data(), bk, buf.v_wide.data(), n, rows, dv, c0, dv, out, dv);
    if constexpr (std::is_same_v<T, float>)
      for (std::size_t k = 0; k < rd; ++k) res[k] = T(out[k]);
  }
  if (!chunked || !(p_scaled || v_chunk_scale)) return;
  // The chunk's dequantization, as pv_ref (dequant_chunk).
  for (int i = 0; i < rows; ++i) {
    const float row_scale = p_scaled ? buf.p_scale[std::size_t(i)] : 1.0f;
    T* ch = buf.chunk.data() + std::size_t(i) * dv;
    for (int c = 0; c < dv; ++c) {
      ch[c] = dequant_chunk(ch[c], row_scale, p_scaled, v_chunk_scale, in, ti, b.j0, c);
    }
  }
}

template void pv_cuda_core<float>(const PvStage&, const PStage&, const PreparedInput&,
                                  const TileIndex&, const BlockView&, TileState<float>&,
                                  TileBuffers<float>&);
template void pv_cuda_core<double>(const PvStage&, const PStage&, const PreparedInput&,
                                   const TileIndex&, const BlockView&, TileState<double>&,
                                   TileBuffers<double>&);

}  // namespace attnsim

#endif  // ATTNSIM_NEON_KERNELS
