// The checks every attention input passes (see input_checks.hpp).
#include "experiments/io/input_checks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "experiments/common/error.hpp"

namespace attnsim {

AttentionShape attention_shape_of(const std::vector<std::uint64_t> (&dims)[3],
                                  const std::string& where) {
  // No size is cast to int before it is known to fit.
  const char* names[3] = {"q", "k", "v"};
  for (int t = 0; t < 3; ++t) {
    if (dims[t].size() != 4) {
      throw UsageError("q, k and v in " + where +
                       " must have rank 4 [batch, heads, tokens, head_dim]; got rank " +
                       std::to_string(dims[t].size()));
    }
    for (const std::uint64_t d : dims[t]) {
      if (d > std::uint64_t(std::numeric_limits<int>::max())) {
        throw UsageError(std::string(names[t]) + " in " + where + " has a dimension of " +
                         std::to_string(d) + ", beyond the limit of 2147483647");
      }
    }
  }
  const std::vector<std::uint64_t>&qd = dims[0], &kd = dims[1], &vd = dims[2];
  AttentionShape s;
  s.batch = int(qd[0]);
  s.heads_q = int(qd[1]);
  s.len_q = int(qd[2]);
  s.head_dim = int(qd[3]);
  s.heads_kv = int(kd[1]);
  s.len_kv = int(kd[2]);
  s.head_dim_v = int(vd[3]);
  if (kd[0] != qd[0] || vd[0] != qd[0])
    throw UsageError("batch sizes of q, k, v differ in " + where);
  if (kd[3] != qd[3]) throw UsageError("head_dim of q and k differ in " + where);
  if (vd[1] != kd[1] || vd[2] != kd[2])
    throw UsageError("k and v differ in heads or tokens in " + where);
  // Before the head ratio: zero k/v heads would divide by zero.
  for (const auto& d : dims) {
    if (std::find(d.begin(), d.end(), 0u) != d.end()) throw UsageError("empty tensor in " + where);
  }
  if (s.heads_q % s.heads_kv != 0) {
    throw UsageError("q heads (" + std::to_string(s.heads_q) +
                     ") are not a multiple of k/v heads (" + std::to_string(s.heads_kv) + ") in " +
                     where);
  }
  return s;
}

void check_finite(const float* x, std::size_t n, const std::vector<std::uint64_t>& dims,
                  const std::string& what, const std::string& hint) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    std::string idx;
    std::size_t rem = i;
    std::vector<std::uint64_t> coord(dims.size());
    for (std::size_t d = dims.size(); d-- > 0;) {
      coord[d] = rem % dims[d];
      rem /= dims[d];
    }
    for (std::size_t d = 0; d < coord.size(); ++d) {
      if (d) idx += ',';
      idx += std::to_string(coord[d]);
    }
    throw UsageError(what + " has a non-finite value (" + format_number(x[i]) + ") at [" + idx +
                     "]; " + hint);
  }
}

void check_causal_rows(const AttentionShape& s, bool causal, const std::string& input,
                       const std::string& not_causal) {
  if (!causal || s.len_q <= s.len_kv) return;
  const long long empty = (long long)s.len_q - s.len_kv;
  throw UsageError("causal input '" + abbreviate(input) + "' has more queries (" +
                   std::to_string(s.len_q) + ") than keys (" + std::to_string(s.len_kv) +
                   "): under the bottom-right causal mask its first " + std::to_string(empty) +
                   " query rows see no key, and their output (0 in golden attention and in every "
                   "method) would count as agreement; use its last " +
                   std::to_string(s.len_kv) + " queries, or " + not_causal);
}

}  // namespace attnsim
