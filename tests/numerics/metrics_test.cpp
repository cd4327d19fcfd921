// numerics/metrics: each metric against hand-computed values, and the ULP histogram's ordinals.
#include "numerics/metrics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

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
  EXPECT_DOUBLE_EQ(m.rel_fro_amla, std::sqrt(2.0) / (3.0 + 1e-10));
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
  EXPECT_TRUE(std::isinf(b.rel_fro));
  EXPECT_DOUBLE_EQ(b.rel_fro_amla, 1e10);  // AMLA's epsilon keeps a zero reference finite
  // A tiny reference: the epsilon is visible (‖r‖ = 1e-10 halves the AMLA metric).
  const ErrorMetrics t = error_metrics(std::vector<double>{2e-10}, std::vector<double>{1e-10});
  EXPECT_DOUBLE_EQ(t.rel_fro, 1.0);
  EXPECT_DOUBLE_EQ(t.rel_fro_amla, 0.5);
  const ErrorMetrics c =
      error_metrics(std::vector<double>{std::nan(""), 1.0}, std::vector<double>{1.0, 1.0});
  EXPECT_EQ(c.nonfinite, 1u);
  EXPECT_TRUE(std::isnan(c.rel_fro));
  EXPECT_TRUE(std::isnan(c.cosine));
  EXPECT_TRUE(std::isnan(c.rel_fro_amla));
  EXPECT_TRUE(std::isnan(c.max_abs));
  const ErrorMetrics inf = error_metrics(std::vector<double>{1.0}, std::vector<double>{INFINITY});
  EXPECT_EQ(inf.nonfinite, 1u);
  EXPECT_TRUE(std::isnan(inf.rel_l1));
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
  EXPECT_EQ(ulp_distance(std::nan(""), 1.0, UlpFormat::kFp32),
            std::numeric_limits<std::uint64_t>::max());
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
  EXPECT_EQ(h.counts[3], 2u);   // 3-4
  EXPECT_EQ(h.counts[4], 2u);   // 5-8
  EXPECT_EQ(h.counts[5], 1u);   // 9-16
  EXPECT_EQ(h.counts[11], 1u);  // 513-1024
  EXPECT_EQ(h.nan_mismatch, 1u);
  EXPECT_EQ(h.max_ulp, 1000u);
  EXPECT_EQ(UlpHistogram::bucket_label(3), "3-4");
  EXPECT_EQ(UlpHistogram::bucket_label(11), "513-1024");
  EXPECT_EQ(UlpHistogram::bucket_label(UlpHistogram::kBuckets - 1), ">1048576");
  EXPECT_EQ(h.quantile_ulp(0.5), 4u);
}

// Independent oracle for the ordinal distance: decode every encoding of a small format from its
// fields with std::ldexp (no formats/ code), sort the finite values (+0 and -0 merged; Inf placed
// one past the largest finite, as an encoding it is), and compare ulp_distance with the difference
// of ranks. Exhaustive for the 8-bit formats (all 2^16 pairs), all neighbours plus 2^20 random
// pairs for the 16-bit ones. Inputs off the grid (a quarter step above a value) must round back
// to it, so the reference is rounded to the format first.
struct SmallFormat {
  UlpFormat fmt;
  int exp_bits, man_bits;
  bool fn;  // e4m3fn: no Inf, only S.1111.111 is NaN
};

std::vector<double> finite_values(const SmallFormat& f) {
  const int bias = (1 << (f.exp_bits - 1)) - 1, emax = (1 << f.exp_bits) - 1;
  std::vector<double> v;
  for (std::uint32_t b = 0; b < (1u << (1 + f.exp_bits + f.man_bits)); ++b) {
    const int m = int(b & ((1u << f.man_bits) - 1)), e = int((b >> f.man_bits) & unsigned(emax));
    const bool neg = (b >> (f.exp_bits + f.man_bits)) & 1;
    if (!f.fn && e == emax) continue;                               // IEEE Inf/NaN
    if (f.fn && e == emax && m == (1 << f.man_bits) - 1) continue;  // e4m3fn NaN
    const double mag = e == 0 ? std::ldexp(double(m), 1 - bias - f.man_bits)
                              : std::ldexp(double(m + (1 << f.man_bits)), e - bias - f.man_bits);
    if (mag == 0.0 && neg) continue;  // -0 shares +0's position
    v.push_back(neg ? -mag : mag);
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Metrics, UlpDistanceEqualsRankDifferenceOfDecodedEncodings) {
  const SmallFormat formats[] = {{UlpFormat::kE4m3fn, 4, 3, true},
                                 {UlpFormat::kE5m2, 5, 2, false},
                                 {UlpFormat::kFp16, 5, 10, false},
                                 {UlpFormat::kBf16, 8, 7, false}};
  std::mt19937_64 rng(42);
  for (const SmallFormat& f : formats) {
    const std::vector<double> v = finite_values(f);
    const std::int64_t n = std::int64_t(v.size());
    ASSERT_EQ(n % 2, 1) << "symmetric around a single zero";
    auto check = [&](std::int64_t i, std::int64_t j) {
      const std::uint64_t want = std::uint64_t(i > j ? i - j : j - i);
      ASSERT_EQ(ulp_distance(v[std::size_t(i)], v[std::size_t(j)], f.fmt), want)
          << ulp_format_name(f.fmt) << " " << v[std::size_t(i)] << " vs " << v[std::size_t(j)];
    };
    if (n <= 256) {
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) check(i, j);
    } else {
      for (std::int64_t i = 0; i + 1 < n; ++i) check(i, i + 1);
      for (int k = 0; k < (1 << 20); ++k)
        check(std::int64_t(rng() % std::uint64_t(n)), std::int64_t(rng() % std::uint64_t(n)));
    }
    // Off-grid values round to the nearest encoding first (a quarter step above v[i]).
    for (std::int64_t i = n / 2 + 1; i + 1 < n; i += (n > 256 ? 97 : 1)) {
      const double x = v[std::size_t(i)] + (v[std::size_t(i + 1)] - v[std::size_t(i)]) / 4;
      ASSERT_EQ(ulp_distance(x, v[std::size_t(i)], f.fmt), 0u) << x;
      ASSERT_EQ(ulp_distance(x, v[std::size_t(n / 2)], f.fmt), std::uint64_t(i - n / 2)) << x;
    }
    if (!f.fn) {  // Inf is one position past the largest finite value
      ASSERT_EQ(ulp_distance(INFINITY, v.back(), f.fmt), 1u);
      ASSERT_EQ(ulp_distance(-INFINITY, v.back(), f.fmt), std::uint64_t(n));  // M+1 + M, n = 2M+1
    }
  }
}

TEST(Metrics, ResultsDoNotDependOnSummationChunking) {
  // The metrics are defined by one sequential compensated pass; splitting the input into chunks
  // summed separately (as a threaded caller might) must not be needed, and the values must be
  // exactly those of a long-double re-summation rounded to double (within 1 ulp) for ill-
  // conditioned data.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> r(100000), o(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    r[i] = nd(rng) * std::ldexp(1.0, int(rng() % 40) - 20);
    o[i] = r[i] * (1.0 + 1e-3 * nd(rng));
  }
  const ErrorMetrics m = error_metrics(o, r);
  long double sd = 0, sr = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    sd += std::fabs((long double)o[i] - (long double)r[i]);
    sr += std::fabs((long double)r[i]);
  }
  EXPECT_NEAR(m.rel_l1, double(sd / sr), 4e-16 * m.rel_l1);
  std::reverse(o.begin(), o.end());
  std::reverse(r.begin(), r.end());
  const ErrorMetrics b = error_metrics(o, r);
  EXPECT_NEAR(b.rel_l1, m.rel_l1, 4e-16 * m.rel_l1);
  EXPECT_NEAR(b.rel_fro, m.rel_fro, 4e-16 * m.rel_fro);
  EXPECT_NEAR(b.cosine, m.cosine, 4e-16);
}

}  // namespace
}  // namespace attnsim

namespace attnsim {
namespace {

// ulp_p50 / ulp_p99 are exact order statistics (issue 10), not a histogram bucket's bound: for
// distances 0..99 the 50th value is 49 and the 99th is 98 (the buckets would say 64 and 128).
TEST(Metrics, UlpOrderStatisticsAreExact) {
  std::vector<double> r, o;
  for (int d = 99; d >= 0; --d) {  // any order
    r.push_back(1.0);
    o.push_back(1.0 + d * 0x1p-23);
  }
  const UlpHistogram h = ulp_histogram(o.data(), r.data(), r.size(), UlpFormat::kFp32);
  EXPECT_EQ(h.p50, 49u);
  EXPECT_EQ(h.p99, 98u);
  EXPECT_EQ(h.quantile_ulp(0.5), 64u);  // the bucket bound, kept for histogram readers
  // Smallest d with at least ceil(q n) pairs <= d: n = 3 gives the 2nd and the 3rd value.
  const double r3[3] = {1, 1, 1}, o3[3] = {1 + 7 * 0x1p-23, 1, 1 + 3 * 0x1p-23};
  const UlpHistogram h3 = ulp_histogram(o3, r3, 3, UlpFormat::kFp32);
  EXPECT_EQ(h3.p50, 3u);
  EXPECT_EQ(h3.p99, 7u);
  const UlpHistogram h0 = ulp_histogram(o3, r3, 0, UlpFormat::kFp32);
  EXPECT_EQ(h0.p50, 0u);
  EXPECT_EQ(h0.p99, 0u);
}

// A NaN output never reads as close: every NaN pair (one side or both) is kUlpNanMismatch in the
// order statistics.
TEST(Metrics, NanOutputsNeverReadZeroUlp) {
  const double nan = std::nan("");
  std::vector<double> r(100, 1.0), o(100, nan);
  for (UlpFormat f : {UlpFormat::kFp64, UlpFormat::kFp32, UlpFormat::kBf16, UlpFormat::kFp16,
                      UlpFormat::kE4m3fn, UlpFormat::kE5m2}) {
    const UlpHistogram h = ulp_histogram(o.data(), r.data(), r.size(), f);
    EXPECT_EQ(h.p50, kUlpNanMismatch);
    EXPECT_EQ(h.p99, kUlpNanMismatch);
    EXPECT_EQ(h.nan_mismatch, 100u);
  }
  const UlpHistogram both = ulp_histogram(o.data(), o.data(), o.size(), UlpFormat::kFp32);
  EXPECT_EQ(both.p50, kUlpNanMismatch);
  // One NaN in 100 moves p99 (the 99th value), not p50.
  std::vector<double> one(100, 1.0);
  one[17] = nan;
  const UlpHistogram h1 = ulp_histogram(one.data(), r.data(), r.size(), UlpFormat::kFp32);
  EXPECT_EQ(h1.p50, 0u);
  EXPECT_EQ(h1.p99, 0u);
  one[18] = nan;
  EXPECT_EQ(ulp_histogram(one.data(), r.data(), r.size(), UlpFormat::kFp32).p99, kUlpNanMismatch);
  // fp64 distances beyond 2^63 stay below the NaN sentinel.
  const double big[1] = {-1e308}, big_ref[1] = {1e308};
  EXPECT_LT(ulp_histogram(big, big_ref, 1, UlpFormat::kFp64).p50, kUlpNanMismatch);
}

// An output equal to its reference has cosine exactly 1, at every size and scale (one square root
// of the product; two roots can miss by an ulp: 1.0000000000000002 was printed before).
TEST(Metrics, CosineOfAnOutputWithItselfIsExactlyOne) {
  std::uint64_t z = 12345;
  auto next = [&] {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    return double(std::int64_t(z >> 11)) * 0x1p-52 - 1.0;
  };
  for (double scale : {1.0, 1e-150, 1e-160, 1e150, 3.7}) {  // squares stay finite and nonzero
    for (std::size_t n : {1u, 2u, 3u, 17u, 100u, 4097u}) {
      std::vector<double> x(n);
      for (auto& v : x) v = next() * scale;
      const ErrorMetrics m = error_metrics(x, x);
      EXPECT_EQ(m.cosine, 1.0) << "n " << n << " scale " << scale;
      std::vector<double> neg(x);
      for (auto& v : neg) v = -v;
      EXPECT_EQ(error_metrics(neg, x).cosine, -1.0) << "n " << n << " scale " << scale;
    }
  }
}

// ulp_at: the spacing of each format at a magnitude, from the field formula (significand bits p,
// smallest normal exponent), written out as constants.
TEST(Metrics, UlpAtIsTheFormatsSpacing) {
  EXPECT_EQ(ulp_at(1.0, UlpFormat::kFp32), 0x1p-23);
  EXPECT_EQ(ulp_at(1.999, UlpFormat::kFp32), 0x1p-23);
  EXPECT_EQ(ulp_at(2.0, UlpFormat::kFp32), 0x1p-22);
  EXPECT_EQ(ulp_at(-3.0, UlpFormat::kBf16), 0x1p-6);  // 2^1 * 2^-7
  EXPECT_EQ(ulp_at(1.0, UlpFormat::kFp16), 0x1p-10);
  EXPECT_EQ(ulp_at(0.0, UlpFormat::kFp16), 0x1p-24);     // subnormal spacing
  EXPECT_EQ(ulp_at(1e-30, UlpFormat::kFp32), 0x1p-123);  // 1e-30 = 1.26 * 2^-100
  EXPECT_EQ(ulp_at(1e-40, UlpFormat::kFp32), 0x1p-149);  // subnormal
  EXPECT_EQ(ulp_at(1.0, UlpFormat::kFp64), 0x1p-52);
  EXPECT_EQ(ulp_at(1.0, UlpFormat::kE4m3fn), 0x1p-3);
  EXPECT_EQ(ulp_at(1.0, UlpFormat::kE5m2), 0x1p-2);
}

// The issue-28 case: an output element near zero whose golden value has the other sign is millions
// of FP32 encodings away, while its error is a fraction of the row's storage step; the row-scaled
// figure says the latter.
TEST(Metrics, RowScaledUlpIsMeaningfulNearZero) {
  // One row of 4: magnitude 1 (spacing 2^-23 in FP32).
  const std::vector<double> r{1.0, 0.5, 1e-12, -0.25};
  const std::vector<double> o{1.0 + 0x1p-23, 0.5, -1e-12, -0.25 - 0x1p-24};
  const UlpHistogram h = ulp_histogram(o.data(), r.data(), r.size(), UlpFormat::kFp32);
  EXPECT_GT(h.max_ulp, 1000000u);  // -1e-12 vs 1e-12: far apart in encodings
  const RowUlpStats st = row_scaled_ulp(o.data(), r.data(), r.size(), 4, UlpFormat::kFp32);
  EXPECT_DOUBLE_EQ(st.max, 1.0);              // the first element, one step at the row's scale
  EXPECT_DOUBLE_EQ(st.p50, 2e-12 / 0x1p-23);  // sorted: 0, 2e-12/u, 0.5, 1 -> 2nd
  EXPECT_DOUBLE_EQ(st.p99, 1.0);
  // Two rows of different scale are measured against their own magnitude.
  const std::vector<double> r2{1.0, 0.0, 1024.0, 0.0};
  const std::vector<double> o2{1.0 + 0x1p-23, 0.0, 1024.0 + 0x1p-13, 0.0};
  const RowUlpStats s2 = row_scaled_ulp(o2.data(), r2.data(), r2.size(), 2, UlpFormat::kFp32);
  EXPECT_DOUBLE_EQ(s2.max, 1.0);
  // NaN on either side is +inf; empty is all zero.
  const std::vector<double> o3{std::nan(""), 0.5, 1e-12, -0.25};
  EXPECT_TRUE(std::isinf(row_scaled_ulp(o3.data(), r.data(), 4, 4, UlpFormat::kFp32).max));
  const RowUlpStats e = row_scaled_ulp(nullptr, nullptr, 0, 4, UlpFormat::kFp32);
  EXPECT_EQ(e.max, 0.0);
  EXPECT_EQ(e.p99, 0.0);
}

}  // namespace
}  // namespace attnsim
