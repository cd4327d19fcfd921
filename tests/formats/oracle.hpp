// Test oracle for formats/: a value table built from each format's spec field layout and a
// nearest-neighbour search over it. It never calls formats/ code; only the enums are shared.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "formats/policy.hpp"

namespace attnsim::oracle {

// A format described by its spec: field widths, and whether the all-ones exponent is IEEE
// (Inf/NaN) or "fn" (only S.1111.111 is NaN).
struct Spec {
  int exp_bits, man_bits;
  bool ieee;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int bits() const { return 1 + exp_bits + man_bits; }
};

inline constexpr Spec kE4m3fn{4, 3, false}, kE5m2{5, 2, true}, kBf16{8, 7, true},
    kFp16{5, 10, true};

enum class Class { kFinite, kInf, kNaN };

inline Class classify(const Spec& s, std::uint32_t code) {
  const std::uint32_t e = (code >> s.man_bits) & ((1u << s.exp_bits) - 1);
  const std::uint32_t m = code & ((1u << s.man_bits) - 1);
  const bool top = e == (1u << s.exp_bits) - 1;
  if (s.ieee && top) return m == 0 ? Class::kInf : Class::kNaN;
  if (!s.ieee && top && m == (1u << s.man_bits) - 1) return Class::kNaN;
  return Class::kFinite;
}

// Value of a finite code, from the spec formula (exact in double for these widths).
inline double value(const Spec& s, std::uint32_t code) {
  const bool neg = (code >> (s.bits() - 1)) & 1;
  const int e = int((code >> s.man_bits) & ((1u << s.exp_bits) - 1));
  const int m = int(code & ((1u << s.man_bits) - 1));
  const double mag = e == 0 ? std::ldexp(double(m), 1 - s.bias() - s.man_bits)
                            : std::ldexp(double((1 << s.man_bits) + m), e - s.bias() - s.man_bits);
  return neg ? -mag : mag;
}

// Positive finite codes in increasing order (codes 0 .. max finite).
inline std::vector<std::uint32_t> positive_codes(const Spec& s) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t c = 0; c < (1u << (s.bits() - 1)); ++c) {
    if (classify(s, c) == Class::kFinite) out.push_back(c);
  }
  return out;  // already increasing in value: the encoding is monotone
}

struct Table {
  Spec spec;
  std::vector<std::uint32_t> codes;
  std::vector<double> values;
  explicit Table(const Spec& s) : spec(s), codes(positive_codes(s)) {
    for (auto c : codes) values.push_back(value(s, c));
  }
  std::uint32_t max_code() const { return codes.back(); }
  std::uint32_t sign_bit() const { return 1u << (spec.bits() - 1); }
  std::uint32_t inf_code() const { return ((1u << spec.exp_bits) - 1) << spec.man_bits; }
  std::uint32_t nan_all_ones() const { return sign_bit() - 1; }
  std::uint32_t quiet_nan() const {
    return spec.ieee ? (inf_code() | (1u << (spec.man_bits - 1))) : nan_all_ones();
  }
};

// The expected encoding of a finite non-zero magnitude `a` (double, or an exact
// boost::multiprecision value for significands wider than a double) with sign `neg` under policy
// p: a sorted search for the neighbours lo <= a < hi, then the rounding rule on a vs their
// midpoint. NaN and Inf inputs have their own spec tables below.
template <class T>
std::uint32_t expected_abs(const Table& t, const T& a, bool neg, Policy p) {
  const std::uint32_t sign = neg ? t.sign_bit() : 0;
  // The value one step past max finite, from the field formula applied to max_code + 1 (for an
  // IEEE format that is the Inf code read as a finite number, 2^(emax+1); for an fn format the
  // NaN code read as finite). Taking "max + (max - previous)" instead is wrong when max is the
  // first value of its binade (fn formats with one mantissa bit), where the step doubles.
  const double max = t.values.back();
  const std::uint32_t past_code = t.max_code() + 1;  // its parity decides RNE ties at the top
  const double past = value(t.spec, past_code);
  auto overflow = [&]() -> std::uint32_t {
    const bool toward_zero = p.round == Round::kTowardZero || (p.round == Round::kDown && !neg) ||
                             (p.round == Round::kUp && neg);
    if (toward_zero || p.overflow == Overflow::kSaturate ||
        p.overflow == Overflow::kSaturateFinite) {
      return sign | t.max_code();
    }
    if (p.overflow == Overflow::kInf && t.spec.ieee) return sign | t.inf_code();
    return sign | (p.nan == NanEncoding::kCuda ? t.nan_all_ones() : t.quiet_nan());
  };
  std::size_t hi_i =
      std::size_t(std::lower_bound(t.values.begin(), t.values.end(), a) - t.values.begin());
  if (hi_i < t.values.size() && t.values[hi_i] == a) return sign | t.codes[hi_i];
  double lo, hi;
  std::uint32_t lo_code, hi_code;
  bool hi_is_overflow = false;
  if (hi_i == t.values.size()) {
    if (a >= past) return overflow();  // beyond every rounding candidate
    lo = max;
    lo_code = t.max_code();
    hi = past;
    hi_code = past_code;
    hi_is_overflow = true;
  } else {
    lo = t.values[hi_i - 1];
    lo_code = t.codes[hi_i - 1];
    hi = t.values[hi_i];
    hi_code = t.codes[hi_i];
  }
  bool up = false;
  const double mid = (lo + hi) / 2;  // exact: both have few significant bits
  switch (p.round) {
    case Round::kNearestEven:
      up = a > mid || (a == mid && (hi_code & 1) == 0);
      break;
    case Round::kNearestAway:
      up = a >= mid;
      break;
    case Round::kTowardZero:
      up = false;
      break;
    case Round::kUp:
      up = !neg;
      break;
    case Round::kDown:
      up = neg;
      break;
  }
  if (!up) return sign | lo_code;
  if (hi_is_overflow) return overflow();
  return sign | hi_code;
}

// The expected encoding of a finite non-NaN double x under policy p (zero included: the sign is
// kept under every rounding mode, IEEE 754 6.3).
inline std::uint32_t expected(const Table& t, double x, Policy p) {
  const bool neg = std::signbit(x);
  if (x == 0) return neg ? t.sign_bit() : 0;
  return expected_abs(t, std::fabs(x), neg, p);
}

// +-Inf input, from the Overflow comments of formats/policy.hpp: kSaturate -> +-max; an IEEE
// format keeps Inf under kSaturateFinite and kInf; otherwise NaN, sign kept, magnitude by the
// NaN encoding (kCuda all-ones, else the quiet NaN). Inf is exact, so the rounding mode is moot.
inline std::uint32_t expected_inf(const Table& t, bool neg, Policy p) {
  const std::uint32_t sign = neg ? t.sign_bit() : 0;
  if (p.overflow == Overflow::kSaturate) return sign | t.max_code();
  if (t.spec.ieee && p.overflow != Overflow::kNaN) return sign | t.inf_code();
  return sign | (p.nan == NanEncoding::kCuda ? t.nan_all_ones() : t.quiet_nan());
}

// NaN input with sign `neg` and source mantissa field `payload` of `src_man_bits` bits, from the
// NanEncoding comments of formats/policy.hpp: kCuda drops the sign, all-ones magnitude;
// kMlDtypes keeps the sign, quiet NaN; kIeee keeps the sign and the top payload bits and forces
// the quiet bit (an fn format has a single NaN magnitude).
inline std::uint32_t expected_nan(const Table& t, bool neg, std::uint64_t payload, int src_man_bits,
                                  NanEncoding e) {
  const std::uint32_t sign = neg ? t.sign_bit() : 0;
  if (e == NanEncoding::kCuda) return t.nan_all_ones();
  if (e == NanEncoding::kMlDtypes || !t.spec.ieee) return sign | t.quiet_nan();
  return sign | t.quiet_nan() | std::uint32_t(payload >> (src_man_bits - t.spec.man_bits));
}

}  // namespace attnsim::oracle
