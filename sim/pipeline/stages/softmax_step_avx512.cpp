// The online-softmax step on AVX-512 for an FP32 state: softmax_step_ref's bits, 16 keys of one
// row per register for the block max and the exponent arguments; the running state per row is
// the reference's scalar code.
//
// The block max: the reference keeps `x > max ? x : max` in key order, so a NaN never wins and of
// equal values the first stays. Lanes keep their own maxima by the same rule; any non-zero maximum
// is one bit pattern whatever lane holds it, and when the maximum is zero (+0 or -0: the first one
// in key order wins) the row is rescanned in key order.
#include <cmath>
#include <limits>

#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
// Last: the AVX-512 helpers (avx512.hpp).
#include "sim/pipeline/stages/avx512.hpp"

namespace attnsim {

namespace {

// How a row's exponent arguments are formed (softmax_step_ref's three cases).
enum class ArgForm { kExpBase, kPlain, kScaled };

struct StepOps {
  bool scaled_max = false;  // the max over fma(s, c_j, −offset), else over s
  bool fold = false;        // c_j = coef[j], else the row's coefficient c
  bool fma = true;
  bool ftz = false;         // .ftz state arithmetic (SoftmaxStage::ftz)
  float c = 0.0f;           // the row's coefficient (FA3 FP8's descaled one under kDescale)
  float offset = 0.0f;
};

// fma(s, c, −sub) or s·c − sub (two roundings), as the reference's scaled_arg.
ATTNSIM_AVX512_INLINE __m512 scaled_arg(bool fma, __m512 s, __m512 c, __m512 sub, __m512 neg_sub) {
  return fma ? _mm512_fmadd_ps(s, c, neg_sub) : _mm512_sub_ps(_mm512_mul_ps(s, c), sub);
}
// The same in .ftz arithmetic: state_fma(s, c, −sub) or state_add(state_mul(s, c), −sub).
ATTNSIM_AVX512_INLINE __m512 scaled_arg_ftz(bool fma, __m512 s, __m512 c, __m512 neg_sub) {
  return fma ? avx512::ftz_fma(s, c, neg_sub) : avx512::ftz_add(avx512::ftz_mul(s, c), neg_sub);
}
ATTNSIM_AVX512_INLINE __m512 scaled_arg(const StepOps& op, __m512 s, __m512 c, __m512 sub, __m512 neg_sub) {
  return op.ftz ? scaled_arg_ftz(op.fma, s, c, neg_sub) : scaled_arg(op.fma, s, c, sub, neg_sub);
}

// The block max of one row over keys [0, n): lanes by the reference's rule, then combined.
ATTNSIM_AVX512 float block_max_row(const StepOps& op, const float* s, const float* cf, int n) {
  const float kInf = std::numeric_limits<float>::infinity();
  __m512 run = _mm512_set1_ps(-kInf);
  const __m512 c = _mm512_set1_ps(op.c), off = _mm512_set1_ps(op.offset),
               neg_off = _mm512_set1_ps(-op.offset);
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = avx512::first16(n - j);
    __m512 x = _mm512_maskz_loadu_ps(m, s + j);
    if (op.scaled_max)
      x = scaled_arg(op, x, op.fold ? _mm512_maskz_loadu_ps(m, cf + j) : c, off, neg_off);
    run = _mm512_mask_blend_ps(_mm512_mask_cmp_ps_mask(m, x, run, _CMP_GT_OQ), run, x);
  }
  alignas(64) float lane[16];
  _mm512_store_ps(lane, run);
  float mx = -kInf;
  for (float v : lane) mx = v > mx ? v : mx;
  return mx;
}

// x[j] for keys [0, n): the exponent's argument in the row's form.
ATTNSIM_AVX512 void arguments_row(const StepOps& op, ArgForm form, float ref, float m_use,
                                  const float* s, const float* cf, float* x, int n) {
  const __m512 c = _mm512_set1_ps(op.c), vref = _mm512_set1_ps(ref), neg_ref = _mm512_set1_ps(-ref),
               mu = _mm512_set1_ps(m_use), neg_mu = _mm512_set1_ps(-m_use);
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = avx512::first16(n - j);
    const __m512 sj = _mm512_maskz_loadu_ps(m, s + j);
    __m512 r;
    if (form == ArgForm::kExpBase) {
      r = op.ftz ? avx512::ftz_mul(avx512::ftz_add(sj, neg_mu), c)
                 : _mm512_mul_ps(_mm512_sub_ps(sj, mu), c);  // (s − m)·sm_scale
    } else if (form == ArgForm::kPlain) {
      r = scaled_arg(op, sj, c, vref, neg_ref);
    } else {
      r = scaled_arg(op, sj, op.fold ? _mm512_maskz_loadu_ps(m, cf + j) : c, vref, neg_ref);
    }
    _mm512_mask_storeu_ps(x + j, m, r);
  }
}

}  // namespace

void softmax_step_avx512(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                         const ExpConstants<float>& kc, TileState<float>& state,
                         TileBuffers<float>& buf) {
  using T = float;
  const T kInf = std::numeric_limits<T>::infinity();
  StepOps op;
  op.scaled_max = st.max_domain == MaxDomain::kScaled;
  op.fold = st.dequant == Dequant::kFold;
  op.fma = st.fma && b.fuse;
  op.ftz = st.ftz;
  const bool ftz = st.ftz;
  using stage_util::state_add;
  using stage_util::state_fma;
  using stage_util::state_mul;
  op.offset = T(st.max_offset);
  const T offset = op.offset;
  const bool scaled_max = op.scaled_max, snapping = max_round != MaxRound::kNone;
  const bool descale = st.dequant == Dequant::kDescale;
  const ArgForm form = !scaled_max && !snapping && st.base == ExpKind::kExp ? ArgForm::kExpBase
                       : !scaled_max && !op.fold                            ? ArgForm::kPlain
                                                                            : ArgForm::kScaled;
  for (int i = 0; i < b.rows; ++i) {
    const T* si = buf.s.data() + std::size_t(i) * b.bk;
    const float* ci = op.fold ? buf.coef.data() + std::size_t(i) * b.bk : nullptr;
    // The raw score's coefficient of the row (the reference's kcc): FA3 FP8's descaled one, which
    // scores_ref wrote to every column of the row, or the plain one.
    const T kcc = descale ? buf.coef[std::size_t(i) * b.bk] : kc.c;
    op.c = kcc;
    T block_max = block_max_row(op, si, ci, b.cols);
    if (block_max == T(0)) {
      // ±0: the first zero in key order (softmax_step_ref's loop).
      block_max = -kInf;
      for (int j = 0; j < b.cols; ++j) {
        const T c = op.fold ? ci[j] : kcc;
        const T x = !scaled_max ? si[j]
                    : op.fma    ? state_fma(si[j], c, -offset, ftz)
                                : state_add(state_mul(si[j], c, ftz), -offset, ftz);
        block_max = x > block_max ? x : block_max;
      }
    }
    // The running state: softmax_step_ref's code.
    T& m = state.m[std::size_t(i)];
    const T m_old = m;
    const bool was_empty = state.empty(i);
    m = block_max > m ? block_max : m;
    if (st.empty_max == EmptyMax::kZero && m == -kInf) m = T(0);  // softmax_step_ref's
    const T m_use = state.empty(i) ? T(0) : m;
    T ref, alpha_arg;
    if (!scaled_max && !snapping) {
      ref = offset != T(0) ? (op.fma ? state_fma(m_use, kcc, -offset, ftz)
                                     : state_add(state_mul(m_use, kcc, ftz), -offset, ftz))
                           : state_mul(m_use, kcc, ftz);
      alpha_arg = state_mul(state_add(m_old, -m_use, ftz), kcc, ftz);
    } else {
      auto to_ref = [&](T mm) -> T {
        if (scaled_max) return stage_util::snap(mm, max_round);
        const T y = offset != T(0) ? (op.fma ? state_fma(mm, kcc, -offset, ftz)
                                             : state_add(state_mul(mm, kcc, ftz), -offset, ftz))
                                   : state_mul(mm, kcc, ftz);
        return stage_util::snap(y, max_round);
      };
      ref = to_ref(m_use);
      const T ref_old = was_empty ? -kInf : to_ref(m_old);
      alpha_arg = state_add(ref_old, -ref, ftz);
    }
    buf.alpha_arg[std::size_t(i)] = alpha_arg;
    buf.first[std::size_t(i)] = was_empty ? 1 : 0;
    arguments_row(op, form, ref, m_use, si, ci, buf.x.data() + std::size_t(i) * b.bk, b.cols);
  }
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
