// The exp stage of one tile and KV block: p = exp(x) for every key of the block (0 past them: the
// kernel's full tile sees P = 0 there) and the rescale factor alpha = exp(alpha's argument), under
// the exp model (libm, FP64-exact, the H100's ex2.approx{.ftz}, or a technique's hook).
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim {

template <class T>
void exp_ref(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf) {
  const ExpModel<T> e = exp_model<T>(st, base, T(1));
  for (int i = 0; i < b.rows; ++i) {
    const T* xi = buf.x.data() + std::size_t(i) * b.bk;
    T* pi = buf.p.data() + std::size_t(i) * b.bk;
    for (int j = 0; j < b.cols; ++j) pi[j] = e.eval(xi[j]);
    for (int j = b.cols; j < b.bk; ++j) pi[j] = T(0);
    buf.alpha[std::size_t(i)] = e.eval(buf.alpha_arg[std::size_t(i)]);
  }
}

template void exp_ref<float>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<float>&);
template void exp_ref<double>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<double>&);

// The dispatcher (stages.hpp): the reference until a fast kernel of this stage exists.
template <class T>
void exp_stage(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf) {
  exp_ref(st, base, b, buf);
}
template void exp_stage<float>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<float>&);
template void exp_stage<double>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
