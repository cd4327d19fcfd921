// Error metrics of an output against a reference (see metrics.hpp).
#include "numerics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>

#include "formats/float16.hpp"
#include "formats/float8.hpp"

namespace attnsim {

namespace {

// Neumaier's improved Kahan summation.
struct Sum {
  double s = 0.0, c = 0.0;
  void add(double x) {
    const double t = s + x;
    c += std::fabs(s) >= std::fabs(x) ? (s - t) + x : (x - t) + s;
    s = t;
  }
  double value() const { return s + c; }
};

double ratio(double num, double den) {
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace

ErrorMetrics error_metrics(const double* out, const double* ref, std::size_t n) {
  ErrorMetrics m;
  m.count = n;
  Sum dot, oo, rr, abs_diff, abs_ref, sq_diff;
  for (std::size_t i = 0; i < n; ++i) {
    const double o = out[i], r = ref[i];
    if (!std::isfinite(o) || !std::isfinite(r)) {
      ++m.nonfinite;
      continue;
    }
    const double d = o - r;
    dot.add(o * r);
    oo.add(o * o);
    rr.add(r * r);
    abs_diff.add(std::fabs(d));
    abs_ref.add(std::fabs(r));
    sq_diff.add(d * d);
    m.max_abs = std::max(m.max_abs, std::fabs(d));
  }
  if (m.nonfinite > 0) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m.cosine = m.rel_l1 = m.rmse = m.rel_fro = m.rel_fro_amla = m.max_abs = nan;
    return m;
  }
  if (n == 0) return m;
  const double no = std::sqrt(oo.value()), nr = std::sqrt(rr.value());
  if (no == 0.0 && nr == 0.0) {
    m.cosine = 1.0;
  } else if (no == 0.0 || nr == 0.0) {
    m.cosine = 0.0;
  } else {
    // One root of the product of the two sums, each first scaled by a power of two into [1, 4)
    // (exact; their exponents' sum made even so that the root's scale is a power of two too): no
    // overflow or underflow, and exactly 1 for o == r (metrics.hpp).
    int eo = std::ilogb(oo.value());
    const int er = std::ilogb(rr.value());
    if ((eo + er) % 2 != 0) --eo;
    const double a = std::ldexp(oo.value(), -eo), b = std::ldexp(rr.value(), -er);
    const double c = std::ldexp(dot.value(), -(eo + er) / 2) / std::sqrt(a * b);
    m.cosine = std::clamp(c, -1.0, 1.0);
  }
  m.rel_l1 = ratio(abs_diff.value(), abs_ref.value());
  m.rmse = std::sqrt(sq_diff.value() / double(n));
  m.rel_fro = ratio(std::sqrt(sq_diff.value()), nr);
  m.rel_fro_amla = std::sqrt(sq_diff.value()) / (nr + 1e-10);  // AMLA §5.1's epsilon
  return m;
}

ErrorMetrics error_metrics(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) throw std::invalid_argument("error_metrics: sizes differ");
  return error_metrics(out.data(), ref.data(), out.size());
}

UlpFormat parse_ulp_format(const std::string& name) {
  if (name == "fp64") return UlpFormat::kFp64;
  if (name == "fp32") return UlpFormat::kFp32;
  if (name == "bf16") return UlpFormat::kBf16;
  if (name == "fp16") return UlpFormat::kFp16;
  if (name == "e4m3fn") return UlpFormat::kE4m3fn;
  if (name == "e5m2") return UlpFormat::kE5m2;
  throw std::invalid_argument("unknown ULP format '" + name +
                              "' (expected fp64, fp32, bf16, fp16, e4m3fn or e5m2)");
}

std::string ulp_format_name(UlpFormat f) {
  switch (f) {
    case UlpFormat::kFp64:
      return "fp64";
    case UlpFormat::kFp32:
      return "fp32";
    case UlpFormat::kBf16:
      return "bf16";
    case UlpFormat::kFp16:
      return "fp16";
    case UlpFormat::kE4m3fn:
      return "e4m3fn";
    case UlpFormat::kE5m2:
      return "e5m2";
  }
  return "?";
}

namespace {

// Signed ordinal of an encoding: magnitude bits, negated for negative values, so that adjacent
// values differ by 1 and ±0 both map to 0.
template <class Fmt>
std::int64_t ordinal(double x, bool* nan) {
  // e4m3fn has no Inf: out-of-range values clamp to ±max so that the distance stays finite.
  constexpr Policy kFn{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  const auto bits = encode<Fmt>(x, Fmt::kHasInf ? kCudaRn : kFn);
  *nan = is_nan_bits<Fmt>(bits);
  const std::int64_t mag = std::int64_t(std::uint64_t(bits) & Fmt::kAbsMask);
  return (std::uint64_t(bits) & Fmt::kSignBit) ? -mag : mag;
}

template <class Fmt>
std::uint64_t distance(double a, double b) {
  bool na = false, nb = false;
  const std::int64_t oa = ordinal<Fmt>(a, &na), ob = ordinal<Fmt>(b, &nb);
  if (na || nb) return na && nb ? 0 : std::numeric_limits<std::uint64_t>::max();
  return oa > ob ? std::uint64_t(oa) - std::uint64_t(ob) : std::uint64_t(ob) - std::uint64_t(oa);
}

int bucket_of(std::uint64_t d) {
  if (d <= 2) return int(d);
  // 3-4 -> 3, 5-8 -> 4, ..., (2^(k-2), 2^(k-1)] -> k
  int k = 3;
  std::uint64_t hi = 4;
  while (d > hi && k < UlpHistogram::kBuckets - 1) {
    hi <<= 1;
    ++k;
  }
  return d > hi ? UlpHistogram::kBuckets - 1 : k;
}

}  // namespace

std::uint64_t ulp_distance(double a, double b, UlpFormat fmt) {
  switch (fmt) {
    case UlpFormat::kFp64:
      return distance<fp64>(a, b);
    case UlpFormat::kFp32:
      return distance<fp32>(a, b);
    case UlpFormat::kBf16:
      return distance<bf16>(a, b);
    case UlpFormat::kFp16:
      return distance<fp16>(a, b);
    case UlpFormat::kE4m3fn:
      return distance<e4m3fn>(a, b);
    case UlpFormat::kE5m2:
      return distance<e5m2>(a, b);
  }
  return 0;
}

std::string UlpHistogram::bucket_label(int k) {
  if (k <= 2) return std::to_string(k);
  // Appended piecewise: `"a" + to_string(..)` trips GCC 12's false -Wrestrict (GCC PR 105329).
  std::string s;
  if (k == kBuckets - 1) {
    s = ">";
    s += std::to_string(1ull << (kBuckets - 3));
    return s;
  }
  s = std::to_string((1ull << (k - 2)) + 1);
  s += '-';
  s += std::to_string(1ull << (k - 1));
  return s;
}

std::uint64_t UlpHistogram::quantile_ulp(double q) const {
  std::uint64_t total = 0;
  for (auto c : counts) total += c;
  if (total == 0) return 0;
  std::uint64_t acc = 0;
  for (int k = 0; k < kBuckets; ++k) {
    acc += counts[std::size_t(k)];
    if (double(acc) >= q * double(total)) {
      if (k <= 2) return std::uint64_t(k);
      return k == kBuckets - 1 ? max_ulp : (1ull << (k - 1));
    }
  }
  return max_ulp;
}

namespace {

// The smallest d such that at least ceil(num/den · n) of the n values are <= d (index
// ceil(num·n/den) - 1 of the sorted values), in integers so that 0.99·n does not round. `from`:
// an index below which every value is known to be at most the answer and above which none is
// less (the rank of an earlier call, or 0): the selection runs on [from, n) only.
template <class T>
T order_statistic(T* d, std::size_t n, std::uint64_t num, std::uint64_t den, std::size_t* at,
                  std::size_t from = 0) {
  if (n == 0) return T(0);
  const std::uint64_t rank = (num * n + den - 1) / den;  // ceil, n < 2^57 so no overflow
  const std::size_t k = std::size_t(rank == 0 ? 0 : rank - 1);
  if (k < from) from = 0;
  std::nth_element(d + from, d + k, d + n);
  *at = k + 1;
  return d[k];
}

}  // namespace

void ulp_distances(const double* out, const double* ref, std::size_t n, UlpFormat fmt,
                   std::uint64_t* d) {
  for (std::size_t i = 0; i < n; ++i) {
    d[i] = std::isnan(out[i]) || std::isnan(ref[i]) ? std::numeric_limits<std::uint64_t>::max()
                                                    : ulp_distance(out[i], ref[i], fmt);
  }
}

UlpHistogram ulp_histogram_of(std::uint64_t* d, std::size_t n, UlpFormat fmt) {
  UlpHistogram h;
  h.format = fmt;
  h.counts.assign(UlpHistogram::kBuckets, 0);
  for (std::size_t i = 0; i < n; ++i) {
    // Two non-NaN values are never UINT64_MAX apart: ordinals lie in [-(2^63 - 1), 2^63 - 1].
    if (d[i] == std::numeric_limits<std::uint64_t>::max()) {
      ++h.nan_mismatch;
      d[i] = kUlpNanMismatch;
      continue;
    }
    ++h.counts[std::size_t(bucket_of(d[i]))];
    h.max_ulp = std::max(h.max_ulp, d[i]);
    d[i] = std::min(d[i], kUlpNanMismatch - 1);
  }
  // p99's rank is at or above p50's: after the first selection it looks above p50 only.
  std::size_t at = 0;
  h.p50 = order_statistic(d, n, 50, 100, &at);
  h.p99 = order_statistic(d, n, 99, 100, &at, at);
  return h;
}

UlpHistogram ulp_histogram(const double* out, const double* ref, std::size_t n, UlpFormat fmt) {
  std::vector<std::uint64_t> d(n);
  ulp_distances(out, ref, n, fmt, d.data());
  return ulp_histogram_of(d.data(), n, fmt);
}

double ulp_at(double magnitude, UlpFormat fmt) {
  // Significand bits p (hidden bit included) and the smallest normal exponent of each format.
  int p = 24, emin = -126;
  switch (fmt) {
    case UlpFormat::kFp64:
      p = 53, emin = -1022;
      break;
    case UlpFormat::kFp32:
      p = 24, emin = -126;
      break;
    case UlpFormat::kBf16:
      p = 8, emin = -126;
      break;
    case UlpFormat::kFp16:
      p = 11, emin = -14;
      break;
    case UlpFormat::kE4m3fn:
      p = 4, emin = -6;
      break;
    case UlpFormat::kE5m2:
      p = 3, emin = -14;
      break;
  }
  const double m = std::fabs(magnitude);
  int e = emin;
  if (m > 0 && std::isfinite(m)) {
    int fe = 0;
    std::frexp(m, &fe);  // m = f * 2^fe, f in [0.5, 1): floor(log2 m) = fe - 1
    e = std::max(fe - 1, emin);
  }
  return std::ldexp(1.0, e - (p - 1));
}

void row_scaled_errors(const double* out, const double* ref, std::size_t n, std::size_t row_len,
                       UlpFormat fmt, double* err) {
  if (row_len == 0) return;
  for (std::size_t r0 = 0; r0 < n; r0 += row_len) {
    const std::size_t r1 = std::min(n, r0 + row_len);
    double mag = 0;
    for (std::size_t i = r0; i < r1; ++i)
      if (std::isfinite(ref[i])) mag = std::max(mag, std::fabs(ref[i]));
    const double unit = ulp_at(mag, fmt);
    for (std::size_t i = r0; i < r1; ++i) {
      const double d = std::fabs(out[i] - ref[i]);
      // A NaN on either side, or an infinite difference, is as far as it gets.
      err[i] = std::isnan(d) || std::isinf(d) ? std::numeric_limits<double>::infinity() : d / unit;
    }
  }
}

RowUlpStats row_ulp_stats_of(double* err, std::size_t n) {
  RowUlpStats st;
  if (n == 0) return st;
  st.max = *std::max_element(err, err + n);
  std::size_t at = 0;
  st.p50 = order_statistic(err, n, 50, 100, &at);
  st.p99 = order_statistic(err, n, 99, 100, &at, at);
  return st;
}

RowUlpStats row_scaled_ulp(const double* out, const double* ref, std::size_t n, std::size_t row_len,
                           UlpFormat fmt) {
  if (n == 0 || row_len == 0) return {};
  std::vector<double> err(n);
  row_scaled_errors(out, ref, n, row_len, fmt, err.data());
  return row_ulp_stats_of(err.data(), n);
}

}  // namespace attnsim
