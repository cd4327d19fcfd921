// The all-2^32 sweeps of numerics/convert_array's kernels against their `_ref` loops, shared by
// convert_array_long_test.cpp (label exhaustive) and convert_array_full_test.cpp (label full).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"

namespace attnsim::convert_sweep {

// Runs check(x, n) on every block of 2^16 consecutive FP32 bit patterns, on every core; check
// returns the block's mismatches.
template <class Check>
inline void sweep_blocks(const char* name, const Check& check) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      bad += check(x.data(), x.size());
    }
  }
  EXPECT_EQ(bad.load(), 0u) << name << " over all 2^32 inputs";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-30s all 2^32 FP32 inputs (%s), %llu mismatches, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

template <class Out>
inline void encode_vs_ref(Encoding e, Round r, const char* name) {
  const Policy p{r, Overflow::kSaturate, NanEncoding::kIeee};
  sweep_blocks(name, [&](const float* x, std::size_t n) {
    thread_local std::vector<Out> got, want;
    got.resize(n);
    want.resize(n);
    encode_array(e, x, n, got.data(), p);
    encode_array_ref(e, x, n, want.data(), p);
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += got[i] != want[i];
    return bad;
  });
}

inline void int_vs_ref(Round r, int bits, const char* name) {
  sweep_blocks(name, [&](const float* x, std::size_t n) {
    thread_local std::vector<std::int32_t> got, want;
    got.resize(n);
    want.resize(n);
    round_to_int_array(x, n, got.data(), r, bits);
    round_to_int_array_ref(x, n, want.data(), r, bits);
    return std::uint64_t(std::memcmp(got.data(), want.data(), n * 4) != 0 ? 1 : 0);
  });
}

}  // namespace attnsim::convert_sweep
