// numerics/convert_array: every vector kernel bit for bit against its `_ref` loop over formats/
// (itself proven against the H100 and independent oracles in tests/formats and tests/hw), on an
// adversarial set: every FP32 upper half with the low halves that decide fp16 and 8-bit ties,
// directed roundings and sticky bits, NaN payloads, subnormals, ±0, the values next to every
// format's overflow threshold; every Policy (5 × 4 × 3) on part of it; array lengths and offsets
// that exercise the tails; more slow lanes than one vector pass holds; in-place rounding. Run with
// ATTNSIM_ISA=scalar the fast functions are the references and the tests pass trivially; the
// exhaustive version is convert_array_long_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"

namespace attnsim {
namespace {

constexpr Encoding kFloats[] = {Encoding::kBf16, Encoding::kFp16, Encoding::kE4m3fn,
                                Encoding::kE5m2};
constexpr Round kRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero,
                             Round::kUp, Round::kDown};

std::vector<Policy> all_policies() {
  std::vector<Policy> out;
  for (Round r : kRounds)
    for (int o = 0; o < 4; ++o)
      for (int n = 0; n < 3; ++n) out.push_back({r, Overflow(o), NanEncoding(n)});
  return out;
}

// Low halves that matter: 0 and the extremes (sticky), fp16's round bit (0x1000) and its
// neighbours, bf16's (0x8000) and its neighbours.
constexpr std::uint32_t kLows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000,
                                   0x7FFF, 0x8000, 0x8001, 0xFFFF};

std::vector<float> adversarial(std::size_t stride_hi) {
  std::vector<float> x;
  std::mt19937 rng(23);
  for (std::uint32_t hi = 0; hi < 65536; hi += std::uint32_t(stride_hi)) {
    for (std::uint32_t lo : kLows) x.push_back(f32_from_bits((hi << 16) | lo));
    x.push_back(f32_from_bits((hi << 16) | (rng() & 0xFFFF)));
  }
  return x;
}

template <class Out>
void expect_encode_equal(Encoding e, const std::vector<float>& x, Policy p) {
  std::vector<Out> got(x.size()), want(x.size());
  encode_array(e, x.data(), x.size(), got.data(), p);
  encode_array_ref(e, x.data(), x.size(), want.data(), p);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (got[i] != want[i] && ++bad <= 3) {
      ADD_FAILURE() << encoding_name(e) << " {" << round_spelling(p.round) << ", "
                    << overflow_spelling(p.overflow) << ", " << nan_encoding_spelling(p.nan)
                    << "} input 0x" << std::hex << f32_bits(x[i]) << ": ref 0x" << want[i]
                    << ", fast 0x" << got[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

void expect_round_equal(Encoding e, const std::vector<float>& x, Policy p) {
  std::vector<float> got(x.size()), want(x.size());
  round_array(e, x.data(), x.size(), got.data(), p);
  round_array_ref(e, x.data(), x.size(), want.data(), p);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), x.size() * sizeof(float)), 0)
      << encoding_name(e) << " round_array, " << round_spelling(p.round);
}

TEST(ConvertArray, EncodeEveryUpperHalfEveryMode) {
  const std::vector<float> x = adversarial(1);
  for (Encoding e : kFloats) {
    for (Round r : kRounds) {
      const Policy p{r, Overflow::kSaturate, NanEncoding::kIeee};
      if (encoding_traits(e).bits == 8) {
        expect_encode_equal<std::uint8_t>(e, x, p);
      } else {
        expect_encode_equal<std::uint16_t>(e, x, p);
      }
      expect_encode_equal<std::uint32_t>(e, x, p);
      expect_round_equal(e, x, p);
    }
  }
}

TEST(ConvertArray, EncodeEveryPolicy) {
  const std::vector<float> x = adversarial(61);
  for (Encoding e : kFloats) {
    for (const Policy& p : all_policies()) {
      if (encoding_traits(e).bits == 8) {
        expect_encode_equal<std::uint8_t>(e, x, p);
      } else {
        expect_encode_equal<std::uint16_t>(e, x, p);
      }
      expect_round_equal(e, x, p);
    }
  }
}

// Around each format's overflow threshold, its midpoints and its smallest subnormal, both signs,
// ±1 FP32 ulp: the cases where the vector code hands a lane to the scalar encoder or not.
TEST(ConvertArray, EncodeOverflowAndSubnormalEdges) {
  std::vector<float> x;
  for (float v : {448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65504.0f, 65520.0f, 0x1.fep127f,
                  0x1.ff0p127f, 0x1p-6f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-14f, 0x1p-16f,
                  0x1p-17f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-126f, 0x1p-149f, 0.0f}) {
    for (int d = -2; d <= 2; ++d) {
      const std::uint32_t b = f32_bits(v) + std::uint32_t(d);
      x.push_back(f32_from_bits(b));
      x.push_back(f32_from_bits(b | 0x80000000u));
    }
  }
  for (std::uint32_t b : {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFC00000u, 0x7FBFFFFFu,
                          0x7FFFFFFFu, 0x80000000u, 0x00000001u, 0x807FFFFFu})
    x.push_back(f32_from_bits(b));
  for (Encoding e : kFloats) {
    for (const Policy& p : all_policies()) {
      if (encoding_traits(e).bits == 8) {
        expect_encode_equal<std::uint8_t>(e, x, p);
      } else {
        expect_encode_equal<std::uint16_t>(e, x, p);
      }
      expect_round_equal(e, x, p);
    }
  }
}

// Lengths 0..70 at offsets 0..3 (tails and unaligned starts), outputs around the written range
// untouched; a run of NaNs longer than a pass's list of slow lanes; rounding in place.
TEST(ConvertArray, TailsOffsetsSlowRunsInPlace) {
  std::vector<float> pool = adversarial(257);
  std::vector<float> nans(5000, f32_from_bits(0x7FC01234u));
  for (std::size_t i = 0; i < nans.size(); i += 7) nans[i] = 1.5f;
  pool.insert(pool.end(), nans.begin(), nans.end());
  for (Encoding e : {Encoding::kBf16, Encoding::kE4m3fn}) {
    const Policy p{Round::kNearestEven, Overflow::kNaN, NanEncoding::kMlDtypes};
    for (std::size_t off = 0; off < 4; ++off) {
      for (std::size_t n = 0; n <= 70; ++n) {
        std::vector<std::uint32_t> got(n + 2, 0xDEADBEEF), want(n + 2, 0xDEADBEEF);
        encode_array(e, pool.data() + off + 3 * n, n, got.data() + 1, p);
        encode_array_ref(e, pool.data() + off + 3 * n, n, want.data() + 1, p);
        ASSERT_EQ(got, want) << encoding_name(e) << " n " << n << " offset " << off;
      }
    }
    const std::size_t start = pool.size() - nans.size() - 100;
    std::vector<float> x(pool.begin() + std::ptrdiff_t(start), pool.end());
    expect_encode_equal<std::uint8_t>(Encoding::kE4m3fn, x, p);
    std::vector<float> in_place = x, want(x.size());
    round_array(e, in_place.data(), in_place.size(), in_place.data(), p);
    round_array_ref(e, x.data(), x.size(), want.data(), p);
    EXPECT_EQ(std::memcmp(in_place.data(), want.data(), x.size() * sizeof(float)), 0);
  }
}

TEST(ConvertArray, DecodeEveryCode) {
  std::vector<std::uint16_t> c16(65536 + 5);
  for (std::uint32_t i = 0; i < c16.size(); ++i) c16[i] = std::uint16_t(i);
  std::vector<std::uint8_t> c8(256 + 5);
  for (std::uint32_t i = 0; i < c8.size(); ++i) c8[i] = std::uint8_t(i);
  for (Encoding e : kFloats) {
    const bool wide = encoding_traits(e).bits == 16;
    const std::size_t n = wide ? c16.size() : c8.size();
    std::vector<float> got(n), want(n);
    if (wide) {
      decode_array(e, c16.data(), n, got.data());
      decode_array_ref(e, c16.data(), n, want.data());
    } else {
      decode_array(e, c8.data(), n, got.data());
      decode_array_ref(e, c8.data(), n, want.data());
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << encoding_name(e);
  }
}

TEST(ConvertArray, RoundToIntEveryModeAndWidth) {
  std::vector<float> x = adversarial(31);
  for (int k = -1200; k <= 1200; ++k) x.push_back(float(k) * 0.25f);  // ties, ±saturation
  for (float v : {127.5f, -128.5f, 7.5f, -8.5f, 1.5f, -2.5f, 0.49999997f, -0.49999997f, 0x1p31f,
                  -3e9f, 1e30f, -0.0f})
    x.push_back(v);
  for (Round r : kRounds) {
    for (int bits : {8, 4, 2}) {
      std::vector<std::int32_t> got(x.size()), want(x.size());
      round_to_int_array(x.data(), x.size(), got.data(), r, bits);
      round_to_int_array_ref(x.data(), x.size(), want.data(), r, bits);
      EXPECT_EQ(got, want) << round_spelling(r) << " s" << bits;
    }
  }
}

TEST(ConvertArray, BadArgumentsThrow) {
  float x = 1.0f;
  std::uint8_t b8;
  std::int32_t i32;
  EXPECT_THROW(encode_array(Encoding::kBf16, &x, 1, &b8, kCudaRn), std::invalid_argument);
  EXPECT_THROW(round_to_int_array(&x, 1, &i32, Round::kNearestEven, 3), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
