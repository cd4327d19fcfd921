// The QKᵀ stage: S's accumulators of one tile and KV block under the product model
// (numerics/dot.hpp: the FP32 CUDA-core loop, FP64, exact, or a tensor-core instruction chain on
// the operands' encodings), an int32 accumulator converted to FP32 by int_cvt.
#include "numerics/isa.hpp"
#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

template <class T>
void qk_ref(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf) {
  const int d = in.shape.head_dim;
  const bool mma = st.dot.kind == DotModel::kMma;
  const bool integer = mma && dot_requirements(st.dot).integer_acc;
  for (int i = 0; i < b.rows; ++i) {
    T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    const int qt = ti.q_begin + i;
    for (int j = 0; j < b.cols; ++j) {
      const int kt = b.j0 + j;
      // A masked key's product is never read (the scores' step writes the mask value).
      if (in.causal && kt > qt + ti.offset_kv) {
        acc[j] = T(0);
        continue;
      }
      if (!mma) {
        acc[j] = T(dot_values(st.dot.kind, 0.0, in.q.row(ti.sq, qt), in.k.row(ti.skv, kt), d));
        continue;
      }
      const std::uint32_t r =
          dot_mma(st.dot, in.q.row_bits(ti.sq, qt), in.k.row_bits(ti.skv, kt), in.q.dim_pad, 0u);
      acc[j] = integer ? T(stage_util::int_to_f32(std::int32_t(r), st.int_cvt)) : T(f32_from_bits(r));
    }
  }
}

template void qk_ref<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                            const BlockView&, TileBuffers<float>&);
template void qk_ref<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                             const BlockView&, TileBuffers<double>&);

// The dispatcher (stages.hpp): the instruction models' tile kernels where this CPU has one
// (numerics/mma_tile.hpp), integer operands whose products are provably exact on the integer tile
// kernel, the AVX-512, AVX2 or NEON kernel of the CUDA-core models, else the reference.
template <class T>
void qk_stage(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf) {
  if (st.dot.kind == DotModel::kMma && dot_mma_tile_has_kernel(st.dot))
    return qk_mma(st, in, ti, b, buf);
  if (integer_product_is_exact(st.dot.kind, in.q.enc, in.k.enc, in.shape.head_dim))
    return qk_int(st, in, ti, b, buf);
  if (cuda_core_kernel_model(st.dot.kind) && stage_kernels().cuda_core != CudaCoreKernels::kNone)
    return qk_cuda_core(st, in, ti, b, buf);  // AVX-512, or AVX2 for kFp32/kFp64
  qk_ref(st, in, ti, b, buf);
}
template void qk_stage<float>(const QkStage&, const PreparedInput&, const TileIndex&, const BlockView&, TileBuffers<float>&);
template void qk_stage<double>(const QkStage&, const PreparedInput&, const TileIndex&, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
