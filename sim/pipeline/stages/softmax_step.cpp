// The online-softmax step of one tile and KV block (FA2 softmax_rescale_o; SageAttention2
// update_mdo for the scaled domain): per row, the block max, the new running max, the reference
// the exponent subtracts (offset, snapped), the argument of every p and of the rescale factor.
// Written once: every technique's step is this function with its stage value.
#include <cmath>
#include <limits>
#include <type_traits>

#include "numerics/isa.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

template <class T>
void softmax_step_ref(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                      const ExpConstants<T>& kc, TileState<T>& state, TileBuffers<T>& buf) {
  const T kInf = std::numeric_limits<T>::infinity();
  const T offset = T(st.max_offset);
  const bool scaled_max = st.max_domain == MaxDomain::kScaled;
  const bool snapping = max_round != MaxRound::kNone;
  const bool fold = st.dequant == Dequant::kFold;
  const bool ftz = st.ftz;  // .ftz state arithmetic (IEEE when off: the same bits as a * b etc.)
  const bool fuse = st.fma && b.fuse;  // this block's contraction (SoftmaxStage::fma_blocks)
  using stage_util::state_add;
  using stage_util::state_fma;
  using stage_util::state_mul;
  for (int i = 0; i < b.rows; ++i) {
    const T* si = buf.s.data() + std::size_t(i) * b.bk;
    const float* ci = fold ? buf.coef.data() + std::size_t(i) * b.bk : nullptr;
    T* xi = buf.x.data() + std::size_t(i) * b.bk;
    // The raw score's coefficient: the plain one, or FA3 FP8's with the row's descales folded in
    // (Dequant::kDescale: scores_ref wrote it to every column of the row's coefficients).
    const T kcc = st.dequant == Dequant::kDescale ? T(buf.coef[std::size_t(i) * b.bk]) : kc.c;
    // fma(s, c, −sub) in exponent units (c the fold coefficient or the plain one).
    auto scaled_arg = [&](int j, T sub) -> T {
      const T c = fold ? T(ci[j]) : kcc;
      return fuse ? state_fma(si[j], c, -sub, ftz) : state_add(state_mul(si[j], c, ftz), -sub, ftz);
    };
    T block_max = -kInf;
    if (scaled_max) {
      for (int j = 0; j < b.cols; ++j) {
        const T x = scaled_arg(j, offset);
        block_max = x > block_max ? x : block_max;
      }
    } else {
      for (int j = 0; j < b.cols; ++j) block_max = si[j] > block_max ? si[j] : block_max;
    }
    T& m = state.m[std::size_t(i)];
    const T m_old = m;
    const bool was_empty = state.empty(i);
    m = block_max > m ? block_max : m;
    // EmptyMax::kZero: Triton's `tl.where(m > -inf, m, 0)` is the running max from here on.
    if (st.empty_max == EmptyMax::kZero && m == -kInf) m = T(0);
    // FA2 Check_inf: the exponent uses max 0 while the row has seen no visible key, so a fully
    // masked block gives exp(-inf) = 0 instead of a -inf - (-inf) NaN.
    const T m_use = state.empty(i) ? T(0) : m;
    // The reference the exponent subtracts, in exponent units, and the rescale's argument.
    T ref, alpha_arg;
    // m·c − offset: one FMA, or the product rounded first (FA2's UNFUSE_FMA build).
    auto offset_ref = [&](T mm) -> T {
      return fuse ? state_fma(mm, kcc, -offset, ftz) : state_add(state_mul(mm, kcc, ftz), -offset, ftz);
    };
    if (!scaled_max && !snapping) {
      ref = offset != T(0) ? offset_ref(m_use)
                           : state_mul(m_use, kcc, ftz);  // FA2: max_scaled = max(mi) * scale
      // FA2: exp2f((max_prev - max_cur) * scale_log2)
      alpha_arg = state_mul(state_add(m_old, -m_use, ftz), kcc, ftz);
    } else {
      auto to_ref = [&](T mm) -> T {
        if (scaled_max) return stage_util::snap(mm, max_round);
        const T y = offset != T(0) ? offset_ref(mm) : state_mul(mm, kcc, ftz);
        return stage_util::snap(y, max_round);
      };
      ref = to_ref(m_use);
      const T ref_old = was_empty ? -kInf : to_ref(m_old);
      // An integer with a snapped max: Rescale::kIntAdd's N.
      alpha_arg = state_add(ref_old, -ref, ftz);
    }
    buf.alpha_arg[std::size_t(i)] = alpha_arg;
    buf.first[std::size_t(i)] = was_empty ? 1 : 0;
    if (!scaled_max && !snapping && st.base == ExpKind::kExp) {
      // e^((s − m)·sm_scale)
      for (int j = 0; j < b.cols; ++j) xi[j] = state_mul(state_add(si[j], -m_use, ftz), kcc, ftz);
    } else {
      // FA2 scale_apply_exp2: exp2f(x * scale - max_scaled), one FFMA under --fmad=true; the
      // scaled domain's fma(s, c, −m).
      for (int j = 0; j < b.cols; ++j) xi[j] = scaled_arg(j, ref);
    }
  }
}

template void softmax_step_ref<float>(const SoftmaxStage&, MaxRound, const BlockView&,
                                      const ExpConstants<float>&, TileState<float>&,
                                      TileBuffers<float>&);
template void softmax_step_ref<double>(const SoftmaxStage&, MaxRound, const BlockView&,
                                       const ExpConstants<double>&, TileState<double>&,
                                       TileBuffers<double>&);

// The dispatcher (stages.hpp): the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void softmax_step_stage(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                      const ExpConstants<T>& kc, TileState<T>& state, TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>)
    if (fp32_state_kernels_or_ftz(st)) {
      if (const auto f = stage_kernels().softmax_step) return f(st, max_round, b, kc, state, buf);
    }
  softmax_step_ref(st, max_round, b, kc, state, buf);
}
template void softmax_step_stage<float>(const SoftmaxStage&, MaxRound, const BlockView&, const ExpConstants<float>&, TileState<float>&, TileBuffers<float>&);
template void softmax_step_stage<double>(const SoftmaxStage&, MaxRound, const BlockView&, const ExpConstants<double>&, TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
