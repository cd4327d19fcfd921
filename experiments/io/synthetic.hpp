// Seeded synthetic attention inputs (`--synthetic SPEC`, `attnsim.synthetic`): no HDF5, so the
// Python module links them too.
#pragma once

#include <cstdint>
#include <string>

#include "sim/problem.hpp"

namespace attnsim {

// Seeded synthetic inputs, bit-reproducible on any machine and thread count (a counter-based
// generator: element i of tensor t depends only on (seed, t, i)). SPEC:
//   DIST[:key=value,...]   DIST one of normal, uniform, kbias, outlier, peaked
//   keys: b (batch) hq hkv nq nkv d dv (shape; defaults 1 1 1 256 256 64 d), causal (0/1),
//         seed, sigma (normal scale, default 1), lo hi (uniform), bias (kbias: per-channel mean
//         of K and V, default 4), frac and mag (outlier: fraction of channels scaled by mag,
//         defaults 0.05 and 20), sharp (peaked: queries = sharp * a key + noise, default 4)
// Refused with one line (UsageError): a key given twice, a parameter of another distribution
// (bias on normal), values that are not finite numbers, sizes that are not positive integers,
// sizes beyond 2^31 - 1 (named with that limit), causal not 0/1, a seed that is not an integer
// >= 0, sigma < 0, lo > hi, frac outside [0, 1], and parameters whose generated values could
// overflow float32 (bound: |N(0,1)| <= 8.6507 for the counter generator), so no spec yields Inf
// or NaN in q, k or v (also checked after generating).
AttentionInput make_synthetic(const std::string& spec);
// The spec's seed (0 if it names none); validates the whole spec, sizes included.
std::uint64_t synthetic_seed(const std::string& spec);
// The shape a spec describes (validates the spec; tensors of q, k, v and o together ≤ 400M
// elements).
AttentionShape synthetic_shape(const std::string& spec);
// The same spec with seed replaced (sweeps over seeds).
AttentionInput make_synthetic(const std::string& spec, std::uint64_t seed);

}  // namespace attnsim
