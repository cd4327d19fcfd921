// numerics/model_math's projection kernels against linear_f32_ref at every instruction set this
// CPU runs: >= 4·10^8 adversarial products each (model_math_cases.hpp), bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "model_math_cases.hpp"

namespace attnsim {
namespace {

using namespace model_math_cases;

TEST(ModelMathLong, LinearKernelsEqualTheReference) {
  const Isa saved = active_isa();
  std::mt19937_64 rng(20261208);
  for (Isa isa : available_isas()) {
    if (isa == Isa::kScalar) continue;  // the reference itself
    set_isa(isa);
    std::size_t products = 0;
    for (int i = 0; products < std::size_t(400'000'000); ++i) {
      const std::size_t rows = 1 + rng() % 100, n = 1 + rng() % 200, k = 1 + rng() % 600;
      const Case c = make_case(rng, rows, n, k, rng() % 2, i % 5 == 0);
      ASSERT_EQ(check_case(c), rows * n);
      products += rows * n * k;
    }
    std::printf("%s: %zu products equal the reference's\n", isa_name(isa), products);
  }
  set_isa(saved);
}

}  // namespace
}  // namespace attnsim
