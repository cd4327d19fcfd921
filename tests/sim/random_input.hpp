// Test helper for tests/sim: an attention problem with N(0, sigma²) Q, K and V from a seed.
#pragma once

#include <cstdint>
#include <random>

#include "sim/problem.hpp"

namespace attnsim::simtest {

inline AttentionInput random_input(AttentionShape s, bool causal, std::uint32_t seed,
                                   double sigma = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, float(sigma));
  AttentionInput in;
  in.shape = s;
  in.causal = causal;
  in.q.resize(s.q_size());
  in.k.resize(s.k_size());
  in.v.resize(s.v_size());
  for (auto& x : in.q) x = n(rng);
  for (auto& x : in.k) x = n(rng);
  for (auto& x : in.v) x = n(rng);
  return in;
}

}  // namespace attnsim::simtest
