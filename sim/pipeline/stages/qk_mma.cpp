// The QKᵀ stage as one tile product (numerics/mma_tile.hpp: the block of queries × the block's
// keys × head_dim, vectorised across keys), the same bits as qk_ref per (query, key): under a
// tensor-core instruction model (qk_mma), and for integer operands under an exact product model
// (qk_int: TurboAttention's FlashQ INT8 QKᵀ in FP64, whose sums of integer products are the exact
// integer sum, as IMMA's is). qk_stage takes them when dot_mma_tile has a kernel on this CPU.
#include <cmath>

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
  t.a_key = buf.q_key;
  t.b_key = stage_util::block_key(buf.kv_key, 1);  // this K block
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

namespace {

// The largest magnitude of a signed integer encoding's values.
double int_max_abs(Encoding e) { return std::ldexp(1.0, encoding_traits(e).bits - 1); }

}  // namespace

bool integer_product_is_exact(DotModel::Kind kind, Encoding a, Encoding b, int n) {
  if (kind != DotModel::kFp32 && kind != DotModel::kFp64 && kind != DotModel::kExact) return false;
  for (Encoding e : {a, b}) {
    const EncodingTraits& t = encoding_traits(e);
    if (t.is_float || !t.is_signed || t.bits > 8) return false;
  }
  // Every partial sum of n products is an integer below this bound: exact in int32 (IMMA wraps
  // only beyond it) and, for the FP32 loop, in FP32 (2^24), so the sum is the exact one in any
  // order and each model's result is that integer as its type holds it.
  const double bound = int_max_abs(a) * int_max_abs(b) * n;
  return bound < (kind == DotModel::kFp32 ? 16777216.0 : 2147483648.0) &&
         dot_mma_tile_has_kernel(kIntegerExactModel);
}

template <class T>
void qk_int(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf) {
  const int d = in.shape.head_dim;
  const int n = stage_util::round_up(d, mma_info(kIntegerExactModel.instr).k);
  MmaTile t;
  t.rows = b.rows;
  t.cols = b.cols;
  t.n = n;
  t.a_values = in.q.row(ti.sq, ti.q_begin);
  t.lda = d;
  t.b_values = in.k.row(ti.skv, b.j0);
  t.b_k = 1;
  t.b_n = d;
  t.a_key = buf.q_key;
  t.b_key = stage_util::block_key(buf.kv_key, 2);  // this K block, as values
  if (n != d) {
    buf.mma_k.resize(std::size_t(n));
    for (int k = 0; k < n; ++k) buf.mma_k[std::size_t(k)] = k < d ? k : -1;
    t.k_index = buf.mma_k.data();
  }
  buf.mma_d.resize(std::size_t(b.rows) * b.bk);
  t.d = buf.mma_d.data();
  t.ldd = b.bk;
  dot_mma_tile(kIntegerExactModel, t);
  for (int i = 0; i < b.rows; ++i) {
    T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    const std::uint32_t* dd = buf.mma_d.data() + std::size_t(i) * b.bk;
    for (int j = 0; j < b.cols; ++j) acc[j] = exact_integer_as<T>(st.dot.kind, std::int32_t(dd[j]));
    // Masked keys: qk_ref leaves 0 there (the scores' step writes the mask value).
    if (in.causal) {
      const int last = ti.q_begin + i + ti.offset_kv - b.j0;
      for (int j = last + 1 > 0 ? last + 1 : 0; j < b.cols; ++j) acc[j] = T(0);
    }
  }
}

template void qk_mma<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileBuffers<float>&);
template void qk_mma<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileBuffers<double>&);
template void qk_int<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileBuffers<float>&);
template void qk_int<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
