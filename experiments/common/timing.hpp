// Wall-clock timing for the benchmarks (`attnsim bench`, `attnsim mma --bench`).
#pragma once

#include <chrono>

namespace attnsim {

// Seconds per call of f, repeated until at least `min_s` have passed and `min_reps` calls were
// made (after one warm-up call).
template <class F>
double time_per_call(F&& f, double min_s, int min_reps = 1) {
  f();
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double el = 0;
  do {
    f();
    ++reps;
    el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (el < min_s || reps < min_reps);
  return el / reps;
}

}  // namespace attnsim
