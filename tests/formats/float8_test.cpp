// formats/float8.hpp (e4m3fn, e5m2): hand-written golden tables as bit patterns, each row naming
// its rounding case: the overflow and subnormal boundaries under all five rounding modes and
// every overflow policy, +-0, NaN of both signs with several payloads, +-Inf under each policy,
// the special-value rows where CUDA satfinite, NOSAT (cuda_fp8.hpp) and ml_dtypes (float8.h)
// disagree, FP64 sources that a convert-through-FP32 implementation gets wrong, and the named
// satfinite entry points. The generic midpoint sweeps live in convert_oracle_test.cpp and
// exmy_test.cpp; this file is the human-checkable layer.
#include "formats/float8.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tests/formats/oracle.hpp"

namespace attnsim {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const Round kRounds[] = {Round::kNearestEven, Round::kNearestAway, Round::kTowardZero, Round::kUp,
                         Round::kDown};
const char* kRoundName[] = {"rne", "rna", "rz", "ru", "rd"};

// A row: input, then the result under rne, rna, rz, ru, rd. kOv marks "overflow": the result is
// whatever the overflow policy gives for that sign (checked for each policy below).
constexpr int kOv = -1;
struct Row {
  float x;
  int r[5];
  const char* why;
};

// Overflow result of each policy for a positive input (negative: | 0x80).
struct OvPolicy {
  Overflow o;
  NanEncoding n;
  int e4m3fn_result, e5m2_result;
};
const OvPolicy kOvPolicies[] = {
    {Overflow::kSaturate, NanEncoding::kCuda, 0x7E, 0x7B},            // CUDA satfinite: +-max
    {Overflow::kSaturateFinite, NanEncoding::kMlDtypes, 0x7E, 0x7B},  // finite overflow clamps too
    {Overflow::kNaN, NanEncoding::kMlDtypes, 0x7F, 0x7E},  // ml_dtypes: NaN, e5m2 quiet 0x7E
    {Overflow::kNaN, NanEncoding::kCuda, 0x7F, 0x7F},      // __NV_NOSAT-style all-ones NaN
    {Overflow::kNaN, NanEncoding::kIeee, 0x7F, 0x7E},      // IEEE quiet NaN
    {Overflow::kInf, NanEncoding::kMlDtypes, 0x7F, 0x7C},  // e4m3fn has no Inf: NaN
};

template <class Fmt>
void check_rows(const Row* rows, std::size_t n, bool is_e4m3) {
  for (std::size_t i = 0; i < n; ++i) {
    for (const OvPolicy& op : kOvPolicies) {
      for (int ri = 0; ri < 5; ++ri) {
        for (bool neg : {false, true}) {
          int want = rows[i].r[ri];
          // Negative inputs: RU and RD trade places (RU of -x is -(RD of x)).
          if (neg && ri >= 3) want = rows[i].r[ri == 3 ? 4 : 3];
          if (want == kOv) want = is_e4m3 ? op.e4m3fn_result : op.e5m2_result;
          if (neg) want |= 0x80;
          const Policy p{kRounds[ri], op.o, op.n};
          const float x = neg ? -rows[i].x : rows[i].x;
          EXPECT_EQ(int(encode<Fmt>(x, p)), want)
              << rows[i].why << ": x=" << x << " " << kRoundName[ri] << " overflow " << int(op.o)
              << " nan " << int(op.n);
          EXPECT_EQ(int(encode<Fmt>(double(x), p)), want)
              << rows[i].why << " (from f64): x=" << x << " " << kRoundName[ri];
        }
      }
    }
  }
}

TEST(Float8, E4m3fnBoundariesAllModes) {
  // e4m3fn top: 416 = 0x7D, 448 = 0x7E (max, mantissa 110), 480 would be 0x7F (the NaN code).
  // Subnormals: k * 2^-9 = codes 0x01..0x07, min normal 2^-6 = 0x08.
  const Row rows[] = {
      //  x                      rne   rna   rz    ru    rd
      {448.0f, {0x7E, 0x7E, 0x7E, 0x7E, 0x7E}, "max finite, exact"},
      {432.0f, {0x7E, 0x7E, 0x7D, 0x7E, 0x7D}, "tie 416|448: even 110 wins, away also 448"},
      {440.0f, {0x7E, 0x7E, 0x7D, 0x7E, 0x7D}, "between 416 and 448, nearer 448"},
      {449.0f, {0x7E, 0x7E, 0x7E, kOv, 0x7E}, "just above max: RU overflows, others keep 448"},
      {464.0f,
       {0x7E, kOv, 0x7E, kOv, 0x7E},
       "tie 448|480: RNE even (110) -> 448, RNA -> 480 = overflow"},
      {std::nextafter(464.0f, 1e9f),
       {kOv, kOv, 0x7E, kOv, 0x7E},
       "464 + 1 ulp: past the tie, overflow"},
      {479.99f, {kOv, kOv, 0x7E, kOv, 0x7E}, "just below 480: overflow unless toward zero"},
      {480.0f, {kOv, kOv, 0x7E, kOv, 0x7E}, "480: first value past max"},
      {496.0f, {kOv, kOv, 0x7E, kOv, 0x7E}, "496: CPFloat's NaN threshold; here plain overflow"},
      {1e30f, {kOv, kOv, 0x7E, kOv, 0x7E}, "huge"},
      {0x1p-9f, {0x01, 0x01, 0x01, 0x01, 0x01}, "min subnormal, exact"},
      {0x1p-10f, {0x00, 0x01, 0x00, 0x01, 0x00}, "tie 0|2^-9: RNE even -> 0"},
      {std::nextafter(0x1p-10f, 1.f), {0x01, 0x01, 0x00, 0x01, 0x00}, "2^-10 + ulp: above the tie"},
      {std::nextafter(0x1p-10f, 0.f), {0x00, 0x00, 0x00, 0x01, 0x00}, "2^-10 - ulp: below the tie"},
      {0x1p-30f, {0x00, 0x00, 0x00, 0x01, 0x00}, "far below: only RU leaves zero"},
      {1e-45f, {0x00, 0x00, 0x00, 0x01, 0x00}, "FP32 min subnormal input"},
      {0x1.8p-9f, {0x02, 0x02, 0x01, 0x02, 0x01}, "tie codes 1|2 (subnormal): even 2"},
      {0x1.4p-8f, {0x02, 0x03, 0x02, 0x03, 0x02}, "tie codes 2|3 (subnormal): even 2, away 3"},
      {0x1.ep-7f,
       {0x08, 0x08, 0x07, 0x08, 0x07},
       "tie max subnormal 0x07 | min normal 0x08: even 0x08"},
      {0x1p-6f, {0x08, 0x08, 0x08, 0x08, 0x08}, "min normal, exact"},
      {0x1.1p0f, {0x38, 0x39, 0x38, 0x39, 0x38}, "1.0625: tie 1|1.125, even 0x38"},
      {0x1.3p0f, {0x3A, 0x3A, 0x39, 0x3A, 0x39}, "1.1875: tie 1.125|1.25, even 0x3A"},
  };
  check_rows<e4m3fn>(rows, std::size(rows), true);
}

TEST(Float8, E5m2BoundariesAllModes) {
  // e5m2 top: 49152 = 0x7A, 57344 = 0x7B (max, mantissa 11: odd), 65536 = 0x7C = Inf.
  // Subnormals k * 2^-16 = 0x01..0x03, min normal 2^-14 = 0x04.
  const Row rows[] = {
      {57344.0f, {0x7B, 0x7B, 0x7B, 0x7B, 0x7B}, "max finite, exact"},
      {58000.0f, {0x7B, 0x7B, 0x7B, kOv, 0x7B}, "above max, below the tie"},
      {61439.99f, {0x7B, 0x7B, 0x7B, kOv, 0x7B}, "just below the tie"},
      {61440.0f,
       {kOv, kOv, 0x7B, kOv, 0x7B},
       "tie 57344 (odd 11) | 65536: RNE picks even -> overflow"},
      {65536.0f, {kOv, kOv, 0x7B, kOv, 0x7B}, "2^16: Inf's value"},
      {53248.0f, {0x7A, 0x7B, 0x7A, 0x7B, 0x7A}, "tie 49152 (10) | 57344 (11): even 0x7A"},
      {0x1p-16f, {0x01, 0x01, 0x01, 0x01, 0x01}, "min subnormal"},
      {0x1p-17f, {0x00, 0x01, 0x00, 0x01, 0x00}, "tie 0|2^-16: even 0"},
      {std::nextafter(0x1p-17f, 1.f), {0x01, 0x01, 0x00, 0x01, 0x00}, "above the tie"},
      {0x1.8p-16f, {0x02, 0x02, 0x01, 0x02, 0x01}, "tie 1|2: even 2"},
      {0x1.cp-15f,
       {0x04, 0x04, 0x03, 0x04, 0x03},
       "tie max subnormal 0x03 | min normal 0x04: even 0x04"},
      {0x1p-14f, {0x04, 0x04, 0x04, 0x04, 0x04}, "min normal"},
  };
  check_rows<e5m2>(rows, std::size(rows), false);
}

const Policy kAllPolicies[] = {
    {Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda},
    {Round::kNearestAway, Overflow::kSaturateFinite, NanEncoding::kMlDtypes},
    {Round::kTowardZero, Overflow::kNaN, NanEncoding::kIeee},
    {Round::kUp, Overflow::kInf, NanEncoding::kMlDtypes},
    {Round::kDown, Overflow::kNaN, NanEncoding::kCuda},
};

TEST(Float8, SignedZeroUnderEveryPolicy) {
  for (const Policy& p : kAllPolicies) {
    EXPECT_EQ(encode<e4m3fn>(0.0f, p), 0x00);
    EXPECT_EQ(encode<e4m3fn>(-0.0f, p), 0x80);  // -0 keeps its sign (not 0x00), every mode
    EXPECT_EQ(encode<e5m2>(0.0, p), 0x00);
    EXPECT_EQ(encode<e5m2>(-0.0, p), 0x80);
  }
}

// NaN inputs: both signs, quiet and signalling, with payload bits that land inside and outside
// the destination's mantissa. Columns: cuda, ml_dtypes, ieee encoding.
TEST(Float8, NanInputsEveryEncoding) {
  struct NanRow {
    std::uint32_t in;
    int e4[3], e5[3];
    const char* why;
  };
  const NanRow rows[] = {
      {0x7FC00000u, {0x7F, 0x7F, 0x7F}, {0x7F, 0x7E, 0x7E}, "+qNaN, empty payload"},
      {0xFFC00000u, {0x7F, 0xFF, 0xFF}, {0x7F, 0xFE, 0xFE}, "-qNaN: CUDA drops the sign"},
      {0x7F800001u,
       {0x7F, 0x7F, 0x7F},
       {0x7F, 0x7E, 0x7E},
       "+sNaN, low payload: truncated away, quieted"},
      {0xFF800001u, {0x7F, 0xFF, 0xFF}, {0x7F, 0xFE, 0xFE}, "-sNaN low payload"},
      {0x7FA00000u,
       {0x7F, 0x7F, 0x7F},
       {0x7F, 0x7E, 0x7F},
       "+sNaN payload 01..: ieee keeps mantissa 11"},
      {0xFFE00000u, {0x7F, 0xFF, 0xFF}, {0x7F, 0xFE, 0xFF}, "-qNaN payload 11..: ieee 0xFF"},
      {0x7FFFFFFFu, {0x7F, 0x7F, 0x7F}, {0x7F, 0x7E, 0x7F}, "+NaN all ones (CUDA's canonical)"},
      {0x7F900000u,
       {0x7F, 0x7F, 0x7F},
       {0x7F, 0x7E, 0x7E},
       "+sNaN payload 001: top 2 bits 00 -> quiet 0x7E"},
  };
  const NanEncoding encs[] = {NanEncoding::kCuda, NanEncoding::kMlDtypes, NanEncoding::kIeee};
  for (const NanRow& r : rows) {
    const float x = std::bit_cast<float>(r.in);
    for (int k = 0; k < 3; ++k) {
      for (Round rd : kRounds) {
        for (Overflow o :
             {Overflow::kSaturate, Overflow::kSaturateFinite, Overflow::kNaN, Overflow::kInf}) {
          const Policy p{rd, o, encs[k]};  // rounding and overflow policy must not matter for NaN
          EXPECT_EQ(int(encode<e4m3fn>(x, p)), r.e4[k]) << r.why << " enc " << k;
          EXPECT_EQ(int(encode<e5m2>(x, p)), r.e5[k]) << r.why << " enc " << k;
          EXPECT_EQ(int(encode<e4m3fn>(double(x), p)), r.e4[k]) << r.why << " (f64) enc " << k;
          EXPECT_EQ(int(encode<e5m2>(double(x), p)), r.e5[k]) << r.why << " (f64) enc " << k;
        }
      }
    }
  }
}

// +-Inf under each overflow policy (and every rounding mode: Inf is exact).
TEST(Float8, InfInputsEveryPolicy) {
  struct InfRow {
    Overflow o;
    NanEncoding n;
    int e4_pos, e4_neg, e5_pos, e5_neg;
    const char* why;
  };
  const InfRow rows[] = {
      {Overflow::kSaturate, NanEncoding::kCuda, 0x7E, 0xFE, 0x7B, 0xFB, "satfinite: Inf -> +-max"},
      {Overflow::kSaturateFinite, NanEncoding::kMlDtypes, 0x7F, 0xFF, 0x7C, 0xFC,
       "ml_dtypes kSaturate: Inf stays Inf; e4m3fn has none -> NaN"},
      {Overflow::kSaturateFinite, NanEncoding::kCuda, 0x7F, 0xFF, 0x7C, 0xFC,
       "same, CUDA NaN magnitude (sign kept)"},
      {Overflow::kNaN, NanEncoding::kMlDtypes, 0x7F, 0xFF, 0x7E, 0xFE,
       "nan policy: Inf -> NaN, quiet, sign kept"},
      {Overflow::kNaN, NanEncoding::kCuda, 0x7F, 0xFF, 0x7F, 0xFF, "nan policy, all-ones NaN"},
      {Overflow::kInf, NanEncoding::kMlDtypes, 0x7F, 0xFF, 0x7C, 0xFC,
       "IEEE: Inf stays Inf (NaN for e4m3fn)"},
  };
  for (const InfRow& r : rows) {
    for (Round rd : kRounds) {
      const Policy p{rd, r.o, r.n};
      EXPECT_EQ(int(encode<e4m3fn>(kInf, p)), r.e4_pos) << r.why;
      EXPECT_EQ(int(encode<e4m3fn>(-kInf, p)), r.e4_neg) << r.why;
      EXPECT_EQ(int(encode<e5m2>(kInf, p)), r.e5_pos) << r.why;
      EXPECT_EQ(int(encode<e5m2>(-kInf, p)), r.e5_neg) << r.why;
      EXPECT_EQ(int(encode<e5m2>(-double(kInf), p)), r.e5_neg) << r.why << " (f64)";
    }
  }
}

// numerics-anchors.md table 3.4 (e4m3fn) and 3.5 (e5m2), column by column. attnsim policies:
// CUDA __NV_SATFINITE = {rne, saturate, cuda}; CUDA __NV_NOSAT float path = {rne, nan, cuda}
// for e4m3fn and {rne, inf, cuda} for e5m2 (NOSAT e5m2 overflows to Inf); ml_dtypes astype =
// kMlDtypesE4m3 / kMlDtypesIeee; ml_dtypes ConvertFrom<kSaturate> = {rne, saturate-finite,
// ml_dtypes}.
TEST(Float8, AnchorsTables34And35) {
  const Policy sat = kCudaSatfinite;
  const Policy nosat8{Round::kNearestEven, Overflow::kNaN, NanEncoding::kCuda};
  const Policy nosat5{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  const Policy ml8 = kMlDtypesE4m3, ml5 = kMlDtypesIeee;
  const Policy mlsat{Round::kNearestEven, Overflow::kSaturateFinite, NanEncoding::kMlDtypes};
  const float qnan = std::bit_cast<float>(0x7FC00000u), nqnan = std::bit_cast<float>(0xFFC00000u);
  struct R {
    float x;
    int sat, nosat, ml, mlsat;
  };
  const R t34[] = {
      //  input                 SATFINITE NOSAT  ml_dtypes  ml kSaturate
      {464.0f, 0x7E, 0x7E, 0x7E, 0x7E},  // tie -> even 448 everywhere
      {465.0f, 0x7E, 0x7F, 0x7F, 0x7E},  // 465..479: overflow
      {479.0f, 0x7E, 0x7F, 0x7F, 0x7E},
      {480.0f, 0x7E, 0x7F, 0x7F, 0x7E},  // >= 480 finite
      {1e38f, 0x7E, 0x7F, 0x7F, 0x7E},
      {-1000.0f, 0xFE, 0xFF, 0xFF, 0xFE},  // negative overflow: NaN keeps the sign
      {kInf, 0x7E, 0x7F, 0x7F, 0x7F},      // ml_dtypes kSaturate still maps Inf -> NaN
      {-kInf, 0xFE, 0xFF, 0xFF, 0xFF},
      {qnan, 0x7F, 0x7F, 0x7F, 0x7F},
      {nqnan, 0x7F, 0x7F, 0xFF, 0xFF},     // CUDA float path drops the NaN sign
      {0x1p-10f, 0x00, 0x00, 0x00, 0x00},  // tie 0|2^-9 -> 0
      {-0.0f, 0x80, 0x80, 0x80, 0x80},
  };
  for (const R& r : t34) {
    EXPECT_EQ(int(encode<e4m3fn>(r.x, sat)), r.sat) << r.x;
    EXPECT_EQ(int(e4m3fn_satfinite(r.x)), r.sat) << r.x;
    EXPECT_EQ(int(encode<e4m3fn>(r.x, nosat8)), r.nosat) << r.x;
    EXPECT_EQ(int(encode<e4m3fn>(r.x, ml8)), r.ml) << r.x;
    EXPECT_EQ(int(encode<e4m3fn>(r.x, mlsat)), r.mlsat) << r.x;
  }
  const R t35[] = {
      {58000.0f, 0x7B, 0x7B, 0x7B, 0x7B},
      {61439.99f, 0x7B, 0x7B, 0x7B, 0x7B},
      {61440.0f, 0x7B, 0x7C, 0x7C, 0x7B},  // tie -> even = 65536 = overflow
      {1e10f, 0x7B, 0x7C, 0x7C, 0x7B},
      {kInf, 0x7B, 0x7C, 0x7C, 0x7C},  // kSaturate keeps Inf
      {-kInf, 0xFB, 0xFC, 0xFC, 0xFC},
      {qnan, 0x7F, 0x7F, 0x7E, 0x7E},  // ml_dtypes quiet NaN 0x7E vs CUDA 0x7F
      {nqnan, 0x7F, 0x7F, 0xFE, 0xFE},
      {0x1p-17f, 0x00, 0x00, 0x00, 0x00},  // <= 2^-17 -> 0
      {-0x1p-17f, 0x80, 0x80, 0x80, 0x80},
  };
  for (const R& r : t35) {
    EXPECT_EQ(int(encode<e5m2>(r.x, sat)), r.sat) << r.x;
    EXPECT_EQ(int(e5m2_satfinite(r.x)), r.sat) << r.x;
    EXPECT_EQ(int(encode<e5m2>(r.x, nosat5)), r.nosat) << r.x;
    EXPECT_EQ(int(encode<e5m2>(r.x, ml5)), r.ml) << r.x;
    EXPECT_EQ(int(encode<e5m2>(r.x, mlsat)), r.mlsat) << r.x;
  }
}

// FP64 sources must round once. Each case is a double that FP32 rounding would move onto a
// decision point (or out of FP32's range), so a convert-through-float implementation fails it.
TEST(Float8, Fp64SourcesRoundOnce) {
  const Policy rne_nan = kMlDtypesE4m3, rne_inf = kMlDtypesIeee;
  // 464 * (1 + 2^-40): just above the e4m3fn tie -> overflow (NaN). float() of it is 464.0,
  // which would give 448 (0x7E).
  EXPECT_EQ(encode<e4m3fn>(464.0 * (1 + 0x1p-40), rne_nan), 0x7F);
  EXPECT_EQ(encode<e4m3fn>(464.0 * (1 - 0x1p-40), rne_nan), 0x7E);  // just below: 448
  // 2^-10 (1 + 2^-40): above the 0|2^-9 tie -> 0x01; via FP32 it is the tie -> 0.
  EXPECT_EQ(encode<e4m3fn>(0x1p-10 * (1 + 0x1p-40), rne_nan), 0x01);
  // e5m2 61440 (1 - 2^-40): below the tie -> 57344; via FP32 it is the tie -> Inf.
  EXPECT_EQ(encode<e5m2>(61440.0 * (1 - 0x1p-40), rne_inf), 0x7B);
  // 1.0625 (1 + 2^-40) (tie 1|1.125 + tiny): RNE 0x39, via FP32 it is the tie -> 0x38.
  EXPECT_EQ(encode<e4m3fn>(1.0625 * (1 + 0x1p-40), rne_nan), 0x39);
  // Below FP32's subnormal range: 1e-300 is non-zero, so RU gives the min subnormal; via FP32
  // (which flushes it to +0) RU would give 0x00.
  EXPECT_EQ(encode<e4m3fn>(1e-300, Policy{Round::kUp, Overflow::kNaN, NanEncoding::kCuda}), 0x01);
  EXPECT_EQ(encode<e5m2>(-1e-300, Policy{Round::kDown, Overflow::kInf, NanEncoding::kCuda}), 0x81);
  EXPECT_EQ(encode<e5m2>(4.9e-324, Policy{Round::kNearestAway, Overflow::kInf, NanEncoding::kCuda}),
            0x00);
  // Above FP32's range: 1e300 under RZ is a finite overflow -> max (0x7B), not the Inf an
  // FP32 intermediate would make (which RZ must keep as Inf).
  EXPECT_EQ(encode<e5m2>(1e300, Policy{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda}),
            0x7B);
  EXPECT_EQ(encode<e5m2>(-1e300, Policy{Round::kUp, Overflow::kInf, NanEncoding::kCuda}), 0xFB);
  EXPECT_EQ(encode<e4m3fn>(1e300, Policy{Round::kTowardZero, Overflow::kNaN, NanEncoding::kCuda}),
            0x7E);
}

// The named CUDA entry points equal {rne, saturate, cuda} on a sweep of FP32 bit patterns
// (every upper 16 bits x 4 low halves) judged by the spec oracle.
TEST(Float8, NamedSatfiniteMatchesOracle) {
  const oracle::Table t8(oracle::kE4m3fn), t5(oracle::kE5m2);
  std::size_t bad = 0;
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x8000u, 0xFFFFu}) {
      const std::uint32_t b = (hi << 16) | lo;
      const float x = std::bit_cast<float>(b);
      const bool neg = b >> 31;
      std::uint32_t w8, w5;
      if (std::isnan(x)) {
        w8 = oracle::expected_nan(t8, neg, b & 0x7FFFFF, 23, NanEncoding::kCuda);
        w5 = oracle::expected_nan(t5, neg, b & 0x7FFFFF, 23, NanEncoding::kCuda);
      } else if (std::isinf(x)) {
        w8 = oracle::expected_inf(t8, neg, kCudaSatfinite);
        w5 = oracle::expected_inf(t5, neg, kCudaSatfinite);
      } else {
        w8 = oracle::expected(t8, x, kCudaSatfinite);
        w5 = oracle::expected(t5, x, kCudaSatfinite);
      }
      bad += e4m3fn_satfinite(x) != w8;
      bad += e5m2_satfinite(x) != w5;
    }
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace attnsim
