// Attention in 50-digit arithmetic (Boost.Multiprecision) to bound the FP64 golden's own error.
#pragma once

#include <vector>

#include "sim/problem.hpp"

namespace attnsim {

// The same function as golden_attention, computed with cpp_bin_float_50 in plain loops and
// returned rounded to double. For small problems only (cost ~ 50x FP64 per operation).
std::vector<double> golden_attention_mp(const AttentionInput& in);

struct GoldenErrorBound {
  double max_rel_elementwise;  // max |g - m| / max(|m|, 1e-300) over elements
  double rel_norm;             // ||g - m||_2 / ||m||_2
  double max_abs;              // max |g - m|
};

// Runs golden_attention and golden_attention_mp and compares them (in 50-digit arithmetic).
GoldenErrorBound golden_error_vs_mp(const AttentionInput& in);

}  // namespace attnsim
