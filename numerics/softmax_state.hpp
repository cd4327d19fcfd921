// Online-softmax state of one query row (running max, running sum, unnormalized output) with the
// update, merge and normalize steps of FlashAttention-2 and of split-KV reductions.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "formats/float32.hpp"
#include "numerics/special.hpp"

namespace attnsim {

// How p = e^(scale·(s − m)) is evaluated: the base of the exponent ...
//  kExp2  FA2/FA3/flashinfer/SageAttention: p = exp2(s·scale_log2 − m·scale_log2) with
//         scale_log2 = sm_scale·log2 e folded into one constant (FA2 softmax.h scale_apply_exp2;
//         nvcc contracts the multiply-subtract into one FFMA, see `fma`).
//  kExp   the textbook p = exp((s − m)·sm_scale) (TurboAttention's SAS, AMLA/Ascend's Exp).
enum class ExpKind { kExp2, kExp };

// ... and the function that evaluates it (the exp stage of sim/pipeline).
//  kLibm         the host's exp2/exp in the state's arithmetic (glibc exp2f for FP32): FA2 as the
//                reference kernels of this project compute it.
//  kExact        exp2/exp evaluated in FP64 and rounded once to the state's type: the exact choice
//                of error attribution.
//  kEx2ApproxFtz ex2.approx.ftz.f32 as the H100 computes it (numerics/special.hpp, equal to the
//                hardware on all 2^32 inputs): what exp2f compiles to under --use_fast_math and
//                what SageAttention/flashinfer call directly. Base 2 only.
//  kEx2Approx    ex2.approx.f32 (no .ftz: ptxas's range scaling around the same MUFU). Base 2.
//  kHook         a caller-supplied FP32 function of the argument (TurboAttention's SAS: LUT for
//                the integer part, polynomial for the fraction).
// The FP32 models take the argument rounded to FP32 (in an FP64 state that is one rounding) and
// return an FP32 value, which the state widens exactly.
enum class ExpFn { kLibm, kExact, kEx2ApproxFtz, kEx2Approx, kHook };

template <class T>
struct ExpModel {
  ExpKind kind = ExpKind::kExp2;
  // kExp2: scale_log2, rounded once to T (FA2's Flash_fwd_params::scale_softmax_log2);
  // kExp: sm_scale. scale = 1 with kExp2 is the flashinfer convention (scores already scaled).
  T scale = T(1);
  // kExp2 only: `s * scale - max_scaled` as one fused multiply-add (nvcc --fmad=true, the default
  // FA2 build) or as a rounded product then a subtraction.
  bool fma = true;
  ExpFn fn = ExpFn::kLibm;
  float (*hook)(float x, const void* ctx) = nullptr;  // kHook: p = hook(x, hook_ctx)
  const void* hook_ctx = nullptr;

  // The exponential (base `kind`) of an argument x already in the exponent's units.
  T eval(T x) const {
    switch (fn) {
      case ExpFn::kLibm:
        return kind == ExpKind::kExp2 ? std::exp2(x) : std::exp(x);
      case ExpFn::kExact:
        return T(kind == ExpKind::kExp2 ? std::exp2(double(x)) : std::exp(double(x)));
      case ExpFn::kEx2ApproxFtz:
        return T(Ex2ApproxFtz::h100()(float(x)));
      case ExpFn::kEx2Approx:
        return T(f32_from_bits(ex2_approx_bits(f32_bits(float(x)))));
      case ExpFn::kHook:
        return T(hook(float(x), hook_ctx));
    }
    return x;
  }

  // p for a score s against the max the exponent uses (never -inf, see SoftmaxState::rescale).
  // A masked score s = -inf gives exactly 0 on every path (exp2(-inf) = 0, as on the GPU).
  T prob(T s, T m_use) const {
    if (kind == ExpKind::kExp2) {
      const T max_scaled = m_use * scale;  // FA2: max(mi) * scale, once per row
      return eval(fma ? std::fma(s, scale, -max_scaled) : s * scale - max_scaled);
    }
    return eval((s - m_use) * scale);
  }
  // Rescale factor of the running sum and output when the max moves from m_old to m_use
  // (FA2 softmax_rescale_o: scores_scale = exp2f((scores_max_prev - scores_max_cur) * scale_log2)).
  T alpha(T m_old, T m_use) const { return eval((m_old - m_use) * scale); }
};

// State of one query row. T is the arithmetic type (float models an FP32 kernel, double the FP64
// variant); every operation is one rounding in T, in the order written here, which is the order
// of FA2 csrc/flash_attn/src/softmax.h (Softmax::softmax_rescale_o, normalize_softmax_lse).
//
// Row sums by lanes: on SM80 FA2 a row of an m16n8 accumulator tile is spread over the 4 threads
// of a quad, thread t holding columns 8n + 2t and 8n + 2t + 1 of every 8-column slice. Each thread
// keeps its own partial row sum across all KV blocks (reduce_sum<zero_init=false> is thread-local)
// and the 4 partials are combined only in normalize_softmax_lse by quad_allreduce_ (shfl_xor 2,
// then 1): l = (l0 + l2) + (l1 + l3). lanes = 1 models a single accumulator per row.
//
// Empty state (no key seen yet, or every key so far masked): m = -inf, every l = 0, o = 0.
//   - merge with an empty state is the identity, bit for bit, on either side;
//   - normalize() of an empty state gives zeros (FA2: inv_sum = 1 when sum == 0, and o = 0);
//   - lse() of an empty state is -inf.
// An update whose keys are all masked (block max -inf) leaves an empty state empty: the exponent
// then uses max 0 (FA2 Check_inf) so no -inf - (-inf) NaN appears.
template <class T>
struct SoftmaxState {
  static constexpr int kMaxLanes = 4;
  T m = -std::numeric_limits<T>::infinity();
  std::array<T, kMaxLanes> l{};  // partial row sums, lanes of them in use
  int lanes = 1;
  // How 4 lanes combine: FA2's quad_allreduce_ (shuffle xor 2, then 1: (l0 + l2) + (l1 + l3)) or
  // SageAttention2's normalize_d (xor 1, then 2: (l0 + l1) + (l2 + l3)).
  bool xor1_first = false;
  std::vector<T> o;
  // A technique's own per-row values (AMLA: n_{i-1}, c_{i-1}, S16 of sim/amla), zero when empty;
  // merge() does not combine them (a split schedule does not run such a technique).
  std::array<double, 4> aux{};

  explicit SoftmaxState(int dv = 0, int lanes_ = 1) : lanes(lanes_), o(std::size_t(dv), T(0)) {}

  bool empty() const { return m == -std::numeric_limits<T>::infinity(); }

  void reset() {
    m = -std::numeric_limits<T>::infinity();
    l.fill(T(0));
    std::fill(o.begin(), o.end(), T(0));
    aux.fill(0.0);
  }

  // The lane (quad thread) that owns column `col` of a KV block.
  int lane_of(int col) const { return lanes == 1 ? 0 : (col % 8) / 2; }

  // The row sum: the lanes combined in the shuffle order (FA2 quad_allreduce_ by default).
  T sum() const {
    if (lanes == 1) return l[0];
    return xor1_first ? (l[0] + l[1]) + (l[2] + l[3]) : (l[0] + l[2]) + (l[1] + l[3]);
  }

  // First half of FA2 softmax_rescale_o for one KV block whose row max is block_max:
  // m = max(m, block_max); alpha = e.alpha(m_old, m_use); l *= alpha; o *= alpha.
  // Returns m_use, the max the exponent of this block subtracts (m, or 0 while m is -inf).
  // For the first block (m_old = -inf) alpha is exp2(-inf) = 0 and 0 * 0 = 0: the same bits as
  // FA2's Is_first branch, which skips the rescale.
  T rescale(T block_max, const ExpModel<T>& e) {
    const T m_old = m;
    m = block_max > m ? block_max : m;
    const T m_use = empty() ? T(0) : m;
    const T a = e.alpha(m_old, m_use);
    for (int t = 0; t < lanes; ++t) l[t] = l[t] * a;
    for (T& x : o) x = x * a;
    return m_use;
  }

  // reduce_sum<zero_init=false>: the owning lane adds p to its partial sum.
  void add_to_sum(int col, T p) {
    const int t = lane_of(col);
    l[t] = l[t] + p;
  }

  // One whole FA2 step for this row over a KV block of n keys: raw scores s[0..n) (-inf where
  // masked), value rows v + j*ldv (dv = o.size() floats each). P is used unrounded and P·V runs
  // in natural key order onto the rescaled o (o[c] = o[c] + p_j·v_j[c]). Kernels that round P or
  // use a tensor-core P·V call rescale / add_to_sum / their own P·V instead (sim/flash).
  void update(const T* s, int n, const float* v, std::size_t ldv, const ExpModel<T>& e) {
    T block_max = -std::numeric_limits<T>::infinity();
    for (int j = 0; j < n; ++j) block_max = s[j] > block_max ? s[j] : block_max;
    const T m_use = rescale(block_max, e);
    for (int j = 0; j < n; ++j) {
      const T p = e.prob(s[j], m_use);
      add_to_sum(j, p);
      for (std::size_t c = 0; c < o.size(); ++c) o[c] = o[c] + p * T(v[std::size_t(j) * ldv + c]);
    }
  }

  // Combine with a state over a disjoint key set (flashinfer state_t::merge, FA2 split-KV
  // combine, LeanAttention's reduction): m = max(m_a, m_b), each side rescaled by
  // e.alpha(m_side, m), lane by lane (both states must have the same lanes):
  //   l = l_a·s_a + l_b·s_b,  o = o_a·s_a + o_b·s_b.
  // The default ExpModel (exp2, scale 1) is flashinfer's convention of pre-scaled base-2 scores.
  void merge(const SoftmaxState& other, const ExpModel<T>& e = ExpModel<T>{}) {
    if (other.empty()) return;
    if (empty()) {
      *this = other;
      return;
    }
    const T m_new = m > other.m ? m : other.m;
    const T sa = e.alpha(m, m_new);
    const T sb = e.alpha(other.m, m_new);
    for (int t = 0; t < lanes; ++t) l[t] = l[t] * sa + other.l[t] * sb;
    for (std::size_t c = 0; c < o.size(); ++c) o[c] = o[c] * sa + other.o[c] * sb;
    m = m_new;
  }

  // o / l as FA2's epilogue computes it: inv_sum = (sum == 0 || sum != sum) ? 1 : 1 / sum, then
  // o * inv_sum (a reciprocal and a multiply, not a division). Zeros for an empty state.
  std::vector<T> normalize() const {
    const T s = sum();
    const T inv = (s == T(0) || s != s) ? T(1) : T(1) / s;
    std::vector<T> out(o.size());
    for (std::size_t c = 0; c < o.size(); ++c) out[c] = o[c] * inv;
    return out;
  }

  // Natural-log LSE, FA2 normalize_softmax_lse: m·score_scale + log(sum), where score_scale turns
  // the units of m into natural-log units (sm_scale for raw scores as FA2 stores them; ln 2 for
  // flashinfer's pre-scaled base-2 scores). -inf when empty or the sum is 0 or NaN.
  T lse(T score_scale) const {
    const T s = sum();
    if (s == T(0) || s != s) return -std::numeric_limits<T>::infinity();
    return m * score_scale + std::log(s);
  }
};

}  // namespace attnsim
