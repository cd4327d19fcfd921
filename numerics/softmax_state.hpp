// Online-softmax state of one query row: running max, running sum, unnormalized output; with the
// merge and normalize steps of FlashAttention and of split-KV reductions (flashinfer state.cuh).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

namespace attnsim {

// Scores live in the base-2 domain the kernels use: a score s contributes 2^(s - m), where the
// caller has already multiplied the raw q·k by sm_scale·log2(e) (FA2 softmax.h, FA3, flashinfer).
//
// Empty state (no key seen yet, or every key masked): m = -inf, l = 0, o = 0.
//   - merging with an empty state returns the other state unchanged (bit for bit);
//   - normalize() of an empty state gives zeros, and lse2() gives -inf.
// T is the arithmetic type (float models an FP32 kernel; double the FP64 variant); every
// operation is one rounding in T, in the order written.
template <class T>
struct SoftmaxState {
  T m = -std::numeric_limits<T>::infinity();
  T l = T(0);
  std::vector<T> o;

  explicit SoftmaxState(int dv = 0) : o(std::size_t(dv), T(0)) {}

  bool empty() const { return l == T(0) && m == -std::numeric_limits<T>::infinity(); }

  // Combine two partial states over disjoint key sets (FlashInfer merge_state, LeanAttention
  // Alg. 2 reduction): m = max(m_a, m_b); each side is rescaled by 2^(m_side - m).
  void merge(const SoftmaxState& other) {
    if (other.empty()) return;
    if (empty()) {
      *this = other;
      return;
    }
    const T m_new = m > other.m ? m : other.m;
    const T sa = std::exp2(m - m_new);
    const T sb = std::exp2(other.m - m_new);
    l = l * sa + other.l * sb;
    for (std::size_t c = 0; c < o.size(); ++c) o[c] = o[c] * sa + other.o[c] * sb;
    m = m_new;
  }

  // o / l, computed as o * (1 / l) like FA2's epilogue (`inv_sum = 1.f / sum; acc_o *= inv_sum`);
  // zeros for an empty or zero-sum row (FA2 sets inv_sum = 1 there, and o is 0).
  std::vector<T> normalize() const {
    std::vector<T> out(o.size(), T(0));
    if (!(l > T(0))) return out;
    const T inv = T(1) / l;
    for (std::size_t c = 0; c < o.size(); ++c) out[c] = o[c] * inv;
    return out;
  }

  // Base-2 log-sum-exp of the scaled scores: m + log2(l); -inf when empty.
  T lse2() const { return l > T(0) ? m + std::log2(l) : -std::numeric_limits<T>::infinity(); }
};

}  // namespace attnsim
