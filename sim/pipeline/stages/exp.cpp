// The exp stage of one tile and KV block: p = exp(x) for every key of the block (0 past them: the
// kernel's full tile sees P = 0 there) and the rescale factor alpha = exp(alpha's argument), under
// the exp model (libm, FP64-exact, the H100's ex2.approx{.ftz}, or a technique's hook).
#include <type_traits>

#include "numerics/isa.hpp"
#include "numerics/special_array.hpp"
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

// An FP32 state under the H100's ex2.approx models: each row's p by the gathered MUFU models of
// numerics/special_array (bit-identical to ExpModel::eval's Ex2ApproxFtz / ex2_approx_bits, the
// exp_ref loop), alpha by the scalar model.
void exp_ex2_rows(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<float>& buf) {
  const ExpModel<float> e = exp_model<float>(st, base, 1.0f);
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  for (int i = 0; i < b.rows; ++i) {
    const float* xi = buf.x.data() + std::size_t(i) * b.bk;
    float* pi = buf.p.data() + std::size_t(i) * b.bk;
    if (st.fn == ExpFn::kEx2ApproxFtz) {
      ex2_approx_ftz_array(xi, std::size_t(b.cols), pi, ex2);
    } else {
      ex2_approx_array(xi, std::size_t(b.cols), pi, ex2);
    }
    for (int j = b.cols; j < b.bk; ++j) pi[j] = 0.0f;
    buf.alpha[std::size_t(i)] = e.eval(buf.alpha_arg[std::size_t(i)]);
  }
}

// An FP32 state's exp.exact (float(exp(double(x))), ExpModel's kExact): each row's p by
// numerics/special_array's exp_exact_array (bit-identical to the libm reference), alpha by eval.
void exp_exact_rows(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<float>& buf) {
  const ExpModel<float> e = exp_model<float>(st, base, 1.0f);
  for (int i = 0; i < b.rows; ++i) {
    const float* xi = buf.x.data() + std::size_t(i) * b.bk;
    float* pi = buf.p.data() + std::size_t(i) * b.bk;
    exp_exact_array(xi, std::size_t(b.cols), pi, base == ExpKind::kExp2);
    for (int j = b.cols; j < b.bk; ++j) pi[j] = 0.0f;
    buf.alpha[std::size_t(i)] = e.eval(buf.alpha_arg[std::size_t(i)]);
  }
}

// An FP32 state's hook (exp=sas): each row's p through the hook's array form (ExpHook::eval_array,
// equal to eval element by element), alpha by eval.
void exp_hook_rows(const ExpStage& st, const BlockView& b, TileBuffers<float>& buf) {
  const ExpHook& h = *st.hook;
  for (int i = 0; i < b.rows; ++i) {
    const float* xi = buf.x.data() + std::size_t(i) * b.bk;
    float* pi = buf.p.data() + std::size_t(i) * b.bk;
    h.eval_array(xi, std::size_t(b.cols), pi);
    for (int j = b.cols; j < b.bk; ++j) pi[j] = 0.0f;
    buf.alpha[std::size_t(i)] = h.eval(buf.alpha_arg[std::size_t(i)]);
  }
}

}  // namespace

// The dispatcher (stages.hpp): the MUFU models of an FP32 state as array kernels when the
// instruction set allows, a hook's array form, else the reference.
template <class T>
void exp_stage(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    if (active_isa() != Isa::kScalar &&
        (st.fn == ExpFn::kEx2ApproxFtz || st.fn == ExpFn::kEx2Approx)) {
      return exp_ex2_rows(st, base, b, buf);
    }
    if (active_isa() != Isa::kScalar && st.fn == ExpFn::kHook && st.hook)
      return exp_hook_rows(st, b, buf);
    if (active_isa() != Isa::kScalar && st.fn == ExpFn::kExact)
      return exp_exact_rows(st, base, b, buf);
  }
  exp_ref(st, base, b, buf);
}
template void exp_stage<float>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<float>&);
template void exp_stage<double>(const ExpStage&, ExpKind, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
