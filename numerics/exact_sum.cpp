// The exact FP64-term accumulator (see exact_sum.hpp).
#include "numerics/exact_sum.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace attnsim {

void ExactSum::clear() {
  for (int i = lo_; i <= hi_; ++i) limb_[std::size_t(i)] = 0;
  lo_ = kLimbs;
  hi_ = -1;
  adds_ = 0;
  nan_ = pos_inf_ = neg_inf_ = false;
}

void ExactSum::add(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  const bool neg = (b >> 63) != 0;
  const int e = int((b >> 52) & 0x7FF);
  std::uint64_t m = b & ((std::uint64_t{1} << 52) - 1);
  if (e == 0x7FF) {
    if (m != 0) {
      nan_ = true;
    } else {
      (neg ? neg_inf_ : pos_inf_) = true;
    }
    return;
  }
  if (m == 0 && e == 0) return;  // ±0
  if (e != 0) m |= std::uint64_t{1} << 52;
  // x = ±m · 2^(p − 1074) with p = max(e, 1) − 1 (subnormals share the exponent of e = 1).
  const int p = (e == 0 ? 1 : e) - 1;
  const int idx = p >> 5, sh = p & 31;
  const unsigned __int128 v = static_cast<unsigned __int128>(m) << sh;  // < 2^84: three digits
  const std::int64_t d0 = std::int64_t(std::uint32_t(v));
  const std::int64_t d1 = std::int64_t(std::uint32_t(v >> 32));
  const std::int64_t d2 = std::int64_t(std::uint32_t(v >> 64));
  if (neg) {
    limb_[std::size_t(idx)] -= d0;
    limb_[std::size_t(idx + 1)] -= d1;
    limb_[std::size_t(idx + 2)] -= d2;
  } else {
    limb_[std::size_t(idx)] += d0;
    limb_[std::size_t(idx + 1)] += d1;
    limb_[std::size_t(idx + 2)] += d2;
  }
  if (idx < lo_) lo_ = idx;
  if (idx + 2 > hi_) hi_ = idx + 2;
  // Each add moves a limb by less than 2^32: carry before 2^30 of them could reach 2^62.
  if (++adds_ == (1 << 30)) carry_pass();
}

void ExactSum::carry_pass() {
  for (int i = lo_; i < kLimbs - 1 && i <= hi_; ++i) {
    const std::int64_t c = limb_[std::size_t(i)] >> 32;  // floor division by 2^32
    limb_[std::size_t(i)] -= c * (std::int64_t{1} << 32);
    limb_[std::size_t(i + 1)] += c;
    if (c != 0 && i + 1 > hi_) hi_ = i + 1;
  }
  adds_ = 0;
}

bool ExactSum::magnitude(std::array<std::uint32_t, kLimbs + 2>& mag, bool& negative) const {
  mag.fill(0u);
  if (hi_ < lo_) return false;
  // Two's complement digits: carry every limb into [0, 2^32); the final carry is the sign.
  std::int64_t carry = 0;
  for (int i = lo_; i < kLimbs + 2; ++i) {
    const std::int64_t v = (i < kLimbs ? limb_[std::size_t(i)] : 0) + carry;
    carry = v >> 32;
    mag[std::size_t(i)] = std::uint32_t(v - carry * (std::int64_t{1} << 32));
    if (i > hi_ && carry == 0) break;
  }
  // The register is wide enough that the top digit is a pure sign extension.
  negative = carry < 0;
  if (negative) {  // magnitude = two's complement negation
    std::uint64_t c = 1;
    for (int i = 0; i < kLimbs + 2; ++i) {
      const std::uint64_t v = std::uint64_t(std::uint32_t(~mag[std::size_t(i)])) + c;
      mag[std::size_t(i)] = std::uint32_t(v);
      c = v >> 32;
    }
  }
  for (std::uint32_t d : mag)
    if (d != 0) return true;
  return false;
}

// Rounds the exact sum to a binary format with `man_bits` fraction bits, normal exponents
// [min_exp, max_exp] (subnormals below), to nearest even; returned as a double (exact for both
// FP32 and FP64 results).
double ExactSum::round_to(int man_bits, int min_exp, int max_exp) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (nan_ || (pos_inf_ && neg_inf_)) return std::numeric_limits<double>::quiet_NaN();
  if (pos_inf_) return kInf;
  if (neg_inf_) return -kInf;
  std::array<std::uint32_t, kLimbs + 2> mag;
  bool negative = false;
  if (!magnitude(mag, negative)) return 0.0;
  int top = kLimbs + 1;
  while (mag[std::size_t(top)] == 0) --top;
  // The highest set bit, as a bit index above 2^-1074.
  const int msb = top * 32 + (31 - __builtin_clz(mag[std::size_t(top)]));
  auto bit = [&](int i) -> unsigned {
    if (i < 0) return 0u;
    return (mag[std::size_t(i >> 5)] >> (i & 31)) & 1u;
  };
  // The least significant kept bit: man_bits below the top, not below the subnormal quantum.
  const int lsb = std::max(msb - man_bits, (min_exp - man_bits) + 1074);
  std::uint64_t q = 0;
  for (int i = msb; i >= lsb; --i) q = (q << 1) | bit(i);
  const unsigned guard = bit(lsb - 1);
  bool sticky = false;
  for (int i = lsb - 2; i >= 0 && !sticky; --i) {
    if ((i & 31) == 31 && mag[std::size_t(i >> 5)] == 0) {
      i -= 31;  // skip a zero digit
      continue;
    }
    sticky = bit(i) != 0;
  }
  if (guard && (sticky || (q & 1u))) ++q;
  const double r = std::ldexp(double(q), lsb - 1074);
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -man_bits), max_exp);
  const double out = r > max_finite ? kInf : r;
  return negative ? -out : out;
}

float ExactSum::round_f32() const { return float(round_to(23, -126, 127)); }
double ExactSum::round_f64() const { return round_to(52, -1022, 1023); }

namespace {

// The fast path: four FP64 lanes, each with a TwoSum (Knuth) error term, i.e. a double-double sum
// S + E of the exact value X with |X − (S + E)| <= n·2^-100·Σ|x| (a generous bound on the rounding of
// the error terms themselves). When no addition rounded, S is X and one conversion rounds it to
// FP32 (RNE). Otherwise the FP32 r nearest S + E is still X's rounding when X lies certainly
// strictly between r's two rounding midpoints, which the double-double decides unless X is within
// the bound of a midpoint (then, and for non-finite values, the caller takes the exact register).
inline void two_sum(double& s, double x, double& e, bool& inexact) {
  const double t = s + x;
  const double bb = t - s;
  const double err = (s - (t - bb)) + (x - bb);
  inexact |= err != 0.0;
  e += err;
  s = t;
}

template <class TA>
bool dot_exact_lanes(double c, const TA* a, const float* b, int n, float* out) {
  double s0 = c, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  double e0 = 0.0, e1 = 0.0, e2 = 0.0, e3 = 0.0;
  double asum = std::fabs(c);
  bool inexact = false;
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    const double x0 = double(float(a[k])) * double(b[k]);
    const double x1 = double(float(a[k + 1])) * double(b[k + 1]);
    const double x2 = double(float(a[k + 2])) * double(b[k + 2]);
    const double x3 = double(float(a[k + 3])) * double(b[k + 3]);
    asum += (std::fabs(x0) + std::fabs(x1)) + (std::fabs(x2) + std::fabs(x3));
    two_sum(s0, x0, e0, inexact);
    two_sum(s1, x1, e1, inexact);
    two_sum(s2, x2, e2, inexact);
    two_sum(s3, x3, e3, inexact);
  }
  for (; k < n; ++k) {
    const double x = double(float(a[k])) * double(b[k]);
    asum += std::fabs(x);
    two_sum(s0, x, e0, inexact);
  }
  double e = (e0 + e1) + (e2 + e3);
  two_sum(s0, s1, e, inexact);
  two_sum(s2, s3, e, inexact);
  two_sum(s0, s2, e, inexact);
  if (!std::isfinite(s0) || !std::isfinite(e) || !std::isfinite(asum)) return false;
  if (!inexact) {  // no addition rounded: S is the exact sum
    *out = float(s0);
    return true;
  }
  const float r = float(s0 + e);
  if (std::isinf(r)) return false;
  const double rd = double(r);
  const float lo = std::nextafter(r, -INFINITY), hi = std::nextafter(r, INFINITY);
  // Midpoints to the neighbours (exact in FP64: two adjacent FP32 values have 25 significant bits
  // together); beyond FLT_MAX the midpoint is FLT_MAX + 2^103.
  const double mlo = std::isinf(lo) ? -(double(std::numeric_limits<float>::max()) + std::ldexp(1.0, 103))
                                    : (double(lo) + rd) / 2;
  const double mhi = std::isinf(hi) ? double(std::numeric_limits<float>::max()) + std::ldexp(1.0, 103)
                                    : (rd + double(hi)) / 2;
  const double delta = double(n + 8) * std::ldexp(asum, -100);
  const double u = std::ldexp(1.0, -52);
  const double dh = (s0 - mhi) + e, dl = (s0 - mlo) + e;
  const double slack_h = delta + 4 * u * (std::fabs(s0 - mhi) + std::fabs(e));
  const double slack_l = delta + 4 * u * (std::fabs(s0 - mlo) + std::fabs(e));
  if (dh < -slack_h && dl > slack_l) {
    *out = r;
    return true;
  }
  return false;
}

template <class TA>
float dot_exact_register(double c, const TA* a, const float* b, int n) {
  thread_local ExactSum acc;
  acc.clear();
  acc.add(c);
  for (int k = 0; k < n; ++k) acc.add(double(float(a[k])) * double(b[k]));  // exact: 24 + 24 bits
  return acc.round_f32();
}

}  // namespace

float dot_exact_f32_ref(double c, const float* a, const float* b, int n) {
  return dot_exact_register(c, a, b, n);
}

float dot_exact_f32(double c, const float* a, const float* b, int n) {
  float r;
  if (dot_exact_lanes(c, a, b, n, &r)) return r;
  return dot_exact_register(c, a, b, n);
}

// An FP64 operand enters as FP32 (the operand register of an FP32 matrix unit).
float dot_exact_f32(double c, const double* a, const float* b, int n) {
  float r;
  if (dot_exact_lanes(c, a, b, n, &r)) return r;
  return dot_exact_register(c, a, b, n);
}

}  // namespace attnsim
