// formats/: ALL 2^32 FP32 inputs through the production conversions (CUDA satfinite e4m3fn/e5m2,
// bf16 and fp16 RNE with Inf overflow) and the RZ conversions of e4m3fn, bf16 and fp16, each
// against an oracle that shares no arithmetic with formats/ or with the unit tests' oracle.hpp
// search, so the CPU model is proven without the H100 recordings of tests/hw. The non-saturating
// e4m3fn/e5m2 policies are swept in convert_long_test.cpp. Label: exhaustive (OpenMP over all
// cores; see README.md for the times). attnsim's side is numerics/convert_array's encode_array:
// its vector kernels by default, the formats/ encoders of record under ATTNSIM_ISA=scalar.
//
// Oracles, one per target (the point is that each is a different algorithm from round_pack):
//   bf16 RNE / RZ  the classic integer bias trick on the FP32 bits, (u + 0x7FFF + ((u >> 16) & 1))
//                  >> 16 (numerics-anchors.md 3.2; PyTorch c10 round_to_nearest_even, TF), and
//                  plain truncation u >> 16 for RZ (the top FP32 binade truncates to 0x7F7F, never
//                  Inf: IEEE 754 7.4).
//   fp16 RNE / RZ  the x86 F16C instruction vcvtps2ph (_cvtss_sh) with an explicit rounding
//                  immediate: the CPU's own IEEE 754 binary32 -> binary16 conversion. Its NaN
//                  result keeps the sign and the top 10 payload bits and sets the quiet bit, which
//                  is exactly attnsim's NanEncoding::kIeee, so NaNs are compared bit for bit under
//                  that encoding. Skipped where the CPU has no F16C.
//   e4m3fn, e5m2   a table of FP32 bit-pattern thresholds: positive FP32 bit patterns are ordered
//                  like their values, so "round |x| up past code c_i" is one unsigned comparison
//                  of |x|'s bits against an integer threshold. The thresholds are the spec values
//                  (std::ldexp of the field formula) and their midpoints, written as FP32 bits,
//                  plus one for a tie that RNE sends down (the upper neighbour's code is odd).
//                  NaN/Inf/overflow outcomes come from the tables of numerics-anchors.md 3.4/3.5,
//                  not from formats/policy.hpp code.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTNSIM_TEST_HAVE_X86 1
#endif

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"

namespace attnsim {
namespace {

// Runs the oracle and attnsim over all 2^32 FP32 bit patterns on every core, in blocks of 2^16
// consecutive patterns (one upper half), and compares them. want_block(hi, out) writes the
// oracle's codes of the block; attnsim's come from numerics/convert_array's encode_array (its
// vector kernels; under ATTNSIM_ISA=scalar its reference, the formats/ encoder of record, so the
// same sweep proves either). Prints the wall time so README.md can quote it.
template <class WantBlock>
void sweep_all(const char* name, const WantBlock& want_block, Encoding e, Policy p) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(65536);
    std::vector<std::uint32_t> got(65536), want(65536);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = std::bit_cast<float>((std::uint32_t(hi) << 16) | lo);
      encode_array(e, x.data(), x.size(), got.data(), p);
      want_block(std::uint32_t(hi), want.data());
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
  std::printf("%-34s all 2^32 FP32 inputs (%s), %llu mismatches, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

// An oracle of one input as a block oracle.
template <class F>
auto per_element(const F& f) {
  return [f](std::uint32_t hi, std::uint32_t* out) {
    for (std::uint32_t lo = 0; lo < 65536; ++lo) out[lo] = f((hi << 16) | lo);
  };
}

// ---- bf16: integer bias trick ----------------------------------------------------------------

std::uint32_t bf16_rne_bias_trick(std::uint32_t u, NanEncoding nan) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: numerics-anchors.md 3.2 "BF16 NaN" row
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    if (nan == NanEncoding::kCuda) return 0x7FFF;             // CUTLASS host / CUDA: sign dropped
    if (nan == NanEncoding::kMlDtypes) return sign | 0x7FC0;  // Eigen / ml_dtypes
    return (u >> 16) | 0x0040;                                // IEEE: sign, top payload, quiet bit
  }
  // Adding 0x7FFF plus the kept lsb carries exactly when the dropped half is above 0x8000, or
  // equal to it with an odd kept part; a carry out of the mantissa bumps the exponent, and out
  // of the largest exponent lands on 0x7F80 = Inf (IEEE overflow), which is the Inf policy.
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

TEST(ConvertBitsAllInputs, Bf16NearestEvenBiasTrick) {
  const Policy p{Round::kNearestEven, Overflow::kInf, NanEncoding::kMlDtypes};
  sweep_all(
      "bf16 {rne, inf, ml_dtypes}",
      per_element([](std::uint32_t u) { return bf16_rne_bias_trick(u, NanEncoding::kMlDtypes); }),
      Encoding::kBf16, p);
}

TEST(ConvertBitsAllInputs, Bf16TowardZeroTruncation) {
  const Policy p{Round::kTowardZero, Overflow::kInf, NanEncoding::kIeee};
  sweep_all(
      "bf16 {rz, inf, ieee}", per_element([](std::uint32_t u) {
        // NaN: sign + top payload + quiet bit; everything else: the upper half (Inf stays Inf,
        // finite values never reach it under RZ).
        return (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) | 0x0040u) : (u >> 16);
      }),
      Encoding::kBf16, p);
}

// ---- fp16: the CPU's F16C instruction ---------------------------------------------------------

#if defined(ATTNSIM_TEST_HAVE_X86)
// One upper half's 2^16 patterns through _cvtss_sh (a loop inside the F16C function: no call per
// element).
template <int kImm>
__attribute__((target("f16c"))) void f16c_block(std::uint32_t hi, std::uint32_t* out) {
  for (std::uint32_t lo = 0; lo < 65536; ++lo)
    out[lo] = std::uint16_t(_cvtss_sh(std::bit_cast<float>((hi << 16) | lo), kImm));
}
#endif

template <int kImm>
void fp16_vs_f16c(Round r, const char* name) {
#if defined(ATTNSIM_TEST_HAVE_X86)
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  // Overflow::kInf is IEEE 754's default; under RZ (and RU/RD of the opposite sign) F16C itself
  // returns +-65504 (7.4), which the policy comment in formats/policy.hpp promises too.
  const Policy p{r, Overflow::kInf, NanEncoding::kIeee};
  // The vector kernel of fp16 under these modes is vcvtps2ph itself, so against this oracle it
  // proves only its handling of the Inf/NaN lanes; its independent proof over all 2^32 inputs is
  // the H100's (tests/hw/cvt_h100_long_test.cpp F16Rn/Rz/Rm/Rp). Under ATTNSIM_ISA=scalar this
  // sweep proves formats/' encoder, which shares nothing with F16C.
  sweep_all(name, f16c_block<kImm>, Encoding::kFp16, p);
#else
  (void)r;
  GTEST_SKIP() << name << ": F16C oracle is x86 only";
#endif
}

// vcvtps2ph imm8 bits 1:0 pick the rounding (00 nearest-even, 01 down, 10 up, 11 toward zero)
// and bit 2 = 0 makes the immediate win over MXCSR.RC (Intel SDM, VCVTPS2PH). RD and RU (01, 10)
// are swept against F16C on 4 M inputs per mode in float16_test.cpp; over all 2^32 they would add
// about 85 s here.
TEST(ConvertBitsAllInputs, Fp16NearestEvenF16c) {
  fp16_vs_f16c<0>(Round::kNearestEven, "fp16 {rne, inf, ieee} vs F16C");
}
TEST(ConvertBitsAllInputs, Fp16TowardZeroF16c) {
  fp16_vs_f16c<3>(Round::kTowardZero, "fp16 {rz, inf, ieee} vs F16C");
}

// ---- e4m3fn / e5m2: FP32 bit-pattern thresholds ----------------------------------------------

// What a finite overflow, an Inf and a NaN input become, per sign, written out from
// numerics-anchors.md tables 3.4/3.5 for the policies swept here.
struct Outcomes {
  std::uint32_t overflow_pos, overflow_neg, inf_pos, inf_neg, nan_pos, nan_neg;
};

struct Fp8Oracle {
  std::vector<std::uint32_t> thresholds;  // |x| bits >= thresholds[i]  <=>  result >= code i + 1
  std::uint32_t max_code;                 // codes 0 .. max_code are the finite magnitudes
  Outcomes out;
  std::uint32_t sign_bit;

  // exp_bits/man_bits/fn: the format's spec; rz selects truncation instead of RNE.
  Fp8Oracle(int exp_bits, int man_bits, bool fn, bool rz, Outcomes o) : out(o) {
    const int bias = (1 << (exp_bits - 1)) - 1;
    sign_bit = 1u << (exp_bits + man_bits);
    // Finite magnitudes by code: the IEEE layout loses the whole top exponent, fn only its
    // all-ones mantissa (OCP OFP8 v1.0 tables).
    max_code = fn ? sign_bit - 2 : (((1u << exp_bits) - 1) << man_bits) - 1;
    auto value = [&](std::uint32_t c) {  // field formula, c may be max_code + 1 ("one step past")
      const int e = int(c >> man_bits), m = int(c & ((1u << man_bits) - 1));
      return e == 0 ? std::ldexp(double(m), 1 - bias - man_bits)
                    : std::ldexp(double(m + (1 << man_bits)), e - bias - man_bits);
    };
    for (std::uint32_t c = 0; c <= max_code; ++c) {
      const double lo = value(c), hi = value(c + 1);
      if (rz) {
        // Truncation reaches code c + 1 only at its exact value, and never reaches "past max".
        thresholds.push_back(c == max_code ? 0xFFFFFFFFu : std::bit_cast<std::uint32_t>(float(hi)));
        continue;
      }
      const float mid = float((lo + hi) / 2);  // exact: at most man_bits + 2 significant bits
      EXPECT_EQ(double(mid), (lo + hi) / 2);
      const std::uint32_t mb = std::bit_cast<std::uint32_t>(mid);
      thresholds.push_back(((c + 1) & 1) == 0 ? mb : mb + 1);  // tie goes to the even code
    }
  }
  // The codes of the 2^16 patterns (hi << 16) | lo: within one upper half the magnitudes
  // increase with lo (same sign and exponent field), so the threshold index only moves up: one
  // upper_bound for the first pattern, then a walk (the same comparisons as operator()).
  void block(std::uint32_t hi, std::uint32_t* codes) const {
    if (((hi >> 7) & 0xFF) == 0xFF) {  // Inf and NaN
      for (std::uint32_t lo = 0; lo < 65536; ++lo) codes[lo] = (*this)((hi << 16) | lo);
      return;
    }
    const std::uint32_t sign = (hi >> 15) ? sign_bit : 0;
    const std::uint32_t a0 = (hi & 0x7FFF) << 16;
    std::size_t k = std::size_t(std::upper_bound(thresholds.begin(), thresholds.end(), a0) -
                                thresholds.begin());
    for (std::uint32_t lo = 0; lo < 65536; ++lo) {
      const std::uint32_t a = a0 | lo;
      while (k < thresholds.size() && thresholds[k] <= a) ++k;
      if (k > max_code) {
        codes[lo] = sign ? out.overflow_neg : out.overflow_pos;
      } else {
        codes[lo] = sign | std::uint32_t(k);
      }
    }
  }
  std::uint32_t operator()(std::uint32_t u) const {
    const bool neg = u >> 31;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return neg ? out.nan_neg : out.nan_pos;
    if (a == 0x7F800000u) return neg ? out.inf_neg : out.inf_pos;
    const std::uint32_t k = std::uint32_t(
        std::upper_bound(thresholds.begin(), thresholds.end(), a) - thresholds.begin());
    if (k > max_code) return neg ? out.overflow_neg : out.overflow_pos;
    return (neg ? sign_bit : 0) | k;
  }
};

template <class Fmt>
void sweep_fp8(const char* name, const Fp8Oracle& oracle, Policy p) {
  sweep_all(
      name, [&](std::uint32_t hi, std::uint32_t* out) { oracle.block(hi, out); },
      std::is_same_v<Fmt, e4m3fn> ? Encoding::kE4m3fn : Encoding::kE5m2, p);
}

// Sanity of the threshold oracle on hand-checked rows, so it cannot silently agree with a broken
// encoder by being broken the same way.
TEST(ConvertBitsAllInputs, Fp8ThresholdOracleSanity) {
  const Fp8Oracle sat(4, 3, true, false, {0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x7F});
  auto b = [](float f) { return std::bit_cast<std::uint32_t>(f); };
  EXPECT_EQ(sat.max_code, 0x7Eu);
  EXPECT_EQ(sat(b(464.0f)), 0x7Eu);                        // tie -> even 448
  EXPECT_EQ(sat(b(std::nextafter(464.0f, 1e9f))), 0x7Eu);  // overflow -> saturate
  EXPECT_EQ(sat(b(432.0f)), 0x7Eu);                        // tie 416|448 -> even 0x7E
  EXPECT_EQ(sat(b(std::nextafter(432.0f, 0.f))), 0x7Du);
  EXPECT_EQ(sat(b(0x1p-10f)), 0x00u);    // tie 0|2^-9 -> 0
  EXPECT_EQ(sat(b(-0x1.8p-9f)), 0x82u);  // tie 1|2 -> 2, sign
  EXPECT_EQ(sat(b(-0.0f)), 0x80u);
  const Fp8Oracle e5(5, 2, false, false, {0x7C, 0xFC, 0x7C, 0xFC, 0x7E, 0xFE});
  EXPECT_EQ(e5.max_code, 0x7Bu);
  EXPECT_EQ(e5(b(61440.0f)), 0x7Cu);  // tie 57344|65536 -> overflow
  EXPECT_EQ(e5(b(61439.996f)), 0x7Bu);
  const Fp8Oracle rz(4, 3, true, true, {0x7E, 0xFE, 0x7F, 0xFF, 0x7F, 0x7F});
  EXPECT_EQ(rz(b(1e30f)), 0x7Eu);  // RZ never overflows
  EXPECT_EQ(rz(b(std::nextafter(0x1p-9f, 0.f))), 0x00u);
  EXPECT_EQ(rz(b(0x1p-9f)), 0x01u);
}

// CUDA cvt.rn.satfinite.e4m3x2.f32 (table 3.4 SATFINITE column): overflow and Inf -> +-448,
// NaN -> 0x7F whatever its sign.
TEST(ConvertBitsAllInputs, E4m3fnSatfinite) {
  sweep_fp8<e4m3fn>("e4m3fn {rne, saturate, cuda}",
                    Fp8Oracle(4, 3, true, false, {0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x7F}),
                    kCudaSatfinite);
}
// RZ under the non-saturating NaN policy: a finite overflow still truncates to +-448 (IEEE 754
// 7.4: rounding toward zero never leaves the finite range), while +-Inf inputs follow the policy
// (NaN, sign kept), so the two outcomes are told apart.
TEST(ConvertBitsAllInputs, E4m3fnTowardZero) {
  sweep_fp8<e4m3fn>("e4m3fn {rz, nan, ml_dtypes}",
                    Fp8Oracle(4, 3, true, true, {0x7E, 0xFE, 0x7F, 0xFF, 0x7F, 0xFF}),
                    Policy{Round::kTowardZero, Overflow::kNaN, NanEncoding::kMlDtypes});
}
// CUDA cvt.rn.satfinite.e5m2x2.f32 (3.5 SATFINITE): overflow and Inf -> +-57344, NaN -> 0x7F.
TEST(ConvertBitsAllInputs, E5m2Satfinite) {
  sweep_fp8<e5m2>("e5m2 {rne, saturate, cuda}",
                  Fp8Oracle(5, 2, false, false, {0x7B, 0xFB, 0x7B, 0xFB, 0x7F, 0x7F}),
                  kCudaSatfinite);
}
}  // namespace
}  // namespace attnsim
