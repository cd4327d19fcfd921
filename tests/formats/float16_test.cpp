// formats/float16.hpp (bf16, fp16): golden boundary tables as bit patterns under all five
// rounding modes, +-Inf per policy, NaN payloads per encoding, and two independent oracles that
// are not the spec table:
//  * fp16: the CPU's F16C instructions (vcvtps2ph with an explicit rounding immediate for RNE,
//    RD, RU, RZ; vcvtph2ps for decode). IEEE 754 hardware, nothing shared with attnsim. Skipped
//    (GTEST_SKIP) on a CPU without F16C (and on every non-x86 CPU).
//  * bf16: the integer bit tricks of numerics-anchors.md 3.2 (RNE = (u + 0x7FFF + lsb) >> 16,
//    RZ = u >> 16, ties-away = (u + 0x8000) >> 16, directed = truncate then +1 on a non-zero
//    remainder for the sign that rounds away). bf16 is the top half of an FP32, so these are
//    exact for every non-NaN input, subnormals, overflow and Inf included.
#include "formats/float16.hpp"

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "tests/formats/oracle.hpp"

namespace attnsim {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const Round kRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp,
                         Round::kDown};
const char* kRoundName[] = {"rne", "rna", "rz", "ru", "rd"};

// ---------------------------------------------------------------- F16C hardware oracle (fp16)

#if defined(__x86_64__)
bool have_f16c() { return __builtin_cpu_supports("f16c"); }

// imm8 rounding control of vcvtps2ph: 0 nearest even, 1 down, 2 up, 3 toward zero. The
// immediate (bit 2 clear) overrides MXCSR, so the test does not depend on the FPU state.
template <int kImm>
__attribute__((target("f16c"))) void f16c_encode4(const float* in, std::uint16_t* out) {
  const __m128i h = _mm_cvtps_ph(_mm_loadu_ps(in), kImm);
  alignas(16) std::uint16_t tmp[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
  for (int i = 0; i < 4; ++i) out[i] = tmp[i];
}
__attribute__((target("f16c"))) float f16c_decode(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
#else
// Not an x86 CPU: the tests that need F16C skip.
bool have_f16c() { return false; }
template <int kImm>
void f16c_encode4(const float*, std::uint16_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = 0;
}
float f16c_decode(std::uint16_t) { return 0.0f; }
#endif

// F16C is IEEE with Inf on overflow (directed modes per 7.4) and NaN quieted with its top payload
// kept: attnsim's {mode, inf, ieee}.
template <int kImm>
void f16c_sweep(Round r, std::size_t* bad, std::size_t* n) {
  const Policy p{r, Overflow::kInf, NanEncoding::kIeee};
  std::mt19937 rng(11);
  float in[4];
  std::uint16_t hw[4];
  // Every upper 16 bits (all exponents, signs, NaN/Inf) x 16 low halves: the fp16 rounding
  // point of a normal input sits in bits 12..0, so 0x0FFF/0x1000/0x1001 probe the ties; the
  // rest are random.
  const std::uint32_t fixed[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0xFFFF};
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    for (int k = 0; k < 16; k += 4) {
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t lo = (k + j) < 8 ? fixed[k + j] : (rng() & 0xFFFF);
        in[j] = std::bit_cast<float>((hi << 16) | lo);
      }
      f16c_encode4<kImm>(in, hw);
      for (int j = 0; j < 4; ++j) {
        const std::uint16_t got = encode<fp16>(in[j], p);
        ++*n;
        if (got != hw[j] && ++*bad <= 8) {
          ADD_FAILURE() << kRoundName[int(r)] << " input 0x" << std::hex
                        << std::bit_cast<std::uint32_t>(in[j]) << ": F16C 0x" << hw[j]
                        << ", attnsim 0x" << got;
        }
      }
    }
  }
}

TEST(Float16, Fp16EncodeMatchesF16cAllIeeeModes) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  std::size_t bad = 0, n = 0;
  f16c_sweep<0>(Round::kNearestEven, &bad, &n);
  f16c_sweep<1>(Round::kDown, &bad, &n);
  f16c_sweep<2>(Round::kUp, &bad, &n);
  f16c_sweep<3>(Round::kTowardZero, &bad, &n);
  EXPECT_EQ(bad, 0u) << "of " << n;
  EXPECT_EQ(n, 4u * 65536 * 16);
}

// Every fp16 code decodes exactly as vcvtph2ps does, bit for bit (NaNs: sign and payload kept,
// quiet bit set, which is what the hardware does for a signalling half).
TEST(Float16, Fp16DecodeMatchesF16cEveryCode) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float hw = f16c_decode(std::uint16_t(c));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(decode_f32<fp16>(std::uint16_t(c))),
              std::bit_cast<std::uint32_t>(hw))
        << std::hex << c;
    // FP64 decode: same value (NaN: NaN of the same sign).
    const double d = decode_f64<fp16>(std::uint16_t(c));
    if (std::isnan(hw)) {
      ASSERT_TRUE(std::isnan(d) && std::signbit(d) == std::signbit(hw)) << std::hex << c;
    } else {
      ASSERT_EQ(d, double(hw)) << std::hex << c;
    }
  }
}

// ---------------------------------------------------------------- bf16 bit-trick oracle

std::uint16_t bf16_trick(std::uint32_t u, Round r) {
  const bool neg = u >> 31;
  const std::uint32_t low = u & 0xFFFF;
  switch (r) {
    case Round::kNearestEven:
      return std::uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    case Round::kNearestAway:
      return std::uint16_t((u + 0x8000) >> 16);
    case Round::kTowardZero:
      return std::uint16_t(u >> 16);
    case Round::kUp:
      return std::uint16_t((u >> 16) + (!neg && low != 0));
    case Round::kDown:
      return std::uint16_t((u >> 16) + (neg && low != 0));
  }
  return 0;
}

// Every non-NaN FP32 upper half x 16 low halves x 5 modes under the IEEE overflow policy (the
// tricks carry into the exponent and reach Inf exactly where IEEE does; the directed overflow
// rule falls out of truncation: 0x7F7FFFFF truncates to max 0x7F7F).
TEST(Float16, Bf16EncodeMatchesBitTricksAllModes) {
  std::mt19937 rng(5);
  const std::uint32_t fixed[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000};
  std::size_t bad = 0, n = 0;
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    if ((hi & 0x7F80) == 0x7F80 && (hi & 0x7F) != 0) continue;  // NaN upper halves: separate test
    for (int k = 0; k < 16; ++k) {
      const std::uint32_t lo = k < 8 ? fixed[k] : (rng() & 0xFFFF);
      const std::uint32_t u = (hi << 16) | lo;
      if (std::isnan(std::bit_cast<float>(u))) continue;  // 0x7F80xxxx with a non-zero low half
      const float x = std::bit_cast<float>(u);
      for (Round r : kRounds) {
        const Policy p{r, Overflow::kInf, NanEncoding::kIeee};
        const std::uint16_t want = bf16_trick(u, r), got = encode<bf16>(x, p);
        ++n;
        if (got != want && ++bad <= 8) {
          ADD_FAILURE() << kRoundName[int(r)] << " 0x" << std::hex << u << ": trick 0x" << want
                        << ", attnsim 0x" << got;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << n;
}

// Every bf16 code decodes to the FP32 whose top half it is (NaN: quiet bit forced, payload kept).
TEST(Float16, Bf16DecodeIsTheTopHalf) {
  for (std::uint32_t c = 0; c < 65536; ++c) {
    std::uint32_t want = c << 16;
    if ((c & 0x7F80) == 0x7F80 && (c & 0x7F) != 0) want |= 0x00400000u;  // sNaN -> qNaN
    ASSERT_EQ(std::bit_cast<std::uint32_t>(decode_f32<bf16>(std::uint16_t(c))), want)
        << std::hex << c;
  }
}

// ---------------------------------------------------------------- golden tables

constexpr int kOv = -1;  // overflow: the policy's result
struct Row {
  std::uint32_t in;  // FP32 bits
  int r[5];          // rne, rna, rz, ru, rd (positive input; negative mirrors RU/RD)
  const char* why;
};

template <class Fmt>
void check_rows(const Row* rows, std::size_t n) {
  // policy, its positive overflow result for fp16 and bf16
  struct Ov {
    Overflow o;
    NanEncoding e;
    int fp16, bf16;
  };
  const Ov ovs[] = {
      {Overflow::kInf, NanEncoding::kIeee, 0x7C00, 0x7F80},
      {Overflow::kSaturate, NanEncoding::kCuda, 0x7BFF, 0x7F7F},  // cvt.rn.satfinite.f16.f32
      {Overflow::kSaturateFinite, NanEncoding::kMlDtypes, 0x7BFF, 0x7F7F},
      {Overflow::kNaN, NanEncoding::kMlDtypes, 0x7E00, 0x7FC0},
      {Overflow::kNaN, NanEncoding::kCuda, 0x7FFF, 0x7FFF}};
  const bool is_fp16 = Fmt::kExpBits == 5;
  for (std::size_t i = 0; i < n; ++i) {
    for (const Ov& ov : ovs) {
      for (int ri = 0; ri < 5; ++ri) {
        for (bool neg : {false, true}) {
          int want = rows[i].r[neg && ri >= 3 ? (ri == 3 ? 4 : 3) : ri];
          if (want == kOv) want = is_fp16 ? ov.fp16 : ov.bf16;
          if (neg) want |= 0x8000;
          const float x = std::bit_cast<float>(rows[i].in | (neg ? 0x80000000u : 0));
          const Policy p{kRounds[ri], ov.o, ov.e};
          EXPECT_EQ(int(encode<Fmt>(x, p)), want)
              << rows[i].why << " (0x" << std::hex << rows[i].in << ") " << kRoundName[ri]
              << " neg=" << neg << " ov " << int(ov.o);
          EXPECT_EQ(int(encode<Fmt>(double(x), p)), want)
              << rows[i].why << " from f64, " << kRoundName[ri];
        }
      }
    }
  }
}

TEST(Float16, Fp16BoundariesAllModes) {
  const Row rows[] = {
      {0x477FE000u, {0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF}, "65504 = max, exact"},
      {0x477FE001u, {0x7BFF, 0x7BFF, 0x7BFF, kOv, 0x7BFF}, "65504 + 1 FP32 ulp: RU overflows"},
      {0x477FEFFFu, {0x7BFF, 0x7BFF, 0x7BFF, kOv, 0x7BFF}, "65519.996: just below the tie"},
      {0x477FF000u,
       {kOv, kOv, 0x7BFF, kOv, 0x7BFF},
       "65520: tie 65504 (odd) | 65536 -> even = overflow"},
      {0x47800000u, {kOv, kOv, 0x7BFF, kOv, 0x7BFF}, "65536 = 2^16"},
      {0x7F7FFFFFu, {kOv, kOv, 0x7BFF, kOv, 0x7BFF}, "FP32 max"},
      {0x477FD000u, {0x7BFE, 0x7BFF, 0x7BFE, 0x7BFF, 0x7BFE}, "65488: tie 65472 (even) | 65504"},
      {0x33800000u, {0x0001, 0x0001, 0x0001, 0x0001, 0x0001}, "2^-24 = min subnormal"},
      {0x33000000u, {0x0000, 0x0001, 0x0000, 0x0001, 0x0000}, "2^-25: tie 0 | 2^-24 -> even 0"},
      {0x33000001u, {0x0001, 0x0001, 0x0000, 0x0001, 0x0000}, "2^-25 + ulp: above the tie"},
      {0x32FFFFFFu, {0x0000, 0x0000, 0x0000, 0x0001, 0x0000}, "2^-25 - ulp: below the tie"},
      {0x33C00000u,
       {0x0002, 0x0002, 0x0001, 0x0002, 0x0001},
       "1.5 x 2^-24: tie codes 1|2 -> even 2"},
      {0x387FE000u,
       {0x0400, 0x0400, 0x03FF, 0x0400, 0x03FF},
       "1023.5 x 2^-24: tie max subnormal | min normal"},
      {0x38800000u, {0x0400, 0x0400, 0x0400, 0x0400, 0x0400}, "2^-14 = min normal"},
      {0x00000001u, {0x0000, 0x0000, 0x0000, 0x0001, 0x0000}, "FP32 min subnormal"},
      {0x3F801000u,
       {0x3C00, 0x3C01, 0x3C00, 0x3C01, 0x3C00},
       "1 + 2^-11: tie 1 | 1+2^-10 -> even 0x3C00"},
      {0x3F803000u,
       {0x3C02, 0x3C02, 0x3C01, 0x3C02, 0x3C01},
       "1 + 3 x 2^-11: tie odd | even -> 0x3C02"},
      {0x00000000u, {0x0000, 0x0000, 0x0000, 0x0000, 0x0000}, "+0 (negative row: -0 = 0x8000)"},
  };
  check_rows<fp16>(rows, std::size(rows));
}

TEST(Float16, Bf16BoundariesAllModes) {
  const Row rows[] = {
      {0x7F7F0000u, {0x7F7F, 0x7F7F, 0x7F7F, 0x7F7F, 0x7F7F}, "bf16 max, exact"},
      {0x7F7F0001u, {0x7F7F, 0x7F7F, 0x7F7F, kOv, 0x7F7F}, "max + 1 FP32 ulp"},
      {0x7F7F7FFFu, {0x7F7F, 0x7F7F, 0x7F7F, kOv, 0x7F7F}, "just below the top tie"},
      {0x7F7F8000u,
       {kOv, kOv, 0x7F7F, kOv, 0x7F7F},
       "tie max (odd 0x7F7F) | 2^128 -> even = overflow"},
      {0x7F7FFFFFu, {kOv, kOv, 0x7F7F, kOv, 0x7F7F}, "FP32 max"},
      {0x3F808000u, {0x3F80, 0x3F81, 0x3F80, 0x3F81, 0x3F80}, "tie 1 | 1+2^-7 -> even 0x3F80"},
      {0x3F818000u, {0x3F82, 0x3F82, 0x3F81, 0x3F82, 0x3F81}, "tie odd 0x3F81 | 0x3F82 -> 0x3F82"},
      {0x00008000u,
       {0x0000, 0x0001, 0x0000, 0x0001, 0x0000},
       "2^-134: tie 0 | bf16 min subnormal -> 0"},
      {0x00008001u,
       {0x0001, 0x0001, 0x0000, 0x0001, 0x0000},
       "above the bottom tie (kept, not flushed)"},
      {0x00000001u, {0x0000, 0x0000, 0x0000, 0x0001, 0x0000}, "FP32 min subnormal"},
      {0x00018000u, {0x0002, 0x0002, 0x0001, 0x0002, 0x0001}, "subnormal tie 1|2 -> even 2"},
      {0x007F8000u,
       {0x0080, 0x0080, 0x007F, 0x0080, 0x007F},
       "tie max subnormal | min normal -> 0x0080"},
      {0x00800000u, {0x0080, 0x0080, 0x0080, 0x0080, 0x0080}, "min normal 2^-126"},
  };
  check_rows<bf16>(rows, std::size(rows));
}

TEST(Float16, InfInputsEveryPolicy) {
  struct R {
    Overflow o;
    NanEncoding e;
    int fp16, bf16;  // for +Inf; -Inf = | 0x8000
  };
  const R rows[] = {
      {Overflow::kInf, NanEncoding::kCuda, 0x7C00, 0x7F80},
      {Overflow::kSaturate, NanEncoding::kCuda, 0x7BFF, 0x7F7F},            // satfinite: Inf -> max
      {Overflow::kSaturateFinite, NanEncoding::kMlDtypes, 0x7C00, 0x7F80},  // Inf kept
      {Overflow::kNaN, NanEncoding::kMlDtypes, 0x7E00, 0x7FC0},
      {Overflow::kNaN, NanEncoding::kCuda, 0x7FFF, 0x7FFF},
      {Overflow::kNaN, NanEncoding::kIeee, 0x7E00, 0x7FC0}};
  for (const R& r : rows) {
    for (Round rd : kRounds) {
      const Policy p{rd, r.o, r.e};
      for (bool neg : {false, true}) {
        const float x = neg ? -kInf : kInf;
        const int s = neg ? 0x8000 : 0;
        EXPECT_EQ(int(encode<fp16>(x, p)), s | r.fp16) << int(r.o) << " " << kRoundName[int(rd)];
        EXPECT_EQ(int(encode<bf16>(x, p)), s | r.bf16) << int(r.o) << " " << kRoundName[int(rd)];
        EXPECT_EQ(int(encode<bf16>(double(x), p)), s | r.bf16) << "f64 " << int(r.o);
      }
    }
  }
}

TEST(Float16, NanInputsEveryEncoding) {
  struct R {
    std::uint32_t in;
    int fp16[3], bf16[3];  // cuda, ml_dtypes, ieee
    const char* why;
  };
  const R rows[] = {
      {0x7FC00000u, {0x7FFF, 0x7E00, 0x7E00}, {0x7FFF, 0x7FC0, 0x7FC0}, "+qNaN"},
      {0xFFC00000u,
       {0x7FFF, 0xFE00, 0xFE00},
       {0x7FFF, 0xFFC0, 0xFFC0},
       "-qNaN: CUDA drops the sign"},
      {0x7F800001u,
       {0x7FFF, 0x7E00, 0x7E00},
       {0x7FFF, 0x7FC0, 0x7FC0},
       "+sNaN, payload below both formats"},
      {0xFFA00000u,
       {0x7FFF, 0xFE00, 0xFF00},
       {0x7FFF, 0xFFC0, 0xFFE0},
       "-sNaN 01...: ieee keeps top bits"},
      {0x7FFFFFFFu, {0x7FFF, 0x7E00, 0x7FFF}, {0x7FFF, 0x7FC0, 0x7FFF}, "all-ones payload"},
      {0x7F812345u, {0x7FFF, 0x7E00, 0x7E09}, {0x7FFF, 0x7FC0, 0x7FC1}, "sNaN payload 0x012345"},
      {0xFFD55555u, {0x7FFF, 0xFE00, 0xFEAA}, {0x7FFF, 0xFFC0, 0xFFD5}, "-qNaN payload 0x555555"},
  };
  const NanEncoding encs[] = {NanEncoding::kCuda, NanEncoding::kMlDtypes, NanEncoding::kIeee};
  for (const R& r : rows) {
    const float x = std::bit_cast<float>(r.in);
    for (int k = 0; k < 3; ++k) {
      for (Overflow o : {Overflow::kSaturate, Overflow::kInf, Overflow::kNaN}) {
        const Policy p{Round::kTowardZero, o, encs[k]};
        EXPECT_EQ(int(encode<fp16>(x, p)), r.fp16[k]) << r.why << " enc " << k;
        EXPECT_EQ(int(encode<bf16>(x, p)), r.bf16[k]) << r.why << " enc " << k;
        EXPECT_EQ(int(encode<fp16>(double(x), p)), r.fp16[k]) << r.why << " f64 enc " << k;
      }
    }
  }
  if (have_f16c()) {  // the ieee column is what the hardware does
    for (const R& r : rows) {
      float in[4] = {std::bit_cast<float>(r.in), 0, 0, 0};
      std::uint16_t hw[4];
      f16c_encode4<0>(in, hw);
      EXPECT_EQ(int(hw[0]), r.fp16[2]) << r.why;
    }
  }
}

// FP64 sources round once: doubles within 2^-40 relative of an fp16/bf16 midpoint, which FP32
// would collapse onto the midpoint, and doubles outside FP32's range.
TEST(Float16, Fp64SourcesRoundOnce) {
  const Policy rne = kIeeeNearestEven;
  // bf16: 1 + 2^-8 is the tie 0x3F80 | 0x3F81; + 2^-40 must round up.
  EXPECT_EQ(encode<bf16>(1 + 0x1p-8 + 0x1p-40, rne), 0x3F81);
  EXPECT_EQ(encode<bf16>(1 + 0x1p-8 - 0x1p-40, rne), 0x3F80);
  EXPECT_EQ(encode<bf16>(1 + 0x1p-8, rne), 0x3F80);  // the tie itself: even
  // fp16: 65520 - 2^-20 is below the overflow tie: 65504 (FP32 would make it 65520 -> Inf).
  EXPECT_EQ(encode<fp16>(65520 - 0x1p-20, rne), 0x7BFF);
  EXPECT_EQ(encode<fp16>(65520 + 0x1p-20, rne), 0x7C00);
  // fp16: 2^-25 (1 + 2^-40): above the 0 | min subnormal tie -> 0x0001.
  EXPECT_EQ(encode<fp16>(0x1p-25 * (1 + 0x1p-40), rne), 0x0001);
  // bf16 top tie from above by a hair: overflow; from below: max.
  const double top_tie = std::ldexp(255.5, 120);  // (0x7F7F + 0x7F80) / 2 in value
  EXPECT_EQ(encode<bf16>(top_tie * (1 - 0x1p-40), rne), 0x7F7F);
  EXPECT_EQ(encode<bf16>(top_tie * (1 + 0x1p-40), rne), 0x7F80);
  // Outside FP32: bf16 has FP32's exponent range, so 1e39 overflows and 1e-50 underflows; RZ/RU
  // tell a one-step conversion from one through FP32 (which would give Inf / +0).
  EXPECT_EQ(encode<bf16>(1e39, Policy{Round::kTowardZero, Overflow::kInf, NanEncoding::kIeee}),
            0x7F7F);
  EXPECT_EQ(encode<bf16>(1e-50, Policy{Round::kUp, Overflow::kInf, NanEncoding::kIeee}), 0x0001);
  EXPECT_EQ(encode<bf16>(-1e-50, Policy{Round::kUp, Overflow::kInf, NanEncoding::kIeee}), 0x8000);
  EXPECT_EQ(encode<fp16>(-1e-300, Policy{Round::kDown, Overflow::kInf, NanEncoding::kIeee}),
            0x8001);
}

}  // namespace
}  // namespace attnsim
