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
  const int e = msb - 1074;  // the value lies in [2^e, 2^(e+1))
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
  (void)e;
  const double r = std::ldexp(double(q), lsb - 1074);
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -man_bits), max_exp);
  const double out = r > max_finite ? kInf : r;
  return negative ? -out : out;
}

float ExactSum::round_f32() const { return float(round_to(23, -126, 127)); }
double ExactSum::round_f64() const { return round_to(52, -1022, 1023); }

namespace {

// The fast path: four FP64 lanes with TwoSum (Knuth) error terms. When every addition was exact
// (all error terms zero: the usual case for 16-bit operands, whose products have at most 22
// significant bits), the FP64 sum is the exact sum and one conversion rounds it to FP32 (RNE);
// otherwise the caller falls back to the exact register. Returns false on fallback.
inline void two_sum(double& s, double x, bool& inexact) {
  const double t = s + x;
  const double bb = t - s;
  const double err = (s - (t - bb)) + (x - bb);
  inexact |= err != 0.0;
  s = t;
}

template <class TA>
bool dot_exact_lanes(double c, const TA* a, const float* b, int n, float* out) {
  double l0 = c, l1 = 0.0, l2 = 0.0, l3 = 0.0;
  bool inexact = false;
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    two_sum(l0, double(float(a[k])) * double(b[k]), inexact);
    two_sum(l1, double(float(a[k + 1])) * double(b[k + 1]), inexact);
    two_sum(l2, double(float(a[k + 2])) * double(b[k + 2]), inexact);
    two_sum(l3, double(float(a[k + 3])) * double(b[k + 3]), inexact);
  }
  for (; k < n; ++k) two_sum(l0, double(float(a[k])) * double(b[k]), inexact);
  two_sum(l0, l1, inexact);
  two_sum(l2, l3, inexact);
  two_sum(l0, l2, inexact);
  if (inexact || !std::isfinite(l0)) return false;
  *out = float(l0);
  return true;
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
