// The seeded ragged context lengths of the LeanAttention timing runs (a workload generator shared
// by cuda_check/lean's timer and `attnsim repro lean-ragged`, so both draw the same batches).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attnsim {

// splitmix64 as a stateful generator (Steele, Lea & Flood 2014).
inline std::uint64_t splitmix_next(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Ragged context lengths with max M and mean ratio·M exactly (to the token): entry `seed % B` has
// M, the others share the rest by seeded weights, each in [1, M]. Empty when ratio < (M + B − 1)
// / (B·M) or ratio > 1 (not reachable).
inline std::vector<int> ragged_lengths(int batch, int m, double ratio, std::uint64_t seed) {
  const long long target = std::llround(ratio * double(m) * batch);
  if (batch < 1 || target < m + (batch - 1LL) || target > 1LL * m * batch) return {};
  std::vector<int> l(std::size_t(batch), m);
  std::uint64_t s = seed;
  std::vector<double> w(std::size_t(batch - 1));
  double wsum = 0;
  for (auto& x : w) wsum += (x = 0.05 + double(splitmix_next(s) >> 11) * 0x1p-53);
  const long long rest = target - m;
  long long have = 0;
  for (int i = 1; i < batch; ++i) {
    const long long x = std::llround(double(rest) * w[std::size_t(i - 1)] / wsum);
    l[std::size_t(i)] = int(std::max(1LL, std::min<long long>(m, x)));
    have += l[std::size_t(i)];
  }
  long long diff = rest - have;
  for (int it = 0; diff != 0 && batch > 1 && it < 64 * batch; ++it) {
    int& x = l[std::size_t(1 + it % (batch - 1))];
    const long long step =
        diff > 0 ? std::min<long long>(diff, m - x) : -std::min<long long>(-diff, x - 1);
    x += int(step);
    diff -= step;
  }
  std::rotate(l.begin(), l.begin() + std::ptrdiff_t(batch - int(seed % std::uint64_t(batch))),
              l.end());
  return l;
}

}  // namespace attnsim
