// formats/float32.hpp: the wide IEEE views (fp32, fp64), the 1-8-13 "fp22" accumulator view,
// encode/decode entry points. Oracles, none of which calls formats/ code:
//  * the CPU: FP64 -> FP32 with AVX-512 embedded rounding (vcvtsd2ss {rn,rd,ru,rz}-sae, the
//    rounding fixed in the instruction, independent of MXCSR and of compiler FENV handling), and
//    FP32 -> FP64 by a plain cast (exact). Skipped on a CPU without AVX-512F (every non-x86 CPU).
//  * a scale-floor oracle in double: |x| * 2^-q is exact for the result's quantum 2^q, so floor,
//    the fraction and the mode's rule give the rounded value exactly (used for ties-away, which no
//    hardware offers, and for fp22, which no hardware exposes).
#include "formats/float32.hpp"

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace attnsim {
namespace {

const Round kRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp,
                         Round::kDown};
const char* kRoundName[] = {"rne", "rna", "rz", "ru", "rd"};

// Rounds x (finite, non-NaN) to a binary format with `man` explicit mantissa bits, min quantum
// exponent qmin (exponent of the subnormal lsb) and max finite `max`, IEEE overflow to Inf with
// the 7.4 directed rule. Returns the rounded value as a double (+-Inf on overflow).
double scale_floor_round(double x, int man, int qmin, double max, Round r) {
  if (x == 0) return x;
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): leading bit 2^(e-1)
  const int q = std::max(e - 1 - man, qmin);
  const double s = std::ldexp(a, -q);  // exact: a power-of-two scaling of a double
  const double fl = std::floor(s), frac = s - fl;
  bool up = false;
  switch (r) {
    case Round::kNearestEven:
      up = frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0);
      break;
    case Round::kNearestAway:
      up = frac >= 0.5;
      break;
    case Round::kTowardZero:
      up = false;
      break;
    case Round::kUp:
      up = !neg && frac != 0;
      break;
    case Round::kDown:
      up = neg && frac != 0;
      break;
  }
  double v = std::ldexp(fl + (up ? 1 : 0), q);
  if (v > max) {
    const bool toward_zero =
        r == Round::kTowardZero || (r == Round::kDown && !neg) || (r == Round::kUp && neg);
    v = toward_zero ? max : HUGE_VAL;
  }
  return neg ? -v : v;
}

const double kF32Max = std::ldexp(double((1 << 24) - 1), 104);
const double kF22Max = std::ldexp(double((1 << 14) - 1), 114);  // 1.1111111111111 x 2^127

// ------------------------------------------------------------------ FP64 -> FP32

#if defined(__x86_64__)
bool have_avx512() { return __builtin_cpu_supports("avx512f"); }

__attribute__((target("avx512f"))) float hw_d2f(double x, Round r) {
  const __m128 z = _mm_setzero_ps();
  const __m128d d = _mm_set_sd(x);
  switch (r) {
    case Round::kNearestEven:
      return _mm_cvtss_f32(_mm_cvt_roundsd_ss(z, d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    case Round::kTowardZero:
      return _mm_cvtss_f32(_mm_cvt_roundsd_ss(z, d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
    case Round::kUp:
      return _mm_cvtss_f32(_mm_cvt_roundsd_ss(z, d, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    case Round::kDown:
      return _mm_cvtss_f32(_mm_cvt_roundsd_ss(z, d, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    default:
      return 0;
  }
}
#else
// Not an x86 CPU: the tests that need AVX-512 skip.
bool have_avx512() { return false; }
float hw_d2f(double, Round) { return 0.0f; }
#endif

// FP64 inputs aimed at FP32's decision points: every FP32 exponent's midpoints +- a few FP64
// ulps, FP32 subnormal ties, the overflow tie 2^128 - 2^103, FP64 values far outside FP32's
// range, and random bit patterns.
std::vector<double> f64_probes() {
  std::vector<double> xs;
  std::mt19937_64 rng(17);
  auto add = [&](double v) {
    for (double d : {v, std::nextafter(v, 1e308), std::nextafter(v, 0.0),
                     std::nextafter(std::nextafter(v, 1e308), 1e308)}) {
      xs.push_back(d);
      xs.push_back(-d);
    }
  };
  for (int e = -160; e <= 128; ++e) {
    for (int k = 0; k < 8; ++k) {
      const std::uint64_t m = (rng() & ((1ull << 23) - 1));
      const double lo = std::ldexp(double((1ull << 23) | m), e - 23);  // an FP32-grid value
      add(lo);
      add(lo + std::ldexp(1.0, e - 24));  // midpoint to the next FP32 (subnormal grid differs,
                                          // the scale-floor oracle and the CPU sort that out)
    }
  }
  add(kF32Max);
  add(kF32Max + std::ldexp(1.0, 103));  // the overflow tie
  add(0x1p-150);                        // half the FP32 min subnormal: tie to 0
  add(0x1.8p-149);                      // tie 1|2 subnormal quanta
  for (double v : {1e-300, 4.9e-324, 1e300, 1e39, 1e-46}) add(v);
  for (int i = 0; i < 200000; ++i) {
    double d;
    std::uint64_t b = rng();
    std::memcpy(&d, &b, 8);
    if (std::isfinite(d)) xs.push_back(d);
  }
  return xs;
}

TEST(Float32, Fp64ToFp32MatchesCpuEmbeddedRounding) {
  if (!have_avx512()) GTEST_SKIP() << "CPU without AVX-512F";
  std::size_t bad = 0, n = 0;
  for (double x : f64_probes()) {
    for (Round r : {Round::kNearestEven, Round::kTowardZero, Round::kUp, Round::kDown}) {
      const std::uint32_t want = std::bit_cast<std::uint32_t>(hw_d2f(x, r));
      const std::uint32_t got = encode<fp32>(x, Policy{r, Overflow::kInf, NanEncoding::kIeee});
      ++n;
      if (got != want && ++bad <= 8) {
        ADD_FAILURE() << kRoundName[int(r)] << " " << std::hexfloat << x << ": cpu 0x" << std::hex
                      << want << ", attnsim 0x" << got;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << n;
}

// Every rounding mode, ties-away included, against the scale-floor oracle.
TEST(Float32, Fp64ToFp32AllModesScaleFloorOracle) {
  std::size_t bad = 0;
  for (double x : f64_probes()) {
    for (Round r : kRounds) {
      const double want = scale_floor_round(x, 23, -149, kF32Max, r);
      const std::uint32_t got = encode<fp32>(x, Policy{r, Overflow::kInf, NanEncoding::kIeee});
      if (std::bit_cast<std::uint32_t>(float(want)) != got && ++bad <= 8) {  // float(want) exact
        ADD_FAILURE() << kRoundName[int(r)] << " " << std::hexfloat << x << ": oracle " << want
                      << ", attnsim 0x" << std::hex << got;
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

// FP64 NaNs to FP32 under the ieee encoding: the CPU's cvtsd2ss (sign kept, top 23 payload bits
// kept, quiet bit set) is the spec of that encoding. Under cuda: 0x7FFFFFFF.
TEST(Float32, Fp64NanToFp32) {
  const std::uint64_t nans[] = {0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x7FF0000000000001ull,
                                0xFFF0000020000000ull, 0x7FF4000000000000ull, 0x7FFFFFFFFFFFFFFFull,
                                0xFFF123456789ABCDull};
  for (std::uint64_t b : nans) {
    const double d = std::bit_cast<double>(b);
    const std::uint32_t sign = std::uint32_t(b >> 32) & 0x80000000u;
    const std::uint32_t ieee = sign | 0x7FC00000u | std::uint32_t((b & 0xFFFFFFFFFFFFFull) >> 29);
    EXPECT_EQ(encode<fp32>(d, Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee}),
              ieee)
        << std::hex << b;
    EXPECT_EQ(encode<fp32>(d, Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda}),
              0x7FFFFFFFu);
    EXPECT_EQ(encode<fp32>(d, Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kMlDtypes}),
              sign | 0x7FC00000u);
    if (have_avx512()) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(hw_d2f(d, Round::kNearestEven)), ieee)
          << std::hex << b;
    }
  }
}

// FP32 -> FP64 and FP32 -> FP32 decodes: exact. The cast (float -> double) is exact by the C++
// standard for non-NaN; for NaN the CPU's cvtss2sd quiets and keeps the payload, the documented
// decode_f64 behaviour. Every exponent x several mantissas x both signs, and NaN payloads.
TEST(Float32, DecodeFp32IsExactWidening) {
  std::mt19937 rng(9);
  for (std::uint32_t hi = 0; hi < 512; ++hi) {  // sign + exponent
    for (int k = 0; k < 64; ++k) {
      const std::uint32_t b = (hi << 23) | (k < 2 ? std::uint32_t(k) : (rng() & 0x7FFFFF));
      const float f = std::bit_cast<float>(b);
      volatile float vf = f;  // keep the cast at run time (the CPU's, not the compiler's)
      const double want = vf;
      ASSERT_EQ(std::bit_cast<std::uint64_t>(decode_f64<fp32>(b)),
                std::bit_cast<std::uint64_t>(want))
          << std::hex << b;
      const std::uint32_t want32 = std::isnan(f) ? (b | 0x00400000u) : b;  // quiet bit forced
      ASSERT_EQ(std::bit_cast<std::uint32_t>(decode_f32<fp32>(b)), want32) << std::hex << b;
    }
  }
}

TEST(Float32, Fp32IdentityAndInf) {
  // FP32 -> FP32 is exact whatever the rounding mode; +-Inf stays Inf under inf, max under
  // saturate.
  for (std::uint32_t b : {0x3F800001u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x80000000u}) {
    for (Round r : kRounds) {
      EXPECT_EQ(
          encode<fp32>(std::bit_cast<float>(b), Policy{r, Overflow::kNaN, NanEncoding::kCuda}), b);
    }
  }
  EXPECT_EQ(
      encode<fp32>(-HUGE_VAL, Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda}),
      0xFF800000u);
  EXPECT_EQ(
      encode<fp32>(HUGE_VAL, Policy{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda}),
      0x7F7FFFFFu);
  EXPECT_EQ(
      encode<fp32>(1e300, Policy{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda}),
      0x7F7FFFFFu);
  // 2^128 - 2^103 is the FP32 overflow tie: max (odd mantissa) vs 2^128 -> even = Inf.
  EXPECT_EQ(encode<fp32>(kF32Max + 0x1p103,
                         Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda}),
            0x7F800000u);
  EXPECT_EQ(encode<fp32>(kF32Max + 0x1p103,
                         Policy{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda}),
            0x7F7FFFFFu);
  EXPECT_EQ(encode<fp32>(0x1p-150, Policy{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda}),
            0x00000000u);
  EXPECT_EQ(encode<fp32>(0x1p-150, Policy{Round::kNearestAway, Overflow::kInf, NanEncoding::kCuda}),
            0x00000001u);
}

// ------------------------------------------------------------------ fp22 (1-8-13)

TEST(Float32, Fp22LayoutConstants) {
  EXPECT_EQ(fp22::kBits, 22);
  EXPECT_EQ(fp22_to_fp32_bits(std::uint32_t(fp22::kMaxFinite)), 0x7F7FFC00u);  // 2^128 - 2^114
  EXPECT_EQ(fp22_to_fp32_bits(std::uint32_t(fp22::kInf)), 0x7F800000u);
  EXPECT_EQ(fp22_to_fp32_bits(std::uint32_t(fp22::kMinSubnormal)), 0x00000400u);  // 2^-139
  EXPECT_EQ(std::ldexp(1.0, fp22::kMinQuantumExp), double(std::bit_cast<float>(0x00000400u)));
}

// FP32 -> fp22 under all five modes against the scale-floor oracle (13 mantissa bits, quantum
// 2^-139, max 2^128 - 2^114): every exponent x tie/near-tie mantissas x both signs.
TEST(Float32, Fp22FromFp32AllModes) {
  std::mt19937 rng(23);
  std::size_t bad = 0, n = 0;
  for (std::uint32_t hi = 0; hi < 512; ++hi) {
    if ((hi & 0xFF) == 0xFF) continue;  // Inf/NaN: below
    for (int k = 0; k < 96; ++k) {
      std::uint32_t lo;
      if (k < 8) {
        const std::uint32_t fixed[] = {0, 1, 0x1FF, 0x200, 0x201, 0x3FF, 0x600, 0x7FFFFF};
        lo = fixed[k];
      } else {
        lo = rng() & 0x7FFFFF;
        if (k < 48) lo = (lo & ~0x3FFu) | 0x200u | (k & 1);  // ties and tie + 1
      }
      const std::uint32_t b = (hi << 23) | lo;
      const float x = std::bit_cast<float>(b);
      for (Round r : kRounds) {
        const double want = scale_floor_round(x, 13, -139, kF22Max, r);
        const std::uint32_t got = fp22_to_fp32_bits(
            std::uint32_t(convert<fp22, fp32>(b, Policy{r, Overflow::kInf, NanEncoding::kIeee})));
        ++n;
        if (std::bit_cast<std::uint32_t>(float(want)) != got && ++bad <= 8) {
          ADD_FAILURE() << kRoundName[int(r)] << " 0x" << std::hex << b << ": oracle "
                        << std::hexfloat << want << ", attnsim 0x" << got;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << n;
  // Golden: 1 + 2^-14 (FP32 0x3F800200) is the fp22 tie 1 | 1 + 2^-13: RNE even -> 1, RNA up.
  const auto to22 = [](std::uint32_t b, Round r) {
    return fp22_to_fp32_bits(
        std::uint32_t(convert<fp22, fp32>(b, Policy{r, Overflow::kInf, NanEncoding::kIeee})));
  };
  EXPECT_EQ(to22(0x3F800200u, Round::kNearestEven), 0x3F800000u);
  EXPECT_EQ(to22(0x3F800200u, Round::kNearestAway), 0x3F800400u);
  EXPECT_EQ(to22(0x3F800600u, Round::kNearestEven), 0x3F800800u);  // tie odd|even -> even (up)
  EXPECT_EQ(to22(0x7F7FFE00u, Round::kNearestEven), 0x7F800000u);  // top tie, odd max -> Inf
  EXPECT_EQ(to22(0x7F7FFE00u, Round::kTowardZero), 0x7F7FFC00u);
  EXPECT_EQ(to22(0x00000200u, Round::kNearestEven), 0x00000000u);  // FP32 subnormal tie 0 | 2^-139
  EXPECT_EQ(to22(0x00000201u, Round::kNearestEven), 0x00000400u);
  EXPECT_EQ(to22(0xFF800000u, Round::kTowardZero), 0xFF800000u);  // -Inf stays
}

// The truncation view SageAttention2 observed is RZ to fp22 for every non-NaN input; NaNs stay
// NaN (quiet) with sign and top payload. Exhaustive over sign x exponent x 1024 mantissas.
TEST(Float32, Fp22TruncationIsRzAndKeepsNaN) {
  std::mt19937 rng(29);
  for (std::uint32_t hi = 0; hi < 512; ++hi) {
    for (int k = 0; k < 1024; ++k) {
      const std::uint32_t b = (hi << 23) | (rng() & 0x7FFFFF);
      const float x = std::bit_cast<float>(b);
      const std::uint32_t got = fp32_truncate_to_fp22_bits(b);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(std::bit_cast<float>(got))) << std::hex << b;
        ASSERT_EQ(got >> 31, b >> 31) << std::hex << b;
        ASSERT_EQ(got & 0x3FFu, 0u);
        continue;
      }
      if (std::isinf(x)) {
        ASSERT_EQ(got, b);
        continue;
      }
      ASSERT_EQ(std::bit_cast<float>(got),
                float(scale_floor_round(x, 13, -139, kF22Max, Round::kTowardZero)))
          << std::hex << b;
      ASSERT_EQ(std::signbit(std::bit_cast<float>(got)), std::signbit(x));
    }
  }
}

}  // namespace
}  // namespace attnsim
