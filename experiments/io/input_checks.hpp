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

}  // namespace attnsim
