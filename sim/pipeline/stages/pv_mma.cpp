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

// The key each instruction position reads (SageAttention's in-16 order when permuted, as pv_ref
// and row_sum_ref read it), −1 past the block's keys (the zero padding to the instruction's k);
// null when that is position k itself.
template <class T>
const int* key_index(bool perm16, bool kwidth4, const BlockView& b, int n, TileBuffers<T>& buf) {
  if (!perm16 && !kwidth4 && n == b.cols) return nullptr;
  buf.mma_k.resize(std::size_t(n));
  for (int k = 0; k < n; ++k) {
    const int j = pv_key_index(perm16, kwidth4, k, n);
    buf.mma_k[std::size_t(k)] = j < b.cols ? j : -1;
  }
  return buf.mma_k.data();
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
  // P as cast (values of its encoding) and V's rows from the block's first key, both read in the
  // instruction's key order.
  MmaTile t;
  t.rows = b.rows;
  t.cols = dv;
  t.n = n;
  t.a_values = buf.pf.data();
  t.lda = b.bk;
  t.b = in.v.bits.data() + (std::size_t(ti.skv) * in.shape.len_kv + std::size_t(b.j0)) * dv;
  t.b_k = dv;
  t.b_n = 1;
  t.k_index = key_index(st.perm16, st.kwidth4, b, n, buf);
  t.b_key = stage_util::block_key(buf.kv_key, 3);  // this V block (and its key order)
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
      ch[c] = dequant_chunk(r, row_scale, p_scaled, v_chunk_scale, in, ti, b.j0, c);
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
  const DotRequirements r = dot_requirements(st.row_sum_dot);
  buf.ones.assign(std::size_t(n), encode_float_bits(r.b_enc, 1.0f, kCudaRn));
  buf.mma_c.resize(std::size_t(b.rows));
  buf.mma_d.resize(std::size_t(b.rows));
  for (int i = 0; i < b.rows; ++i) {
    T* l = state.lanes(i);
    l[0] = l[0] * buf.alpha[std::size_t(i)];
    buf.mma_c[std::size_t(i)] = f32_bits(float(l[0]));
  }
  (void)p_enc;  // P's values are those of p_enc (the cast stage's)
  MmaTile t;
  t.rows = 1;
  t.cols = b.rows;
  t.n = n;
  t.a = buf.ones.data();
  t.lda = 0;
  t.b_values = buf.pf.data();
  t.b_k = 1;
  t.b_n = b.bk;
  t.k_index = key_index(perm16, false, b, n, buf);
  t.c = buf.mma_c.data();
  t.ldc = 0;
  t.d = buf.mma_d.data();
  t.ldd = 0;
  dot_mma_tile(st.row_sum_dot, t);
  for (int i = 0; i < b.rows; ++i) state.lanes(i)[0] = T(f32_from_bits(buf.mma_d[std::size_t(i)]));
}

template <class T>
void pv_int(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf) {
  // A chunk from zero (pv_stage checks): the exact integer sum of the block's keys, then pv_ref's
  // dequantization. The instruction's k pads the keys with zeros.
  const int dv = state.dv;
  const int n = stage_util::round_up(b.cols, mma_info(kIntegerExactModel.instr).k);
  const bool v_chunk_scale = in.v.scaled() && in.v.key_dependent_scale;
  const bool p_scaled = pst.scale != PScale::kNone;
  MmaTile t;
  t.rows = b.rows;
  t.cols = dv;
  t.n = n;
  t.a_values = buf.pf.data();
  t.lda = b.bk;
  t.b_values = in.v.row(ti.skv, b.j0);
  t.b_k = dv;
  t.b_n = 1;
  t.k_index = key_index(false, false, b, n, buf);
  t.b_key = stage_util::block_key(buf.kv_key, 4);  // this V block, as values
  buf.mma_d.resize(std::size_t(b.rows) * dv);
  t.d = buf.mma_d.data();
  t.ldd = dv;
  dot_mma_tile(kIntegerExactModel, t);
  for (int i = 0; i < b.rows; ++i) {
    T* ch = buf.chunk.data() + std::size_t(i) * dv;
    const std::uint32_t* d = buf.mma_d.data() + std::size_t(i) * dv;
    const float row_scale = p_scaled ? buf.p_scale[std::size_t(i)] : 1.0f;
    for (int c = 0; c < dv; ++c) {
      T r = exact_integer_as<T>(st.dot.kind, std::int32_t(d[c]));
      ch[c] = dequant_chunk(r, row_scale, p_scaled, v_chunk_scale, in, ti, b.j0, c);
    }
  }
}

template void pv_mma<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileState<float>&, TileBuffers<float>&);
template void pv_mma<double>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileState<double>&, TileBuffers<double>&);
template void pv_int<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileState<float>&, TileBuffers<float>&);
template void pv_int<double>(const PvStage&, const PStage&, const PreparedInput&,
                             const TileIndex&, const BlockView&, TileState<double>&,
                             TileBuffers<double>&);
template void row_sum_mma<float>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                 TileState<float>&, TileBuffers<float>&);
template void row_sum_mma<double>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                  TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
