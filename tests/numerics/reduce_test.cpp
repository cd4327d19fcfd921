// numerics/reduce: SageAttention's smooth-V sum order (MeanScaleKernel + blockReduceSum) against
// its second formulation, on random and adversarial sets (cancellation, magnitudes 2^±60, every
// length multiple of 8 up to 4200 so the per-thread loop wraps past 2048 tokens), and against
// orders it must differ from.
#include "numerics/reduce.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace attnsim {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(SageMeanScaleSum, FastEqualsRefOnRandomAndAdversarialSets) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd;
  int checked = 0;
  for (int n = 8; n <= 4200; n += 8) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (auto& v : x) {
        if (kind == 0) v = nd(rng);
        if (kind == 1) v = std::ldexp(nd(rng), int(rng() % 121) - 60);  // wide magnitudes
        if (kind == 2) v = (rng() & 1 ? 1.0f : -1.0f) * (1.0f + 0x1p-20f * float(rng() % 8));
      }
      ASSERT_TRUE(same_bits(sage_mean_scale_sum(x.data(), n), sage_mean_scale_sum_ref(x.data(), n)))
          << "n " << n << " kind " << kind;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 525 * 3);
}

TEST(SageMeanScaleSum, IsNotASequentialSum) {
  // 1 + 2^-24 + ... : a sequential FP32 sum loses every 2^-24; the thread/butterfly order adds the
  // small terms among themselves first in lanes other than the first.
  std::vector<float> x(2048, 0x1p-24f);
  x[0] = 1.0f;
  float seq = 0;
  for (float v : x) seq += v;
  EXPECT_EQ(seq, 1.0f);
  const float s = sage_mean_scale_sum(x.data(), 2048);
  EXPECT_GT(s, 1.0f);
  EXPECT_TRUE(same_bits(s, sage_mean_scale_sum_ref(x.data(), 2048)));
}

}  // namespace
}  // namespace attnsim
