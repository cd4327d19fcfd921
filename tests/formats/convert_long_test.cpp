// formats/: ALL 2^32 FP32 inputs through conversions the H100 recordings do not cover (the
// non-saturating ml_dtypes policies, ties-away, and directed bf16 rounding). Label: exhaustive
// (OpenMP over both cores; see tests/formats/README.md for the times). attnsim's side is
// numerics/convert_array's encode_array: its vector kernels by default, the formats/ encoder of
// record under ATTNSIM_ISA=scalar.
//
// Oracle: a decision table, independent of both formats/ and the unit tests' oracle.hpp search.
// For a policy and a sign, the magnitudes 0 = c_0 < c_1 < ... < c_n (the representable values, then
// c_n = the value one step past max finite, which stands for "overflow") are separated by n
// thresholds t_i in (c_i, c_(i+1)]; |x| >= t_i means "at least c_(i+1)". The thresholds depend only
// on the magnitude rounding rule:
//   nearest-even: the midpoint if c_(i+1) has an even code, else the next double above it
//   nearest-away: the midpoint
//   truncate:     c_(i+1)
//   away:         the next double above c_i
// The result for |x| is c_k with k = upper_bound(t, |x|) - t.begin(), k == n meaning overflow
// (whose result the policy table gives; for truncation the last threshold is +Inf, so it never
// gets there: IEEE 754 7.4). FP32 inputs are
// exact doubles, and "a > m" equals "a >= nextafter(m)" for doubles, so the comparison is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"
#include "tests/formats/oracle.hpp"

namespace attnsim {
namespace {

enum class Mag { kNearestEven, kNearestAway, kTruncate, kAway };

Mag magnitude_rule(Round r, bool neg) {
  switch (r) {
    case Round::kNearestEven:
      return Mag::kNearestEven;
    case Round::kNearestAway:
      return Mag::kNearestAway;
    case Round::kTowardZero:
      return Mag::kTruncate;
    case Round::kUp:
      return neg ? Mag::kTruncate : Mag::kAway;
    case Round::kDown:
      return neg ? Mag::kAway : Mag::kTruncate;
  }
  return Mag::kTruncate;
}

struct DecisionTable {
  std::vector<double> thresholds;    // n
  std::vector<std::uint32_t> codes;  // n + 1; codes[n] = overflow result (sign included)

  DecisionTable(const oracle::Table& t, Policy p, bool neg) {
    const std::uint32_t sign = neg ? t.sign_bit() : 0;
    std::vector<double> c = t.values;
    c.push_back(oracle::value(t.spec, t.max_code() + 1));
    const Mag rule = magnitude_rule(p.round, neg);
    for (std::size_t i = 0; i + 1 < c.size(); ++i) {
      const double mid = (c[i] + c[i + 1]) / 2;
      const std::uint32_t next_code = i + 1 < t.codes.size() ? t.codes[i + 1] : t.max_code() + 1;
      double th = 0;
      switch (rule) {
        case Mag::kNearestEven:
          th = (next_code & 1) == 0 ? mid : std::nextafter(mid, HUGE_VAL);
          break;
        case Mag::kNearestAway:
          th = mid;
          break;
        // Truncation never rounds up into "overflow" (IEEE 754 7.4): no threshold for c_n.
        case Mag::kTruncate:
          th = i + 2 < c.size() ? c[i + 1] : HUGE_VAL;
          break;
        case Mag::kAway:
          th = std::nextafter(c[i], HUGE_VAL);
          break;
      }
      thresholds.push_back(th);
    }
    for (std::uint32_t code : t.codes) codes.push_back(sign | code);
    // Overflow (only reachable for non-truncating rules): formats/policy.hpp's Overflow table.
    if (p.overflow == Overflow::kSaturate || p.overflow == Overflow::kSaturateFinite) {
      codes.push_back(sign | t.max_code());
    } else if (p.overflow == Overflow::kInf && t.spec.ieee) {
      codes.push_back(sign | t.inf_code());
    } else {
      codes.push_back(sign | (p.nan == NanEncoding::kCuda ? t.nan_all_ones() : t.quiet_nan()));
    }
  }
  std::uint32_t lookup(double a) const {
    return codes[std::size_t(std::upper_bound(thresholds.begin(), thresholds.end(), a) -
                             thresholds.begin())];
  }
};

// The oracle's codes of the 2^16 patterns (hi << 16) | lo. Within one upper half of a finite
// exponent the magnitudes increase with lo, so the index that upper_bound would return only moves
// up: one upper_bound for the first pattern, then a walk over the same thresholds.
void oracle_block(const oracle::Table& t, const DecisionTable& pos, const DecisionTable& neg,
                  Policy p, std::uint32_t hi, std::uint32_t* want) {
  const bool is_neg = hi >> 15;
  if (((hi >> 7) & 0xFF) == 0xFF) {  // Inf and NaN
    for (std::uint32_t lo = 0; lo < 65536; ++lo) {
      const std::uint32_t bits = (hi << 16) | lo;
      want[lo] = (bits & 0x7FFFFF) != 0 ? oracle::expected_nan(t, is_neg, bits & 0x7FFFFF, 23, p.nan)
                                        : oracle::expected_inf(t, is_neg, p);
    }
    return;
  }
  const DecisionTable& d = is_neg ? neg : pos;
  const std::vector<double>& th = d.thresholds;
  auto mag = [hi](std::uint32_t lo) {
    return std::fabs(double(std::bit_cast<float>((hi << 16) | lo)));
  };
  std::size_t k = std::size_t(std::upper_bound(th.begin(), th.end(), mag(0)) - th.begin());
  for (std::uint32_t lo = 0; lo < 65536; ++lo) {
    const double a = mag(lo);
    while (k < th.size() && th[k] <= a) ++k;
    want[lo] = d.codes[k];
  }
}

// attnsim's side through numerics/convert_array's encode_array: its vector kernels, or under
// ATTNSIM_ISA=scalar its reference (encode<Fmt> of formats/, the code of record).
template <class Fmt>
void sweep(const oracle::Spec& spec, Policy p, const char* name) {
  const auto start = std::chrono::steady_clock::now();
  const oracle::Table t(spec);
  const DecisionTable pos(t, p, false), neg(t, p, true);
  const Encoding e = std::is_same_v<Fmt, bf16>     ? Encoding::kBf16
                     : std::is_same_v<Fmt, e5m2>   ? Encoding::kE5m2
                     : std::is_same_v<Fmt, e4m3fn> ? Encoding::kE4m3fn
                                                   : Encoding::kFp16;
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(65536);
    std::vector<std::uint32_t> got(65536), want(65536);
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = std::bit_cast<float>((std::uint32_t(hi) << 16) | lo);
      encode_array(e, x.data(), x.size(), got.data(), p);
      oracle_block(t, pos, neg, p, std::uint32_t(hi), want.data());
      std::uint64_t local = 0;
      for (std::uint32_t lo = 0; lo < 65536; ++lo) {
        if (got[lo] != want[lo] && ++local <= 3) {
#pragma omp critical
          ADD_FAILURE() << name << " input 0x" << std::hex << ((std::uint32_t(hi) << 16) | lo)
                        << ": oracle 0x" << want[lo] << ", attnsim 0x" << got[lo];
        }
      }
      bad += local;
    }
  }
  EXPECT_EQ(bad.load(), 0u) << name << " over all 2^32 inputs";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: all 2^32 FP32 inputs (%s), %llu mismatches, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

// The decision table itself, on a handful of known answers, so a broken oracle cannot pass a
// broken encoder silently (both would have to be wrong in the same way).
TEST(ConvertAllInputs, DecisionTableSanity) {
  const oracle::Table t(oracle::kE4m3fn);
  const DecisionTable rne(t, kMlDtypesE4m3, false), rne_neg(t, kMlDtypesE4m3, true);
  EXPECT_EQ(rne.lookup(464.0), 0x7Eu);                       // tie -> even 448
  EXPECT_EQ(rne.lookup(std::nextafter(464.0, 1e9)), 0x7Fu);  // overflow -> NaN
  EXPECT_EQ(rne_neg.lookup(1000.0), 0xFFu);
  EXPECT_EQ(rne.lookup(0x1p-10), 0x00u);  // tie -> 0
  EXPECT_EQ(rne.lookup(0.0), 0x00u);
  EXPECT_EQ(rne_neg.lookup(0.0), 0x80u);
  const DecisionTable ru(t, {Round::kUp, Overflow::kNaN, NanEncoding::kCuda}, false);
  EXPECT_EQ(ru.lookup(448.0), 0x7Eu);
  EXPECT_EQ(ru.lookup(std::nextafter(448.0, 1e9)), 0x7Fu);
  EXPECT_EQ(ru.lookup(1e-30), 0x01u);
  const DecisionTable ru_neg(t, {Round::kUp, Overflow::kNaN, NanEncoding::kCuda}, true);
  EXPECT_EQ(ru_neg.lookup(1e30), 0xFEu);  // RU of a negative overflow: toward zero -> -max
  EXPECT_EQ(ru_neg.lookup(1e-30), 0x80u);
  const oracle::Table b(oracle::kBf16);
  const DecisionTable bf(b, kMlDtypesIeee, false);
  EXPECT_EQ(bf.lookup(double(std::bit_cast<float>(0x7F7F8000u))), 0x7F80u);  // top tie -> Inf
  EXPECT_EQ(bf.lookup(double(std::bit_cast<float>(0x3F818000u))), 0x3F82u);
}

TEST(ConvertAllInputs, E4m3fnNonSaturatingMlDtypes) {
  sweep<e4m3fn>(oracle::kE4m3fn, kMlDtypesE4m3, "e4m3fn {rne, nan, ml_dtypes}");
}
TEST(ConvertAllInputs, E5m2NonSaturatingMlDtypes) {
  sweep<e5m2>(oracle::kE5m2, kMlDtypesIeee, "e5m2 {rne, inf, ml_dtypes}");
}
TEST(ConvertAllInputs, E4m3fnTiesAwaySaturate) {
  sweep<e4m3fn>(oracle::kE4m3fn,
                Policy{Round::kNearestAway, Overflow::kSaturate, NanEncoding::kCuda},
                "e4m3fn {rna, saturate, cuda}");
}
TEST(ConvertAllInputs, Bf16RoundUpIeee) {
  sweep<bf16>(oracle::kBf16, Policy{Round::kUp, Overflow::kInf, NanEncoding::kMlDtypes},
              "bf16 {ru, inf, ml_dtypes}");
}
TEST(ConvertAllInputs, Bf16RoundDownIeee) {
  sweep<bf16>(oracle::kBf16, Policy{Round::kDown, Overflow::kInf, NanEncoding::kIeee},
              "bf16 {rd, inf, ieee}");
}

}  // namespace
}  // namespace attnsim
