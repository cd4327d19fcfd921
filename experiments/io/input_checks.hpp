// The checks every attention input passes, from a dump (`attnsim run --input`) or from arrays
// (`attnsim.attention`): shapes and finite values, with the same one-line messages (no HDF5, so
// the Python module links them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/problem.hpp"

namespace attnsim {

// The shape of q, k, v given their dimensions ([batch, heads, tokens, head_dim] each); a
// UsageError naming `where` ("'file.h5' group layer_03/") for a rank other than 4, a dimension
// beyond int, batch sizes, head_dim or k/v heads and tokens that differ, an empty tensor, or query
// heads that are not a multiple of the k/v heads.
AttentionShape attention_shape_of(const std::vector<std::uint64_t> (&dims)[3],
                                  const std::string& where);

// A UsageError for the first non-finite element of x (a tensor of shape `dims`, row-major),
// naming `what` and its coordinates, then `hint` (how to let it through).
void check_finite(const float* x, std::size_t n, const std::vector<std::uint64_t>& dims,
                  const std::string& what,
                  const std::string& hint = "pass --allow-nonfinite to proceed");

// Refuses a causal problem with more queries than keys. Under the bottom-right causal mask the
// first len_q - len_kv query rows see no key; their output is 0 by convention in golden attention
// and in every method alike, so they would count as perfect agreement and dilute every metric
// (192 of 256 rows of a 256-query, 64-key input). The UsageError names the input, the counts and
// the way out (the last len_kv queries). A library caller that wants such rows (the kernels'
// convention for them is tested) calls the simulators directly.
// `not_causal`: how the caller's interface says "not causal" (the command line's "causal = 0").
void check_causal_rows(const AttentionShape& shape, bool causal, const std::string& input,
                       const std::string& not_causal = "causal = 0");

}  // namespace attnsim
