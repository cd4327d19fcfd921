// numerics/outlier_transforms: the random Hadamard rotation by butterflies against the explicit
// matrix product, orthogonality (Q·Kᵀ kept), and SmoothQuant's migration keeping Q·Kᵀ while
// equalizing the channel ranges.
#include "numerics/outlier_transforms.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace attnsim {
namespace {

TEST(Hadamard, ButterflyEqualsMatrixProduct) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd;
  for (int d : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    for (std::uint64_t seed : {1u, 2u, 99u}) {
      std::vector<float> x(std::size_t(64) * d);
      // bf16-like values (8-bit mantissas): every FP64 sum is exact in both orders.
      for (auto& v : x) v = std::ldexp(std::round(nd(rng) * 128.0f), -7);
      std::vector<float> a = x, b = x;
      hadamard_rotate(a.data(), 64, d, seed);
      hadamard_rotate_ref(b.data(), 64, d, seed);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "d " << d << " seed " << seed;
    }
  }
}

TEST(Hadamard, KeepsDotProductsAndSpreadsAnOutlier) {
  const int d = 64;
  std::vector<float> q(d, 0.0f), k(d, 0.0f);
  q[5] = 100.0f;  // one outlier channel
  q[9] = 1.0f;
  k[5] = 0.5f;
  k[9] = -2.0f;
  const double dot0 = 100.0 * 0.5 - 2.0;
  hadamard_rotate(q.data(), 1, d, 7);
  hadamard_rotate(k.data(), 1, d, 7);
  double dot = 0, amax = 0;
  for (int c = 0; c < d; ++c) {
    dot += double(q[c]) * k[c];
    amax = std::max(amax, std::fabs(double(q[c])));
  }
  EXPECT_NEAR(dot, dot0, 1e-4);
  EXPECT_LT(amax, 101.0 / 8 + 1e-3);  // 100 spread over 64 channels: |x| <= 101/sqrt(64)
  EXPECT_THROW(hadamard_rotate(q.data(), 1, 48, 7), std::invalid_argument);
}

TEST(SmoothQuant, KeepsDotProductsAndBalancesRanges) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> nd;
  const int d = 16, lq = 20, lk = 30;
  std::vector<float> q(std::size_t(lq) * d), k(std::size_t(lk) * d);
  for (auto& v : q) v = nd(rng);
  for (auto& v : k) v = nd(rng);
  for (int t = 0; t < lk; ++t) k[std::size_t(t) * d + 3] *= 50.0f;  // an outlier channel of K
  std::vector<float> q2 = q, k2 = k;
  smoothquant_migrate(q2.data(), lq, k2.data(), lk, d, 0.5);
  for (int i = 0; i < lq; ++i)
    for (int j = 0; j < lk; ++j) {
      double a = 0, b = 0;
      for (int c = 0; c < d; ++c) {
        a += double(q[std::size_t(i) * d + c]) * k[std::size_t(j) * d + c];
        b += double(q2[std::size_t(i) * d + c]) * k2[std::size_t(j) * d + c];
      }
      EXPECT_NEAR(a, b, 1e-4 * (1 + std::fabs(a)));
    }
  // alpha = 0.5: afterwards max|Q_c| = max|K_c| for every channel (up to FP32 rounding).
  for (int c = 0; c < d; ++c) {
    double aq = 0, ak = 0;
    for (int t = 0; t < lq; ++t) aq = std::max(aq, std::fabs(double(q2[std::size_t(t) * d + c])));
    for (int t = 0; t < lk; ++t) ak = std::max(ak, std::fabs(double(k2[std::size_t(t) * d + c])));
    EXPECT_NEAR(aq / ak, 1.0, 1e-6) << c;
  }
}

}  // namespace
}  // namespace attnsim
