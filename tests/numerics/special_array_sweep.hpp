// Test helper: a special_array kernel against its `_ref` over all 2^32 FP32 inputs on every core,
// shared by the exhaustive and the full sweeps (special_array_long_test.cpp,
// special_array_full_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/float32.hpp"
#include "numerics/isa.hpp"

namespace attnsim::special_sweep {

using ArrayFn = void (*)(const float*, std::size_t, float*);

inline void sweep(const char* name, ArrayFn fast, ArrayFn ref) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16), got(1u << 16), want(1u << 16);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      fast(x.data(), x.size(), got.data());
      ref(x.data(), x.size(), want.data());
      bad += std::memcmp(got.data(), want.data(), x.size() * 4) != 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(bad.load(), 0u) << name << ": blocks of 2^16 inputs that differ";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-16s all 2^32 FP32 inputs (%s), %llu blocks differ, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

}  // namespace attnsim::special_sweep
