// Models of the GPU's approximate special functions (MUFU), derived from H100 recordings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// rcp.approx.ftz.f32 (MUFU.RCP on sm_90). Measured on the H100 over all 2^32 inputs
// (cuda_check/special_probe.cu, data/hw/README.md): for a normal x = s · 2^e · 1.m the result is
// s · 2^-e · T[m], where T[m] = rcp.approx.ftz(1.m) is a table of 2^23 values; T[m] differs from
// the correctly rounded 1/1.m by -1, 0 or +1 ulp, stored as 2-bit codes
// (data/hw/h100/rcp_approx_ftz_delta.bin: code 0 = 0, 1 = +1, 2 = -1; entry m in bits 2·(m%4) of
// byte m/4). Zero and subnormal inputs (flushed) give ±Inf, ±Inf gives ±0, NaN gives 0x7FFFFFFF,
// results below 2^-126 flush to ±0.
class RcpApproxFtz {
 public:
  // Loads the delta table; throws std::runtime_error with the path if it is missing or short.
  explicit RcpApproxFtz(const std::string& delta_path);
  // The H100 table shipped in data/hw/h100 (path fixed at build time).
  static const RcpApproxFtz& h100();
  std::uint32_t bits(std::uint32_t x) const;
  float operator()(float x) const;
  std::uint32_t table(std::uint32_t m) const { return t_[m]; }  // result bits for x = 1.m

 private:
  std::vector<std::uint32_t> t_;
};

// ex2.approx.ftz.f32 (MUFU.EX2 on sm_90). Measured on the H100 over all 2^32 inputs
// (cuda_check/special_probe.cu, data/hw/README.md): the input becomes a sign-magnitude fixed-point
// number with 23 fraction bits, truncated toward zero: K = trunc(|x| · 2^23), a = K >> 23,
// f = K mod 2^23; the result is 2^a · T+[f] for x >= 0 and 2^-a · T-[f] for x < 0, where
// T±[f] = ex2.approx.ftz(±f · 2^-23) are two recorded tables of 2^23 values; results below 2^-126
// flush to +0, x >= 128 gives +Inf, NaN gives 0x7FFFFFFF, subnormal inputs act as 0 (result 1).
// The tables are stored as 2-bit steps between consecutive entries' bit patterns
// (data/hw/h100/ex2_approx_ftz_{pos,neg}_steps.bin, entry 0 = 1.0f, entry f in bits 2·(f%4) of
// byte f/4; T+ increases, T- decreases by the step).
class Ex2ApproxFtz {
 public:
  Ex2ApproxFtz(const std::string& pos_steps_path, const std::string& neg_steps_path);
  static const Ex2ApproxFtz& h100();
  std::uint32_t bits(std::uint32_t x) const;
  float operator()(float x) const;
  std::uint32_t table(bool negative, std::uint32_t f) const { return (negative ? neg_ : pos_)[f]; }

 private:
  std::vector<std::uint32_t> pos_, neg_;
};

// lg2.approx.ftz.f32 (MUFU.LG2 on sm_90). Measured on the H100 over all 2^32 inputs
// (cuda_check/special_probe.cu, data/hw/README.md): for a positive normal x = 2^e · 1.m the unit
// forms the fixed-point sum e + L(m), where L(m) ≈ log2(1.m) has 36 fraction bits, and converts it
// to FP32 by truncating the magnitude; a negative sum (e < 0) is negated by bitwise complement, so
// the result is -trunc(|e| - L(m) - 2^-36). x = 1 gives +0 (the sum would give L(0) > 2^-24),
// ±0 and subnormals (flushed) give -Inf, negative x (and -Inf) give 0x7FFFFFFF, NaN gives
// 0x7FFFFFFF, +Inf gives +Inf. L(m) is not stored by the hardware's rule but from the recordings
// lg2(1.m) and lg2(0.5 · 1.m), which confine it to an interval that fixes every result
// (data/hw/h100/lg2_approx_ftz_l36.bin, an Elias-gamma residual code described in
// cuda_check/pack_lg2.py, which writes it).
class Lg2ApproxFtz {
 public:
  // Decodes the L table; throws std::runtime_error with the path if it is missing or corrupt.
  explicit Lg2ApproxFtz(const std::string& l36_path);
  static const Lg2ApproxFtz& h100();
  std::uint32_t bits(std::uint32_t x) const;
  float operator()(float x) const;
  // L(m) in units of 2^-36: one value of the interval the recordings allow (any value in it gives
  // the same results at every exponent).
  std::uint64_t fixed_log(std::uint32_t m) const { return l_[m]; }

 private:
  std::vector<std::uint64_t> l_;
};

// The variants without .ftz (ex2.approx.f32, rcp.approx.f32, lg2.approx.f32: what exp2f, 1/x
// and log2f compile to without -ftz=true / --use_fast_math). ptxas wraps the same MUFU in range
// scaling with IEEE FMUL/FADD (round to nearest even, subnormals kept), which the recorded SASS
// shows (FSETP + FMUL/FADD around MUFU); checked against the cvt_probe's recordings of the
// H100 over all 2^32 inputs (digests) and its 655,360-input sample, 0 mismatches:
//  * ex2: x < -126 (a subnormal result): r = ex2.ftz(x · 0.5), result r · r (not ex2.ftz(x + 24)
//    · 2^-24, which misses 18 sample outputs by 1 ulp);
//  * rcp: |x| >= 2^126 (a subnormal result): rcp.ftz(x · 0.25) · 0.25; |x| < 2^-126 (subnormal or
//    zero input): rcp.ftz(x · 2^24) · 2^24 (Inf for the tiniest);
//  * lg2: |x| < 2^-126: lg2.ftz(x · 2^24) − 24 (negative subnormals give the canonical NaN).
// NaN results are the canonical 0x7FFFFFFF.
std::uint32_t ex2_approx_bits(std::uint32_t x, const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());
std::uint32_t rcp_approx_bits(std::uint32_t x, const RcpApproxFtz& rcp = RcpApproxFtz::h100());
std::uint32_t lg2_approx_bits(std::uint32_t x, const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100());

// FMUL.FTZ: IEEE binary32 product, round to nearest even, subnormal inputs and results flushed
// to a zero of the right sign.
float fmul_ftz(float a, float b);

// div.approx.ftz.f32 (and __fdividef): a * rcp.approx.ftz(b), as the SASS shows (MUFU.RCP then
// FMUL.FTZ); checked on the H100 on 2^28 random pairs with exponents in [-31, 0] (0 mismatches).
float div_approx_ftz(float a, float b, const RcpApproxFtz& rcp = RcpApproxFtz::h100());

// div.full.f32 (Triton's fp32 `/`, `llvm.nvvm.div.full`) as ptxas compiles it for sm_90, read off
// the SASS of SageAttention's Triton quantizers (cuda_check/sage, data/hw/h100/sage/README.md):
// the divisor and dividend are range-scaled with IEEE FMULs (|b| > 2^126: both times 0.25;
// |b| < 2^-126: both times 2^24), the divisor's reciprocal comes from MUFU.RCP (the
// rcp.approx.ftz model) and one IEEE FMUL (round to nearest even, subnormals kept) gives
// a' · rcp(b'). Up to 2 ulp from the correctly rounded quotient, as the PTX ISA allows.
float div_full(float a, float b, const RcpApproxFtz& rcp = RcpApproxFtz::h100());

// log2f of CUDA's libdevice (__nv_log2f) with flush-to-zero FMAs, as Triton 3.6 compiles tl.log2
// for sm_90 (the PTX and SASS of SageAttention 1's attention kernel): x scaled by 2^23 below
// 2^-126, the exponent split off at the bit pattern of sqrt(1/2) (0x3F3504F3: the mantissa in
// [sqrt(1/2), sqrt(2)); PTX `add.s32 r, x, -1060439283`), a degree-10 polynomial in f = m − 1
// evaluated by FFMA.FTZ, then e + f·log2(e) + f²·q. Inf, NaN and negative x as the PTX does
// (fma(x, +inf, +inf)); x = 0 is left to the caller (Triton selects −inf).
float log2f_libdevice(float x);

}  // namespace attnsim
