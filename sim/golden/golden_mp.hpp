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
  double lse_max_rel;          // max |lse_g - lse_m| / max(1, |lse_m|) over rows that see a key
  double lse_max_abs;          // max |lse_g - lse_m| over rows that see a key; +inf if a row that
                       // sees no key is not -inf in the golden (or a seen row is not finite)
};

// Runs golden_attention and the 50-digit attention and compares outputs and LSE (differences
// taken in 50-digit arithmetic). Any NaN in the golden output makes rel_norm NaN (a failing test).
GoldenErrorBound golden_error_vs_mp(const AttentionInput& in);

}  // namespace attnsim
