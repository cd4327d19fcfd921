// numerics/special_array's exp_exact_array over ALL 2^32 FP32 inputs, label full (not in CI: the
// libm reference takes about 90 s on 2 cores for the two bases; `ctest --test-dir build -L full`,
// tests/README.md): the AVX-512 FP64 exponential, rounded to FP32 with the lanes near an FP32
// rounding boundary sent to the reference, against float(std::exp(double(x))) and
// float(std::exp2(double(x))). Run when the kernel changes (0 differing blocks on 2026-11-27, this
// CPU: AVX-512 F/DQ/BW/VL). The unit test checks every upper half with six low halves and 2^20
// random inputs (numerics/special_array_test.cpp).
#include <gtest/gtest.h>

#include "numerics/special_array.hpp"
#include "tests/numerics/special_array_sweep.hpp"

namespace attnsim {
namespace {

using special_sweep::sweep;

TEST(SpecialArrayFull, ExpExact) {
  sweep(
      "exp exact", [](const float* x, std::size_t n, float* o) { exp_exact_array(x, n, o, false); },
      [](const float* x, std::size_t n, float* o) { exp_exact_array_ref(x, n, o, false); });
}
TEST(SpecialArrayFull, Exp2Exact) {
  sweep(
      "exp2 exact", [](const float* x, std::size_t n, float* o) { exp_exact_array(x, n, o, true); },
      [](const float* x, std::size_t n, float* o) { exp_exact_array_ref(x, n, o, true); });
}

}  // namespace
}  // namespace attnsim
