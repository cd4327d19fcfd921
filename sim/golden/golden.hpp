// FP64 golden attention, the reference every simulator is measured against.
#pragma once

#include <vector>

#include "sim/problem.hpp"

namespace attnsim {

// O = softmax(scale * Q Kᵀ + mask) V in FP64 from the FP32 inputs (which FP64 holds exactly).
// Row-major [batch, heads_q, len_q, head_dim_v]. A query row that sees no key gives zeros and
// lse = -inf. The two GEMMs run in Eigen; the softmax subtracts the row max before exp.
// The result does not depend on the number of OpenMP threads (work is split into row chunks whose
// size depends on the shape only; each element's arithmetic is the same in any split). p = exp(s -
// max) uses Eigen's vectorized exp; the row sum runs sequentially in key order.
struct GoldenResult {
  std::vector<double> o;
  std::vector<double> lse;  // natural-log log-sum-exp of each row's scaled scores, [b, hq, len_q]
};

// `align`: the causal mask's alignment (sim/problem.hpp; bottom-right unless a top-left kernel is
// being measured); ignored when the input is not causal.
GoldenResult golden_attention(const AttentionInput& in,
                              CausalAlign align = CausalAlign::kBottomRight);
// Output only.
std::vector<double> golden_attention_ref(const AttentionInput& in,
                                         CausalAlign align = CausalAlign::kBottomRight);

}  // namespace attnsim
