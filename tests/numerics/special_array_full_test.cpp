// numerics/special_array's exp_exact_array over ALL 2^32 FP32 inputs, label full (not in CI: the
// libm reference takes about 90 s on 2 cores for the two bases; `ctest --test-dir build -L full`,
// tests/README.md): the AVX-512 FP64 exponential, rounded to FP32 with the lanes near an FP32
// rounding boundary sent to the reference, against float(std::exp(double(x))) and
// float(std::exp2(double(x))). Run when the kernel changes (0 differing blocks on 2026-11-27, this
// CPU: AVX-512 F/DQ/BW/VL). The unit test checks every upper half with six low halves and 2^20
// random inputs (numerics/special_array_test.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/float32.hpp"
#include "numerics/isa.hpp"
#include "numerics/special_array.hpp"

namespace attnsim {
namespace {

void sweep(const char* name, bool base2) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16), got(1u << 16), want(1u << 16);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      exp_exact_array(x.data(), x.size(), got.data(), base2);
      exp_exact_array_ref(x.data(), x.size(), want.data(), base2);
      bad += std::memcmp(got.data(), want.data(), x.size() * 4) != 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(bad.load(), 0u) << name << ": blocks of 2^16 inputs that differ";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-16s all 2^32 FP32 inputs (%s), %llu blocks differ, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

TEST(SpecialArrayFull, ExpExact) { sweep("exp exact", false); }
TEST(SpecialArrayFull, Exp2Exact) { sweep("exp2 exact", true); }

}  // namespace
}  // namespace attnsim
