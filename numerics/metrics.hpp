// Error metrics of an output against a reference (FP64 golden), as the papers report them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// All sums run sequentially in index order with Neumaier compensation in FP64, so a metric does
// not depend on thread count or platform.
//   cosine        Σ o·r / (‖o‖ ‖r‖)   SageAttention2 A.7 "CosSim"; 1 if both are zero, 0 if one is
//   rel_l1        Σ|o − r| / Σ|r|     SageAttention2 A.7 "Relative L1"; 0 if both are zero, +inf
//                                     if only r is
//   rmse          sqrt(Σ(o − r)² / n) SageAttention2 A.7 "RMSE"
//   rel_fro       ‖o − r‖_F / ‖r‖_F   same zero rules as rel_l1
//   rel_fro_amla  ‖o − r‖_F / (‖r‖_F + 1e-10), as AMLA §5.1 prints it (arXiv 2509.25224: "ε = 10^-10 for
//                 numerical stability"); finite for a zero reference, and below rel_fro by a
//                 relative 1e-10/‖r‖, so the two differ visibly only for tiny references
//   max_abs       max |o − r|
// Any NaN in o or r makes every metric NaN and is counted in `nonfinite` (Inf likewise).
// An empty input gives cosine 1 and zeros elsewhere. The cosine is Σo·r / sqrt(Σo² Σr²) (the sums
// scaled by powers of two, so the product neither overflows nor underflows), clamped to [-1, 1]:
// with one square root of the product, not a product of two roots, an output equal to its
// reference gives exactly 1, since sqrt(RN(s²)) = s in binary floating point (the two roots'
// product can be 1 ulp off).
struct ErrorMetrics {
  double cosine = 1.0;
  double rel_l1 = 0.0;
  double rmse = 0.0;
  double rel_fro = 0.0;
  double rel_fro_amla = 0.0;
  double max_abs = 0.0;
  std::size_t count = 0;
  std::size_t nonfinite = 0;
};

ErrorMetrics error_metrics(const double* out, const double* ref, std::size_t n);
ErrorMetrics error_metrics(const std::vector<double>& out, const std::vector<double>& ref);

// Formats a ULP histogram can be measured in.
enum class UlpFormat { kFp64, kFp32, kBf16, kFp16, kE4m3fn, kE5m2 };
UlpFormat parse_ulp_format(const std::string& name);  // fp64 fp32 bf16 fp16 e4m3fn e5m2
std::string ulp_format_name(UlpFormat f);

// Distance in units in the last place of `fmt`: both values are rounded to the format (RNE,
// overflow to Inf, or to max for e4m3fn) and the distance is the difference of their ordinal
// positions on the format's number line (+0 and −0 share position 0; adjacent encodings are 1
// apart, across zero too; ulp_distance puts two NaNs 0 apart). The histogram's buckets: 0, 1, 2,
// 3–4, 5–8, ..., 2^19+1–2^20, > 2^20; plus `nan_mismatch` for a pair with a NaN on either side
// (against a reference, a NaN measures nothing, even where the reference is NaN too).
// In the exact order statistics p50 and p99 such a pair counts as kUlpNanMismatch, above every
// distance between two non-NaN values (fp64 distances, which can pass 2^63 between huge values of
// opposite signs, saturate one below it): an all-NaN output never reads as close. 2^63 - 1 also
// fits the int64 columns of results files.
inline constexpr std::uint64_t kUlpNanMismatch = 0x7fffffffffffffffull;

struct UlpHistogram {
  UlpFormat format = UlpFormat::kFp32;
  std::vector<std::uint64_t> counts;  // bucket k as labelled by bucket_label(k)
  std::uint64_t nan_mismatch = 0;  // pairs with a NaN on either side
  std::uint64_t max_ulp = 0;       // over the pairs without NaN
  // Exact order statistics of the n distances (NaN mismatches included, see above): the smallest
  // d such that at least ceil(q n) pairs are at most d apart, q = 0.5 and 0.99; 0 when n = 0.
  std::uint64_t p50 = 0, p99 = 0;
  static constexpr int kBuckets = 23;
  static std::string bucket_label(int k);
  // Smallest bucket upper bound that covers fraction q of the finite pairs (an upper bound of the
  // order statistic from the histogram alone; p50 and p99 above are exact).
  std::uint64_t quantile_ulp(double q) const;
};

UlpHistogram ulp_histogram(const double* out, const double* ref, std::size_t n, UlpFormat fmt);
// Distance of one pair (UINT64_MAX if exactly one side is NaN).
std::uint64_t ulp_distance(double a, double b, UlpFormat fmt);
// ulp_histogram in two steps, for callers that spread the per-element work over threads (the
// result is the same whatever the split): ulp_distances writes d[i] = ulp_distance(out[i], ref[i])
// for each i, UINT64_MAX where either side is NaN (the pairs counted as nan_mismatch), each
// element on its own; ulp_histogram_of counts and ranks all n of them (reordering d).
void ulp_distances(const double* out, const double* ref, std::size_t n, UlpFormat fmt,
                   std::uint64_t* d);
UlpHistogram ulp_histogram_of(std::uint64_t* d, std::size_t n, UlpFormat fmt);

// The spacing of `fmt`'s values at `magnitude`: 2^(floor(log2 |magnitude|) − (p − 1)) with p the
// significand bits (the subnormal spacing below the smallest normal, and for 0).
double ulp_at(double magnitude, UlpFormat fmt);

// ULP errors that stay meaningful near zero: |o − r| / ulp_at(max |r| over the element's row, fmt),
// rows of `row_len` consecutive elements (an attention output row, head_dim_v values). The ULP
// distance above counts encodings between o and r, so an output near zero (a row's channels
// cancel) is millions of encodings from a reference of the other sign while the error is tiny
// at the row's scale; here an error of one storage step at the row's largest value is 1 whatever
// the element's own size. A NaN on either side or an infinite difference counts as +inf.
// p50/p99: exact order statistics (the rank rule of UlpHistogram); all 0 when n = 0.
struct RowUlpStats {
  double p50 = 0, p99 = 0, max = 0;
};
RowUlpStats row_scaled_ulp(const double* out, const double* ref, std::size_t n, std::size_t row_len,
                           UlpFormat fmt);
// row_scaled_ulp in two steps, as ulp_histogram above: row_scaled_errors writes each element's
// error (rows of row_len from out[0]: a caller that splits the work starts each part on a row
// boundary; n = 0 or row_len = 0 writes nothing), row_ulp_stats_of ranks all n (reordering err).
void row_scaled_errors(const double* out, const double* ref, std::size_t n, std::size_t row_len,
                       UlpFormat fmt, double* err);
RowUlpStats row_ulp_stats_of(double* err, std::size_t n);

}  // namespace attnsim
