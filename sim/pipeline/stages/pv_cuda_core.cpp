// The P·V stage's CUDA-core product models (DotModel kFp32, kFp64, kExact): pv_ref's bits from
// the active set's chains (cuda_core_chains.hpp: AVX-512 and AVX2 in pv_cuda_core_x86.cpp, NEON in
// pv_cuda_core_neon.cpp), each lane one output channel's own chain over the block's keys in
// natural order.
//
// V stays in its natural [key][channel] layout: key j's channels are one load, P[i][j] is
// broadcast. The chains start from O (into C, FA2 gemm_rs) or from zero (a chunk), exactly as
// dot_values' C:
//  kFp32  acc = fl(acc + fl(p·v)) per key (no FMA); an FP64 state's O and P enter as FP32.
//  kFp64  acc = fl(acc + p·v); with an FP32 P the product is exact and one FMA gives the
//         reference's mul-then-add bits; an FP64 P (p=fp64) takes the multiply and the add.
//  kExact the FP64 sum where the exponent span proves it exact (cuda_core_span.hpp), rounded once
//         to FP32; the other outputs take the reference's dot_exact_f32.
// A chunk's dequantization by P's and V's per-block scales follows pv_ref operation by operation.
#include <algorithm>
#include <type_traits>

#include "numerics/exact_sum.hpp"
#include "sim/pipeline/stages/cuda_core_chains.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

void channel_spans_plain(const float* v, int n, int dv, cuda_core_span::Span* vs) {
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < dv; ++c) vs[c].add(v[std::size_t(j) * dv + c]);
}
cuda_core_span::Span f32_span_plain(const double* x, int n) {
  cuda_core_span::Span s;
  for (int j = 0; j < n; ++j) s.add(float(x[j]));
  return s;
}

#if !ATTNSIM_X86_KERNELS && !ATTNSIM_NEON_KERNELS
// No architecture's kernels: the dispatch table has no CUDA-core set, so this is never called.
const PvChains& pv_chains(CudaCoreKernels) {
  static const PvChains none;
  return none;
}
#endif

template <class T>
void pv_cuda_core(const PvStage& st, const PStage& pst, const PreparedInput& in,
                  const TileIndex& ti, const BlockView& b, TileState<T>& state,
                  TileBuffers<T>& buf) {
  const int dv = state.dv, bk = b.bk, n = b.cols, rows = b.rows;
  const DotModel::Kind kind = st.dot.kind;
  // AVX-512, else AVX2.
  const PvChains& ch = pv_chains(stage_kernels().cuda_core);
  if (kind == DotModel::kExact && !ch.channel_spans) return pv_ref(st, pst, in, ti, b, state, buf);
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
      ch.fp32(p, bk, v, n, rows, dv, chunked ? nullptr : res, dv, res, dv);
    } else {
      // An FP64 state's O enters the FP32 chain rounded to FP32 (dot_values: float(c)).
      buf.tmp_f.resize(rd);
      if (!chunked)
        for (std::size_t k = 0; k < rd; ++k) buf.tmp_f[k] = float(res[k]);
      ch.fp32(p, bk, v, n, rows, dv, chunked ? nullptr : buf.tmp_f.data(), dv, buf.tmp_f.data(),
              dv);
      for (std::size_t k = 0; k < rd; ++k) res[k] = T(buf.tmp_f[k]);
    }
  } else {
    // FP64 copies of V's block and of P (FP32 values, or the FP64 P of p=fp64).
    // V's FP64 copy, made once per kv_key (TileBuffers).
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
        if (kind == DotModel::kFp64) {
          buf.tmp_pd[ij] = p_fp64 ? double(buf.pc[ij]) : double(buf.pf[ij]);
        } else {
          buf.tmp_pd[ij] = p_fp64 ? double(float(buf.pc[ij])) : double(buf.pf[ij]);
        }
      }
    const bool exact_products = kind == DotModel::kExact || !p_fp64;
    // An FP64 state's FP64 chain runs in place on O or the chunk; otherwise on an FP64 copy.
    const bool in_place = std::is_same_v<T, double> && kind == DotModel::kFp64;
    double* out;
    const double* c0 = nullptr;
    if constexpr (std::is_same_v<T, double>) {
      if (!chunked) c0 = res;
      if (in_place) out = res;
    }
    if (!in_place) {
      buf.tmp_d.resize(rd);
      out = buf.tmp_d.data();
      if constexpr (std::is_same_v<T, float>) {
        if (!chunked) {
          for (std::size_t k = 0; k < rd; ++k) out[k] = double(res[k]);
          c0 = out;
        }
      }
    }
    ch.fp64(exact_products, buf.tmp_pd.data(), bk, buf.v_wide.data(), n, rows, dv, c0,
                dv, out, dv);
    if (kind == DotModel::kFp64) {
      if (!in_place)
        for (std::size_t k = 0; k < rd; ++k) res[k] = T(out[k]);
    } else {
      // kExact: round the proven-exact sums; the others through the reference's register.
      using cuda_core_span::Span;
      const int log2n = cuda_core_span::log2_terms(n);
      std::vector<Span>& vs = buf.v_spans;
      if (key == 0 || buf.v_spans_for != key) {
        vs.assign(std::size_t(dv), Span{});
        ch.channel_spans(v, n, dv, vs.data());
        buf.v_spans_for = key;
      }
      buf.tmp_f.resize(std::size_t(n));
      float* vc = buf.tmp_f.data();
      for (int i = 0; i < rows; ++i) {
        const double* pdi = buf.tmp_pd.data() + std::size_t(i) * bk;
        const Span ps = ch.f32_span(pdi, n);
        T* ri = res + std::size_t(i) * dv;
        const double* oi = out + std::size_t(i) * dv;
        for (int c = 0; c < dv; ++c) {
          Span cs;
          if (!chunked) cs.add(double(ri[c]));
          if (cuda_core_span::exact_in_fp64(ps, vs[std::size_t(c)], cs, log2n)) {
            ri[c] = T(float(oi[c] + 0.0));
            continue;
          }
          for (int j = 0; j < n; ++j) vc[j] = v[std::size_t(j) * dv + c];
          const double c_in = chunked ? 0.0 : double(ri[c]);
          ri[c] = p_fp64 ? T(dot_exact_f32(c_in, buf.pc.data() + std::size_t(i) * bk, vc, n))
                         : T(dot_exact_f32(c_in, buf.pf.data() + std::size_t(i) * bk, vc, n));
        }
      }
    }
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
