// numerics/special_array over ALL 2^32 FP32 inputs: the gathered ex2.approx{.ftz} and
// rcp.approx{.ftz} kernels against their `_ref` loops over the scalar models (which
// tests/hw/cvt_h100_long_test.cpp proves equal to the H100 on every input). Label: exhaustive.
#include <gtest/gtest.h>

#include "numerics/special_array.hpp"
#include "tests/numerics/special_array_sweep.hpp"

namespace attnsim {
namespace {

using special_sweep::sweep;

TEST(SpecialArrayAllInputs, Ex2ApproxFtz) {
  sweep(
      "ex2.approx.ftz", [](const float* x, std::size_t n, float* o) { ex2_approx_ftz_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { ex2_approx_ftz_array_ref(x, n, o); });
}
TEST(SpecialArrayAllInputs, Ex2Approx) {
  sweep(
      "ex2.approx", [](const float* x, std::size_t n, float* o) { ex2_approx_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { ex2_approx_array_ref(x, n, o); });
}
TEST(SpecialArrayAllInputs, RcpApproxFtz) {
  sweep(
      "rcp.approx.ftz", [](const float* x, std::size_t n, float* o) { rcp_approx_ftz_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { rcp_approx_ftz_array_ref(x, n, o); });
}
TEST(SpecialArrayAllInputs, RcpApprox) {
  sweep(
      "rcp.approx", [](const float* x, std::size_t n, float* o) { rcp_approx_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { rcp_approx_array_ref(x, n, o); });
}

}  // namespace
}  // namespace attnsim
