// numerics/convert_table: the 2^16-entry table and the bf16 bias trick against encode<> (tested on
// its own in tests/formats) on a few million structured and random inputs, for every Policy.
// All 2^32 inputs: convert_table_long_test.cpp.
#include "numerics/convert_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

namespace attnsim {
namespace {

std::vector<Policy> all_policies() {
  std::vector<Policy> ps;
  for (Round r :
       {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp, Round::kDown}) {
    for (Overflow o :
         {Overflow::kSaturate, Overflow::kSaturateFinite, Overflow::kNaN, Overflow::kInf}) {
      for (NanEncoding n : {NanEncoding::kCuda, NanEncoding::kMlDtypes, NanEncoding::kIeee})
        ps.push_back({r, o, n});
    }
  }
  return ps;
}

// Every upper half with low halves chosen to hit each sticky class and the bit-15 "half" pattern.
constexpr std::uint32_t kLows[] = {0x0000, 0x0001, 0x8000, 0xFFFF, 0x7FFF, 0x4321};

template <class Fmt>
void check_structured(const Policy& p) {
  const ConversionTable t = ConversionTable::build<Fmt>(p);
  std::vector<float> x;
  x.reserve(std::size_t{1} << 16);
  std::vector<std::uint8_t> y(std::size_t{1} << 16);
  for (std::uint32_t lo : kLows) {
    x.clear();
    for (std::uint32_t hi = 0; hi < (1u << 16); ++hi) x.push_back(f32_from_bits((hi << 16) | lo));
    t.convert_array(x.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint8_t want = encode<Fmt>(x[i], p);
      ASSERT_EQ(y[i], want) << t.format_name() << " bits 0x" << std::hex << f32_bits(x[i])
                            << " policy " << int(p.round) << int(p.overflow) << int(p.nan);
      ASSERT_EQ(t.convert(x[i]), want);
    }
  }
}

TEST(ConvertTable, EveryUpperHalfEveryPolicyMatchesEncode) {
  // 60 policies x 2 formats x 6 x 2^16 = 47 M conversions.
  for (const Policy& p : all_policies()) {
    check_structured<e4m3fn>(p);
    check_structured<e5m2>(p);
  }
}

TEST(ConvertTable, RandomInputsMatchEncode) {
  std::mt19937 rng(1234);
  std::vector<float> x(std::size_t{1} << 21);
  std::normal_distribution<float> n(0.0f, 40.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = (i & 1) ? n(rng) : f32_from_bits(rng());  // activations and raw bit patterns
  }
  std::vector<std::uint8_t> y(x.size());
  for (const Policy& p : {kCudaSatfinite, kMlDtypesE4m3, kMlDtypesIeee}) {
    const ConversionTable a = ConversionTable::build<e4m3fn>(p),
                          b = ConversionTable::build<e5m2>(p);
    a.convert_array(x.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], encode<e4m3fn>(x[i], p)) << i;
    b.convert_array(x.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], encode<e5m2>(x[i], p)) << i;
  }
}

TEST(ConvertTable, HandPickedBoundaries) {
  const ConversionTable sat = ConversionTable::build<e4m3fn>(kCudaSatfinite);
  const ConversionTable nosat = ConversionTable::build<e4m3fn>(kMlDtypesE4m3);
  EXPECT_EQ(sat.convert(464.0f), 0x7E);  // 0x43E80000: tie between 448 and 480, even -> 448
  EXPECT_EQ(nosat.convert(464.0f), 0x7E);
  // 0x43E80001: 464 + 1 ulp, tie broken only by the low half (sticky): overflow.
  EXPECT_EQ(sat.convert(f32_from_bits(0x43E80001u)), 0x7E);
  EXPECT_EQ(nosat.convert(f32_from_bits(0x43E80001u)), 0x7F);
  EXPECT_EQ(sat.convert(f32_from_bits(0x3A800000u)), 0x00);  // 2^-10: tie to 0
  EXPECT_EQ(sat.convert(f32_from_bits(0x3A800001u)), 0x01);  // 2^-10 + ulp: up to 2^-9
  EXPECT_EQ(sat.convert(f32_from_bits(0xFFC00000u)), 0x7F);  // -NaN, CUDA drops the sign
  EXPECT_EQ(nosat.convert(f32_from_bits(0xFFC00000u)), 0xFF);
  EXPECT_EQ(sat.convert(-0.0f), 0x80);
  const ConversionTable e5 = ConversionTable::build<e5m2>(kMlDtypesIeee);
  EXPECT_EQ(e5.convert(61440.0f), 0x7C);                    // tie with odd 57344: Inf
  EXPECT_EQ(e5.convert(f32_from_bits(0x476FFFFFu)), 0x7B);  // just below
  EXPECT_EQ(e5.convert(f32_from_bits(0x7F800001u)), 0x7E);  // NaN with payload only in the low half
  EXPECT_EQ(e5.convert(f32_from_bits(0x7F800000u)), 0x7C);  // +Inf
  EXPECT_EQ(ConversionTable::build<e4m3fn>({Round::kUp, Overflow::kSaturate, NanEncoding::kCuda})
                .convert(f32_from_bits(0x00000001u)),
            0x01);  // FP32 subnormal rounded up: only the low half says it is not zero
}

TEST(ConvertTable, Bf16BiasTrickMatchesEncode) {
  std::mt19937 rng(77);
  std::vector<float> x;
  for (std::uint32_t hi = 0; hi < (1u << 16); ++hi) {
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      x.push_back(f32_from_bits((hi << 16) | lo));
  }
  for (int i = 0; i < (1 << 20); ++i) x.push_back(f32_from_bits(rng()));
  std::vector<std::uint16_t> y(x.size());
  for (const Policy& p : all_policies()) {
    bf16_convert_array(x.data(), x.size(), y.data(), p);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint16_t want = encode<bf16>(x[i], p);
      ASSERT_EQ(y[i], want) << std::hex << f32_bits(x[i]) << " policy " << int(p.round)
                            << int(p.overflow) << int(p.nan);
      ASSERT_EQ(bf16_rne_bias(x[i], p), want);
    }
  }
  // Hand cases (RNE at bit 16): 0x3F808000 is a tie with even 0x3F80 -> 0x3F80; 0x3F818000 a tie
  // with odd 0x3F81 -> 0x3F82; 0x7F7F8000 a tie at the top -> Inf (IEEE) or max (satfinite).
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0x3F808000u), kIeeeNearestEven), 0x3F80);
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0x3F818000u), kIeeeNearestEven), 0x3F82);
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0x7F7F8000u), kIeeeNearestEven), 0x7F80);
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0x7F7F8000u), kCudaSatfinite), 0x7F7F);
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0x7FFFFFFFu), kCudaSatfinite), 0x7FFF);  // not 0x8000
  EXPECT_EQ(bf16_rne_bias(f32_from_bits(0xFFFFFFFFu), kMlDtypesIeee), 0xFFC0);   // not 0x0000
}

// fp16 goes through encode<fp16>; the oracle here is a brute-force nearest search over all 2^16
// fp16 encodings decoded from their fields (no formats/ code), for RNE with IEEE overflow, on
// every upper half of FP32 with low halves that make ties and near-ties.
TEST(ConvertTable, Fp16ArrayMatchesNearestEvenSearch) {
  std::vector<double> val(1u << 15);  // positive encodings 0x0000..0x7BFF (finite), by magnitude
  for (std::uint32_t b = 0; b < 0x7C00u; ++b) {
    const int e = int(b >> 10), m = int(b & 0x3FF);
    val[b] = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m + 1024), e - 25);
  }
  // Largest finite 65504; the overflow threshold is 65520 (halfway to 2^16), ties go to Inf
  // because 0x7BFF is odd.
  auto oracle = [&](float xf) -> std::uint16_t {
    const double x = double(xf);
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    if (a >= 65520.0) return std::uint16_t(sign | 0x7C00);
    // first encoding >= a, then compare with its lower neighbour
    const auto it = std::lower_bound(val.begin(), val.begin() + 0x7C00, a);
    std::uint32_t hi = std::uint32_t(it - val.begin());
    if (hi == 0) return sign;
    if (hi == 0x7C00u) return std::uint16_t(sign | 0x7BFF);  // (65504, 65520): nearer to max
    const std::uint32_t lo = hi - 1;
    const double dlo = a - val[lo], dhi = val[hi] - a;
    const std::uint32_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : ((lo & 1) ? hi : lo));
    return std::uint16_t(sign | pick);
  };
  std::vector<float> x;
  for (std::uint32_t hi = 0; hi < (1u << 16); ++hi) {
    if (((hi >> 7) & 0xFF) == 0xFF) continue;  // Inf/NaN inputs: encode<>'s own tests cover them
    for (std::uint32_t lo : {0x0000u, 0x1000u, 0x1001u, 0x0FFFu, 0x2000u, 0xF000u})
      x.push_back(f32_from_bits((hi << 16) | lo));
  }
  std::vector<std::uint16_t> y(x.size());
  fp16_convert_array(x.data(), x.size(), y.data(), kIeeeNearestEven);
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], oracle(x[i])) << std::hex << f32_bits(x[i]);
  // Saturating policy: only the overflow results change.
  fp16_convert_array(x.data(), x.size(), y.data(), kCudaSatfinite);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint16_t want = oracle(x[i]);
    if ((want & 0x7FFF) == 0x7C00) want = std::uint16_t((want & 0x8000) | 0x7BFF);
    ASSERT_EQ(y[i], want) << std::hex << f32_bits(x[i]);
  }
}

// Throughput on this machine, reported, never asserted (shared cores make timings noisy).
TEST(ConvertTable, ReportsThroughput) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 10.0f);
  std::vector<float> x(std::size_t{1} << 22);
  for (auto& v : x) v = n(rng);
  std::vector<std::uint8_t> y(x.size());
  const ConversionTable t = ConversionTable::build<e4m3fn>(kCudaSatfinite);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    t.convert_array(x.data(), x.size(), y.data());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::uint64_t sum = 0;
  for (std::uint8_t v : y) sum += v;
  RecordProperty("e4m3fn_M_per_s", int(double(x.size()) / best / 1e6));
  std::printf("FP32->e4m3fn table: %.0f M/s (checksum %llu)\n", double(x.size()) / best / 1e6,
              (unsigned long long)sum);
}

}  // namespace
}  // namespace attnsim
