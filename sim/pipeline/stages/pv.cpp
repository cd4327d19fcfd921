// The P·V stage of one tile and KV block: P as cast times V (natural [key][channel] layout), under
// the product model: into O as the C operand (FA2 gemm_rs), or a chunk from zero (two-level
// accumulation, integer P·V), dequantized by P's scale and V's per-block scale
// (TurboAttention `s_P̃ · s_V · Q(P̃)V`: fl(s_P · s_V), then one multiply).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "numerics/isa.hpp"
#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

namespace {

// PvStage::warps > 1 (cuDNN's decode kernel: each warp its own O over its span of the block's
// keys, C = that O): the product model over each warp's keys (an instruction's zero padding to
// the span) into warp w's accumulator (warp 0: the state's O; the others: state.warp_o).
template <class T>
void pv_warps_ref(const PvStage& st, const PStage& pst, const PreparedInput& in,
                  const TileIndex& ti, const BlockView& b, TileState<T>& state,
                  TileBuffers<T>& buf) {
  const int dv = state.dv, bk = b.bk, nw = st.warps, span = bk / nw;
  const bool mma = st.dot.kind == DotModel::kMma;
  if (state.warp_o.empty()) state.warp_o.assign(std::size_t(state.rows) * (nw - 1) * dv, T(0));
  const bool p_fp64 = std::is_same_v<T, double> && pst.enc == Encoding::kFp64;
  std::vector<std::uint32_t>& vb = buf.enc_b;
  std::vector<float> vt;
  for (int w = 0; w < nw; ++w) {
    const int k0 = w * span;                                    // the warp's first key
    const int n_real = std::max(0, std::min(span, b.cols - k0));  // its keys before len_kv
    const int n = mma ? span : n_real;
    if (mma) {
      vb.assign(std::size_t(dv) * n, 0u);
      for (int c = 0; c < dv; ++c)
        for (int k = 0; k < n_real; ++k)
          vb[std::size_t(c) * n + k] =
              in.v.bits[(std::size_t(ti.skv) * in.shape.len_kv + std::size_t(b.j0 + k0 + k)) * dv + c];
    } else {
      vt.assign(std::size_t(dv) * std::max(n, 1), 0.0f);
      for (int k = 0; k < n_real; ++k) {
        const float* vj = in.v.row(ti.skv, b.j0 + k0 + k);
        for (int c = 0; c < dv; ++c) vt[std::size_t(c) * n + k] = vj[c];
      }
    }
    for (int i = 0; i < b.rows; ++i) {
      T* oi = w == 0 ? state.o_row(i)
                     : state.warp_o.data() + (std::size_t(i) * (nw - 1) + std::size_t(w - 1)) * dv;
      const float* pfi = buf.pf.data() + std::size_t(i) * bk + k0;
      const T* pci = buf.pc.data() + std::size_t(i) * bk + k0;
      if (mma) {
        buf.enc_a.assign(std::size_t(n), 0u);
        for (int k = 0; k < n_real; ++k)
          buf.enc_a[std::size_t(k)] = stage_util::encoding_of(pst.enc, pfi[k]);
      }
      for (int c = 0; c < dv; ++c) {
        if (mma) {
          oi[c] = T(f32_from_bits(dot_mma(st.dot, buf.enc_a.data(), vb.data() + std::size_t(c) * n,
                                          n, f32_bits(float(oi[c])))));
        } else {
          const float* vc = vt.data() + std::size_t(c) * n;
          oi[c] = p_fp64 ? T(dot_values(st.dot.kind, double(oi[c]), pci, vc, n_real))
                         : T(dot_values(st.dot.kind, double(oi[c]), pfi, vc, n_real));
        }
      }
    }
  }
}

}  // namespace

template <class T>
void pv_ref(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf) {
  if (st.warps > 1) return pv_warps_ref(st, pst, in, ti, b, state, buf);
  const int dv = state.dv, bk = b.bk;
  const bool mma = st.dot.kind == DotModel::kMma;
  const bool integer = mma && dot_requirements(st.dot).integer_acc;
  const bool chunked = st.acc == PvAccumulate::kChunk;
  const bool v_chunk_scale = in.v.scaled() && in.v.key_dependent_scale;
  const bool p_scaled = pst.scale != PScale::kNone;
  // An FP64 state with an unrounded (fp64) P multiplies the P it kept in FP64.
  const bool p_fp64 = std::is_same_v<T, double> && pst.enc == Encoding::kFp64;
  // V's columns, transposed for the reference's per-output dot (values, or encodings with the
  // instruction's zero padding and SageAttention's in-16 key order).
  const int n = mma ? b.kv_pad : b.cols;
  std::vector<float> vt;
  std::vector<std::uint32_t>& vb = buf.enc_b;
  if (mma) {
    vb.assign(std::size_t(dv) * n, 0u);
    for (int c = 0; c < dv; ++c)
      for (int k = 0; k < n; ++k) {
        const int j = pv_key_index(st.perm16, st.kwidth4, k, n);
        if (j < b.cols)
          vb[std::size_t(c) * n + k] =
              in.v.bits[(std::size_t(ti.skv) * in.shape.len_kv + std::size_t(b.j0 + j)) * dv + c];
      }
  } else {
    vt.resize(std::size_t(dv) * n);
    for (int j = 0; j < b.cols; ++j) {
      const float* vj = in.v.row(ti.skv, b.j0 + j);
      for (int c = 0; c < dv; ++c) vt[std::size_t(c) * n + j] = vj[c];
    }
  }
  for (int i = 0; i < b.rows; ++i) {
    T* oi = state.o_row(i);
    T* ch = buf.chunk.data() + std::size_t(i) * dv;
    const float* pfi = buf.pf.data() + std::size_t(i) * bk;
    const T* pci = buf.pc.data() + std::size_t(i) * bk;
    if (mma) {
      buf.enc_a.assign(std::size_t(n), 0u);
      for (int k = 0; k < n; ++k) {
        const int j = pv_key_index(st.perm16, st.kwidth4, k, n);
        if (j < b.cols) buf.enc_a[std::size_t(k)] = stage_util::encoding_of(pst.enc, pfi[j]);
      }
    }
    const float row_scale = p_scaled ? buf.p_scale[std::size_t(i)] : 1.0f;
    for (int c = 0; c < dv; ++c) {
      const T c_in = chunked ? T(0) : oi[c];
      T r;
      if (!mma) {
        const float* vc = vt.data() + std::size_t(c) * n;
        r = p_fp64 ? T(dot_values(st.dot.kind, double(c_in), pci, vc, b.cols))
                   : T(dot_values(st.dot.kind, double(c_in), pfi, vc, b.cols));
      } else {
        // An FP64 state hands O to the instruction as its FP32 C (the accumulator's own rounding
        // is then the product stage's).
        const std::uint32_t d = dot_mma(st.dot, buf.enc_a.data(), vb.data() + std::size_t(c) * n, n,
                                        chunked ? 0u : f32_bits(float(c_in)));
        r = integer ? T(stage_util::int_to_f32(std::int32_t(d), st.int_cvt)) : T(f32_from_bits(d));
      }
      if (!chunked) {
        oi[c] = r;
        continue;
      }
      ch[c] = dequant_chunk(r, row_scale, p_scaled, v_chunk_scale, in, ti, b.j0, c);
    }
  }
}

template void pv_ref<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileState<float>&, TileBuffers<float>&);
template void pv_ref<double>(const PvStage&, const PStage&, const PreparedInput&,
                             const TileIndex&, const BlockView&, TileState<double>&,
                             TileBuffers<double>&);

// The dispatcher (stages.hpp): the instruction models' tile kernels where this CPU has one
// (numerics/mma_tile.hpp), integer P and V whose products are provably exact on the integer tile
// kernel, the AVX-512, AVX2 or NEON kernel of the CUDA-core models, else the reference.
template <class T>
void pv_stage(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf) {
  // Per-warp O accumulators (cuDNN decode): the reference only.
  if (st.warps > 1) return pv_ref(st, pst, in, ti, b, state, buf);
  if (st.dot.kind == DotModel::kMma && dot_mma_tile_has_kernel(st.dot))
    return pv_mma(st, pst, in, ti, b, state, buf);
  // Integer P and V into a chunk from zero (an FP64 state's unrounded P is not integer).
  if (st.acc == PvAccumulate::kChunk && pst.enc != Encoding::kFp64 &&
      integer_product_is_exact(st.dot.kind, pst.enc, in.v.enc, b.cols))
    return pv_int(st, pst, in, ti, b, state, buf);
  if (cuda_core_kernel_model(st.dot.kind) && stage_kernels().cuda_core != CudaCoreKernels::kNone)
    return pv_cuda_core(st, pst, in, ti, b, state, buf);  // AVX-512, or AVX2 for kFp32/kFp64
  pv_ref(st, pst, in, ti, b, state, buf);
}
template void pv_stage<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, TileState<float>&, TileBuffers<float>&);
template void pv_stage<double>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
