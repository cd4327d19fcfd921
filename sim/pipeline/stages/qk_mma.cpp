// The QKᵀ stage under a tensor-core instruction model as one tile product (numerics/mma_tile.hpp:
// the block of queries × the block's keys × head_dim, vectorised across keys), the same bits as
// qk_ref's dot_mma per (query, key): qk_stage takes it when dot_mma_tile has a kernel for the
// model on this CPU.
#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

template <class T>
void qk_mma(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf) {
  const bool integer = dot_requirements(st.dot).integer_acc;
  // Q's rows of the tile and K's rows of the block, as prepare() padded them (dim_pad, zeros).
  MmaTile t;
  t.rows = b.rows;
  t.cols = b.cols;
  t.n = in.q.dim_pad;
  t.a = in.q.row_bits(ti.sq, ti.q_begin);
  t.lda = in.q.dim_pad;
  t.b = in.k.row_bits(ti.skv, b.j0);
  t.b_k = 1;
  t.b_n = in.k.dim_pad;
  buf.mma_d.resize(std::size_t(b.rows) * b.bk);
  t.d = buf.mma_d.data();
  t.ldd = b.bk;
  dot_mma_tile(st.dot, t);
  for (int i = 0; i < b.rows; ++i) {
    T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    const std::uint32_t* d = buf.mma_d.data() + std::size_t(i) * b.bk;
    // Keys past `visible` are masked: qk_ref leaves 0 there (the scores' step writes the mask).
    int visible = b.cols;
    if (in.causal) {
      const int last = ti.q_begin + i + ti.offset_kv - b.j0;  // the last key the row sees
      visible = last + 1 < visible ? (last + 1 > 0 ? last + 1 : 0) : visible;
    }
    if (integer) {
      for (int j = 0; j < visible; ++j)
        acc[j] = T(stage_util::int_to_f32(std::int32_t(d[j]), st.int_cvt));
    } else {
      for (int j = 0; j < visible; ++j) acc[j] = T(f32_from_bits(d[j]));
    }
    for (int j = visible; j < b.cols; ++j) acc[j] = T(0);
  }
}

template void qk_mma<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileBuffers<float>&);
template void qk_mma<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
