// The P·V stage and the tensor-core row sum under an instruction model as tile products
// (numerics/mma_tile.hpp, vectorised across V's channels, or across the tile's rows for the row
// sum), the same bits as pv_ref's and row_sum_ref's dot_mma per output: pv_stage and
// row_sum_stage take them when dot_mma_tile has a kernel for the model on this CPU. V is read in
// its natural [key][channel] layout.
#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

namespace {

// The key of instruction position k (SageAttention's in-16 order when permuted), as pv_ref and
// row_sum_ref read it.
inline int key_of(bool perm16, int k) { return perm16 ? (k & ~15) + kSagePerm16[k & 15] : k; }

// P's encodings [rows][n] in the instruction's key order, zero past the block's keys.
template <class T>
void p_encodings(Encoding p_enc, bool perm16, const BlockView& b, int n, TileBuffers<T>& buf) {
  buf.enc_a.assign(std::size_t(b.rows) * n, 0u);
  for (int i = 0; i < b.rows; ++i) {
    const float* pf = buf.pf.data() + std::size_t(i) * b.bk;
    std::uint32_t* e = buf.enc_a.data() + std::size_t(i) * n;
    for (int k = 0; k < n; ++k) {
      const int j = key_of(perm16, k);
      if (j < b.cols) e[k] = stage_util::encoding_of(p_enc, pf[j]);
    }
  }
}

}  // namespace

template <class T>
void pv_mma(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf) {
  const int dv = state.dv, n = b.kv_pad;
  const bool integer = dot_requirements(st.dot).integer_acc;
  const bool chunked = st.acc == PvAccumulate::kChunk;
  const bool v_chunk_scale = in.v.scaled() && in.v.key_dependent_scale;
  const bool p_scaled = pst.scale != PScale::kNone;
  p_encodings(pst.enc, st.perm16, b, n, buf);
  MmaTile t;
  t.rows = b.rows;
  t.cols = dv;
  t.n = n;
  t.a = buf.enc_a.data();
  t.lda = n;
  // V's rows j0 .. j0 + n as they are when the instruction reads them in key order with no
  // padding; else a copy in instruction order with zero rows past the block's keys.
  const std::uint32_t* v0 =
      in.v.bits.data() + (std::size_t(ti.skv) * in.shape.len_kv + std::size_t(b.j0)) * dv;
  if (!st.perm16 && n == b.cols) {
    t.b = v0;
  } else {
    buf.enc_b.assign(std::size_t(n) * dv, 0u);
    for (int k = 0; k < n; ++k) {
      const int j = key_of(st.perm16, k);
      if (j < b.cols)
        std::copy(v0 + std::size_t(j) * dv, v0 + std::size_t(j + 1) * dv,
                  buf.enc_b.begin() + std::ptrdiff_t(k) * dv);
    }
    t.b = buf.enc_b.data();
  }
  t.b_k = dv;
  t.b_n = 1;
  buf.mma_d.resize(std::size_t(b.rows) * dv);
  if (!chunked) {
    // O as the instruction's FP32 C (an FP64 state hands fl32(O), as pv_ref does).
    buf.mma_c.resize(std::size_t(b.rows) * dv);
    for (int i = 0; i < b.rows; ++i) {
      const T* oi = state.o_row(i);
      for (int c = 0; c < dv; ++c) buf.mma_c[std::size_t(i) * dv + c] = f32_bits(float(oi[c]));
    }
    t.c = buf.mma_c.data();
    t.ldc = dv;
  }
  t.d = buf.mma_d.data();
  t.ldd = dv;
  dot_mma_tile(st.dot, t);
  for (int i = 0; i < b.rows; ++i) {
    T* oi = state.o_row(i);
    T* ch = buf.chunk.data() + std::size_t(i) * dv;
    const std::uint32_t* d = buf.mma_d.data() + std::size_t(i) * dv;
    const float row_scale = p_scaled ? buf.p_scale[std::size_t(i)] : 1.0f;
    for (int c = 0; c < dv; ++c) {
      T r = integer ? T(stage_util::int_to_f32(std::int32_t(d[c]), st.int_cvt))
                    : T(f32_from_bits(d[c]));
      if (!chunked) {
        oi[c] = r;
        continue;
      }
      // pv_ref's dequantization of the chunk, in its order.
      float f = row_scale;
      if (v_chunk_scale) f = f * in.v.scale(ti.skv, b.j0, c);
      if (p_scaled || v_chunk_scale) r = r * T(f);
      ch[c] = r;
    }
  }
}

template <class T>
void row_sum_mma(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf) {
  // l = mma(P, ones, C = l·alpha) per row. The block FMA's products and exponents do not depend
  // on which operand is A (a·b = b·a exactly, ea + eb = eb + ea), so the tile is one row of
  // ones times Pᵀ: the tile's rows become its columns, vectorised.
  const int n = b.kv_pad;
  p_encodings(p_enc, perm16, b, n, buf);
  const DotRequirements r = dot_requirements(st.row_sum_dot);
  buf.ones.assign(std::size_t(n), encode_float_bits(r.b_enc, 1.0f, kCudaRn));
  buf.mma_c.resize(std::size_t(b.rows));
  buf.mma_d.resize(std::size_t(b.rows));
  for (int i = 0; i < b.rows; ++i) {
    T* l = state.lanes(i);
    l[0] = l[0] * buf.alpha[std::size_t(i)];
    buf.mma_c[std::size_t(i)] = f32_bits(float(l[0]));
  }
  MmaTile t;
  t.rows = 1;
  t.cols = b.rows;
  t.n = n;
  t.a = buf.ones.data();
  t.lda = 0;
  t.b = buf.enc_a.data();
  t.b_k = 1;
  t.b_n = n;
  t.c = buf.mma_c.data();
  t.ldc = 0;
  t.d = buf.mma_d.data();
  t.ldd = 0;
  dot_mma_tile(st.row_sum_dot, t);
  for (int i = 0; i < b.rows; ++i) state.lanes(i)[0] = T(f32_from_bits(buf.mma_d[std::size_t(i)]));
}

template void pv_mma<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileState<float>&, TileBuffers<float>&);
template void pv_mma<double>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileState<double>&, TileBuffers<double>&);
template void row_sum_mma<float>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                 TileState<float>&, TileBuffers<float>&);
template void row_sum_mma<double>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                  TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
