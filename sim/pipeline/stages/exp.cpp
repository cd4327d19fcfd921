// The exp stage of one tile and KV block: p = exp(x) for every key of the block (0 past them: the
// kernel's full tile sees P = 0 there) and the rescale factor alpha = exp(alpha's argument), under
// the exp model (libm, FP64-exact, the H100's ex2.approx{.ftz}, or a technique's hook).
#include <type_traits>
#include <vector>

#include "numerics/isa.hpp"
#include "numerics/special_array.hpp"
#include "sim/pipeline/stages/kernels.hpp"
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

namespace {

// An FP32 state's p row by row through an array form of its exp model, bit-identical to
// ExpModel::eval element by element (the exp_ref loop); alpha by eval; 0 past the block's keys.
template <class RowFn>
void exp_rows(const ExpModel<float>& e, const BlockView& b, TileBuffers<float>& buf, RowFn&& row) {
  for (int i = 0; i < b.rows; ++i) {
    const float* xi = buf.x.data() + std::size_t(i) * b.bk;
    float* pi = buf.p.data() + std::size_t(i) * b.bk;
    row(xi, std::size_t(b.cols), pi);
    for (int j = b.cols; j < b.bk; ++j) pi[j] = 0.0f;
    buf.alpha[std::size_t(i)] = e.eval(buf.alpha_arg[std::size_t(i)]);
  }
}

}  // namespace

// The dispatcher (stages.hpp): an FP32 state's p by array kernels when the instruction set allows
// (numerics/special_array: the H100's ex2.approx{.ftz} models, Triton's tl.exp as that of
// fl(x · log2 e), exp.exact's float(exp(double));
// a hook's ExpHook::eval_array, e.g. SAS), else the reference.
template <class T>
void exp_stage(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    if (stage_kernels().array_rows) {
      const ExpModel<float> e = exp_model<float>(st, base, 1.0f);
      switch (st.fn) {
        case ExpFn::kEx2ApproxFtz:
          return exp_rows(e, b, buf, [&](const float* x, std::size_t n, float* p) {
            ex2_approx_ftz_array(x, n, p);  // the H100 tables
          });
        case ExpFn::kEx2Approx:
          return exp_rows(e, b, buf, [&](const float* x, std::size_t n, float* p) {
            ex2_approx_array(x, n, p);
          });
        case ExpFn::kEx2ApproxLog2e:
          // Triton's tl.exp: fl(x · fl32(log2 e)) (mul.f32), then ex2.approx.f32: the product
          // into p, the array model in place (element by element what ExpModel::eval does).
          return exp_rows(e, b, buf, [&](const float* x, std::size_t n, float* p) {
            thread_local std::vector<float> y;
            y.resize(n);
            for (std::size_t j = 0; j < n; ++j) y[j] = x[j] * 0x1.715476p+0f;
            ex2_approx_array(y.data(), n, p);
          });
        case ExpFn::kExact:
          return exp_rows(e, b, buf, [&](const float* x, std::size_t n, float* p) {
            exp_exact_array(x, n, p, base == ExpKind::kExp2);
          });
        case ExpFn::kHook:
          if (st.hook)
            return exp_rows(e, b, buf, [&](const float* x, std::size_t n, float* p) {
              st.hook->eval_array(x, n, p);
            });
          break;
        default:
          break;
      }
    }
  }
  exp_ref(st, base, b, buf);
}
template void exp_stage<float>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<float>&);
template void exp_stage<double>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
