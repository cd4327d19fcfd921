// numerics/metrics: each metric against hand-computed values, and the ULP histogram's ordinals.
#include "numerics/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace attnsim {
namespace {

TEST(Metrics, HandComputed) {
  const std::vector<double> r{1.0, -2.0, 2.0, 0.0};
  const std::vector<double> o{1.0, -1.0, 2.0, 1.0};
  const ErrorMetrics m = error_metrics(o, r);
  // diff = (0, 1, 0, 1); Σ|d| = 2, Σ|r| = 5, Σd² = 2, ‖r‖ = 3, ‖o‖ = sqrt(7), o·r = 1 + 2 + 4 = 7.
  EXPECT_DOUBLE_EQ(m.rel_l1, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(m.rmse, std::sqrt(2.0 / 4.0));
  EXPECT_DOUBLE_EQ(m.rel_fro, std::sqrt(2.0) / 3.0);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(m.cosine, 7.0 / (std::sqrt(7.0) * 3.0));
  EXPECT_EQ(m.count, 4u);
}

TEST(Metrics, ZeroAndNonFiniteRules) {
  const std::vector<double> z{0.0, 0.0};
  const ErrorMetrics a = error_metrics(z, z);
  EXPECT_EQ(a.cosine, 1.0);
  EXPECT_EQ(a.rel_l1, 0.0);
  EXPECT_EQ(a.rel_fro, 0.0);
  const ErrorMetrics b = error_metrics(std::vector<double>{1.0, 0.0}, z);
  EXPECT_EQ(b.cosine, 0.0);
  EXPECT_TRUE(std::isinf(b.rel_l1));
  const ErrorMetrics c = error_metrics(std::vector<double>{std::nan(""), 1.0}, std::vector<double>{1.0, 1.0});
  EXPECT_EQ(c.nonfinite, 1u);
  EXPECT_TRUE(std::isnan(c.rel_fro));
  EXPECT_TRUE(std::isnan(c.cosine));
  const ErrorMetrics e = error_metrics(std::vector<double>{}, std::vector<double>{});
  EXPECT_EQ(e.cosine, 1.0);
  EXPECT_EQ(e.rmse, 0.0);
}

TEST(Metrics, CompensatedSumsAreExactForCancellingTerms) {
  // 1e16 + 1 - 1e16 loses the 1 in plain FP64 summation; Neumaier keeps it.
  const std::vector<double> r{1e16, 1.0, -1e16};
  const std::vector<double> o{1e16, 2.0, -1e16};
  EXPECT_DOUBLE_EQ(error_metrics(o, r).rmse, std::sqrt(1.0 / 3.0));
}

TEST(Metrics, UlpDistanceCountsEncodings) {
  // Adjacent bf16 values 1.0 (0x3F80) and 1.0078125 (0x3F81).
  EXPECT_EQ(ulp_distance(1.0, 1.0078125, UlpFormat::kBf16), 1u);
  EXPECT_EQ(ulp_distance(1.0, 1.0 + 0x1p-23, UlpFormat::kFp32), 1u);
  EXPECT_EQ(ulp_distance(1.0, 1.0 + 0x1p-23, UlpFormat::kBf16), 0u);  // both round to 1.0 in bf16
  // Across zero: smallest e4m3fn subnormals +2^-9 and -2^-9 are 2 apart (+0/-0 share 0).
  EXPECT_EQ(ulp_distance(0x1p-9, -0x1p-9, UlpFormat::kE4m3fn), 2u);
  EXPECT_EQ(ulp_distance(0.0, -0.0, UlpFormat::kFp16), 0u);
  // 448 and 416 are neighbours in e4m3fn; values past 448 clamp to it.
  EXPECT_EQ(ulp_distance(448.0, 416.0, UlpFormat::kE4m3fn), 1u);
  EXPECT_EQ(ulp_distance(1e9, 448.0, UlpFormat::kE4m3fn), 0u);
  EXPECT_EQ(ulp_distance(std::nan(""), 1.0, UlpFormat::kFp32), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(ulp_distance(std::nan(""), std::nan(""), UlpFormat::kFp32), 0u);
}

TEST(Metrics, UlpHistogramBuckets) {
  std::vector<double> r, o;
  for (int d : {0, 1, 2, 3, 4, 5, 8, 9, 1000}) {
    r.push_back(1.0);
    o.push_back(1.0 + d * 0x1p-23);
  }
  r.push_back(1.0);
  o.push_back(std::nan(""));
  const UlpHistogram h = ulp_histogram(o.data(), r.data(), r.size(), UlpFormat::kFp32);
  EXPECT_EQ(h.counts[0], 1u);
  EXPECT_EQ(h.counts[1], 1u);
  EXPECT_EQ(h.counts[2], 1u);
  EXPECT_EQ(h.counts[3], 2u);  // 3-4
  EXPECT_EQ(h.counts[4], 2u);  // 5-8
  EXPECT_EQ(h.counts[5], 1u);  // 9-16
  EXPECT_EQ(h.counts[11], 1u); // 513-1024
  EXPECT_EQ(h.nan_mismatch, 1u);
  EXPECT_EQ(h.max_ulp, 1000u);
  EXPECT_EQ(UlpHistogram::bucket_label(3), "3-4");
  EXPECT_EQ(UlpHistogram::bucket_label(11), "513-1024");
  EXPECT_EQ(UlpHistogram::bucket_label(UlpHistogram::kBuckets - 1), ">1048576");
  EXPECT_EQ(h.quantile_ulp(0.5), 4u);
}

}  // namespace
}  // namespace attnsim
