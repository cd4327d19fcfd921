// formats/ conversions against the spec-derived oracle (tests/formats/oracle.hpp): every encoding,
// every midpoint between neighbours and one FP32 ulp either side, every policy and rounding mode,
// from FP32 and from FP64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "tests/formats/oracle.hpp"

namespace attnsim {
namespace {

template <class Fmt>
struct Case {
  using F = Fmt;
  oracle::Spec spec;
  const char* name;
};

const Round kRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp,
                         Round::kDown};
const char* round_str(Round r) {
  const char* n[] = {"rne", "rna", "rz", "ru", "rd"};
  return n[int(r)];
}

std::vector<Policy> policies(bool ieee) {
  std::vector<Policy> out;
  for (Round r : kRounds) {
    out.push_back({r, Overflow::kSaturate, NanEncoding::kCuda});
    out.push_back({r, Overflow::kSaturateFinite, NanEncoding::kMlDtypes});
    out.push_back({r, Overflow::kNaN, NanEncoding::kCuda});
    out.push_back({r, Overflow::kNaN, NanEncoding::kMlDtypes});
    if (ieee) out.push_back({r, Overflow::kInf, NanEncoding::kCuda});
  }
  return out;
}

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// Inputs around every representable value and every rounding decision point of the format.
std::vector<double> probe_inputs(const oracle::Table& t) {
  std::vector<double> xs;
  auto add_f = [&](double v) {
    const float f = float(v);
    if (!std::isfinite(f)) return;
    for (float g : {f, next_up(f), next_down(f)}) {
      if (!std::isfinite(g)) continue;
      xs.push_back(g);
      xs.push_back(-double(g));
    }
  };
  for (std::size_t i = 0; i < t.values.size(); ++i) {
    add_f(t.values[i]);
    if (i + 1 < t.values.size()) add_f((t.values[i] + t.values[i + 1]) / 2);
  }
  const double max = t.values.back(), step = max - t.values[t.values.size() - 2];
  for (double v : {max + step / 2, max + step, max + 1.5 * step, max * 4, 1e30, 3e38}) add_f(v);
  add_f(t.values[1] / 2);  // half the smallest subnormal: ties to zero
  add_f(t.values[1] / 4);
  add_f(1e-40);  // FP32 subnormal input
  return xs;
}

template <class Fmt>
void check_all(const oracle::Spec& spec, const char* name) {
  const oracle::Table t(spec);
  const std::vector<double> xs = probe_inputs(t);
  std::size_t checked = 0, bad = 0;
  for (const Policy& p : policies(spec.ieee)) {
    for (double x : xs) {
      const std::uint32_t want = oracle::expected(t, x, p);
      const std::uint32_t got_f32 = encode<Fmt>(float(x), p);
      const std::uint32_t got_f64 = encode<Fmt>(x, p);
      ++checked;
      if (got_f32 != want || got_f64 != want) {
        if (++bad <= 10) {
          ADD_FAILURE() << name << " " << round_str(p.round) << " overflow " << int(p.overflow)
                        << " nan " << int(p.nan) << " x=" << x << " (" << std::hexfloat << x
                        << std::defaultfloat << "): oracle 0x" << std::hex << want
                        << ", from f32 0x" << got_f32 << ", from f64 0x" << got_f64;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << name << ": " << checked << " (input, policy) pairs";
  EXPECT_GT(checked, 1000u);
}

TEST(ConvertOracle, E4m3fnEveryMidpointEveryPolicy) {
  check_all<e4m3fn>(oracle::kE4m3fn, "e4m3fn");
}
TEST(ConvertOracle, E5m2EveryMidpointEveryPolicy) { check_all<e5m2>(oracle::kE5m2, "e5m2"); }
TEST(ConvertOracle, Bf16EveryMidpointEveryPolicy) { check_all<bf16>(oracle::kBf16, "bf16"); }
TEST(ConvertOracle, Fp16EveryMidpointEveryPolicy) { check_all<fp16>(oracle::kFp16, "fp16"); }

// FP64 sources round once. Values just above a narrow-format midpoint by far less than an FP32
// ulp collapse onto the midpoint if rounded to FP32 first (ml_dtypes' DoubleRound probe); the
// oracle sees the double exactly.
template <class Fmt>
void check_double_rounding(const oracle::Spec& spec) {
  const oracle::Table t(spec);
  std::size_t bad = 0, probes = 0;
  for (std::size_t i = 1; i + 1 < t.values.size(); ++i) {
    const double mid = (t.values[i] + t.values[i + 1]) / 2;
    for (double x : {mid * (1 + 0x1p-40), mid * (1 - 0x1p-40)}) {
      if (double(float(x)) != mid) continue;  // only the inputs that FP32 would collapse
      for (Round r : kRounds) {
        const Policy p{r, Overflow::kSaturate, NanEncoding::kCuda};
        ++probes;
        bad += encode<Fmt>(x, p) != oracle::expected(t, x, p);
      }
    }
  }
  EXPECT_GT(probes, 50u);
  EXPECT_EQ(bad, 0u);
}

TEST(ConvertOracle, Fp64SourceRoundsOnce) {
  check_double_rounding<e4m3fn>(oracle::kE4m3fn);
  check_double_rounding<e5m2>(oracle::kE5m2);
  check_double_rounding<bf16>(oracle::kBf16);
  check_double_rounding<fp16>(oracle::kFp16);
}

// Every encoding decodes to the spec value (NaN to a NaN of the same sign) and re-encodes to
// itself under every non-NaN-altering policy.
template <class Fmt>
void check_decode_roundtrip(const oracle::Spec& spec) {
  const std::uint32_t n = 1u << spec.bits();
  for (std::uint32_t c = 0; c < n; ++c) {
    const auto cls = oracle::classify(spec, c);
    const double d = decode_f64<Fmt>(typename Fmt::Storage(c));
    const float f = decode_f32<Fmt>(typename Fmt::Storage(c));
    const bool neg = (c >> (spec.bits() - 1)) & 1;
    if (cls == oracle::Class::kNaN) {
      ASSERT_TRUE(std::isnan(d) && std::isnan(f)) << std::hex << c;
      ASSERT_EQ(std::signbit(d), neg) << std::hex << c;
      // A NaN re-encodes (IEEE policy: sign and payload kept) to a NaN of the same sign; an IEEE
      // format's quiet NaN comes back to the same code.
      const std::uint32_t back =
          encode<Fmt>(f, Policy{Round::kNearestEven, Overflow::kNaN, NanEncoding::kIeee});
      ASSERT_EQ(oracle::classify(spec, back), oracle::Class::kNaN) << std::hex << c;
      ASSERT_EQ((back >> (spec.bits() - 1)) & 1, std::uint32_t(neg)) << std::hex << c;
      if (spec.ieee && ((c >> (spec.man_bits - 1)) & 1)) {
        ASSERT_EQ(back, c) << std::hex << c;
      }
      continue;
    }
    if (cls == oracle::Class::kInf) {
      ASSERT_TRUE(std::isinf(d) && std::signbit(d) == neg) << std::hex << c;
    } else {
      ASSERT_EQ(d, oracle::value(spec, c)) << std::hex << c;
      ASSERT_EQ(double(f), d) << std::hex << c;
      ASSERT_EQ(std::signbit(d), neg) << std::hex << c;
    }
    for (Round r : kRounds) {
      const Policy p{r, Overflow::kInf, NanEncoding::kCuda};
      if (cls == oracle::Class::kInf) continue;
      ASSERT_EQ(std::uint32_t(encode<Fmt>(f, p)), c) << std::hex << c << " " << round_str(r);
      ASSERT_EQ(std::uint32_t(encode<Fmt>(d, p)), c) << std::hex << c;
    }
  }
}

TEST(ConvertOracle, EveryEncodingDecodesAndRoundTrips) {
  check_decode_roundtrip<e4m3fn>(oracle::kE4m3fn);
  check_decode_roundtrip<e5m2>(oracle::kE5m2);
  check_decode_roundtrip<bf16>(oracle::kBf16);
  check_decode_roundtrip<fp16>(oracle::kFp16);
}

// A million random FP32 bit patterns (all exponents) per format and a few policies.
TEST(ConvertOracle, RandomBitPatterns) {
  std::mt19937 rng(42);
  const oracle::Table t8(oracle::kE4m3fn), t5(oracle::kE5m2), tb(oracle::kBf16), th(oracle::kFp16);
  std::size_t bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const std::uint32_t bits = rng();
    float x;
    std::memcpy(&x, &bits, 4);
    if (!std::isfinite(x)) continue;
    const Policy p{kRounds[i % 5], (i & 8) ? Overflow::kSaturate : Overflow::kNaN,
                   NanEncoding::kMlDtypes};
    const Policy pi{kRounds[i % 5], Overflow::kInf, NanEncoding::kCuda};
    bad += encode<e4m3fn>(x, p) != oracle::expected(t8, x, p);
    bad += encode<e5m2>(x, pi) != oracle::expected(t5, x, pi);
    bad += encode<bf16>(x, pi) != oracle::expected(tb, x, pi);
    bad += encode<fp16>(x, p) != oracle::expected(th, x, p);
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace attnsim
