// Models of the GPU's approximate special functions (MUFU), derived from H100 recordings.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/policy.hpp"

namespace attnsim {

// The data/ folder whose hw/h100/*.bin tables the h100() models below load on first use: the
// repository's (fixed at build time) unless set before that first use (the Python wheel ships the
// four tables inside the package and points here at them).
void set_special_data_dir(const std::string& data_dir);
const std::string& special_data_dir();

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
  // The H100 table shipped in data/hw/h100 (under special_data_dir()).
  static const RcpApproxFtz& h100();
  std::uint32_t bits(std::uint32_t x) const;
  float operator()(float x) const;
  std::uint32_t table(std::uint32_t m) const { return t_[m]; }  // result bits for x = 1.m
  const std::uint32_t* table_data() const { return t_.data(); }  // 2^23 entries, for gathers

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
  // T- or T+ (2^23 entries each), for gathers.
  const std::uint32_t* table_data(bool negative) const { return (negative ? neg_ : pos_).data(); }
  // Data a vector kernel derives from T± once (numerics/special_array.cpp: a 4 MiB form of the
  // 64 MiB tables, whose random gathers miss the caches and the TLB), kept with them: `build` runs
  // on the first call only (thread-safe), later calls return what it returned.
  const void* derived(std::shared_ptr<const void> (*build)(const Ex2ApproxFtz&)) const;

 private:
  std::vector<std::uint32_t> pos_, neg_;
  mutable std::once_flag derived_once_;
  mutable std::shared_ptr<const void> derived_;
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
  const std::uint64_t* table_data() const { return l_.data(); }  // 2^23 entries, by mantissa

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

// FMUL.FTZ (mul.rn.ftz.f32): IEEE binary32 product, round to nearest even, subnormal inputs read
// as zeros of their sign; the result is flushed to a zero of its sign when it is tiny after
// rounding with an unbounded exponent (x86 MXCSR.FTZ's rule): a subnormal IEEE result, and also
// FLT_MIN when the exact product lies below FLT_MIN by more than half a 24-bit ulp
// (0x3F7FFFFF × 0x00800000 → +0; rounding first and flushing subnormals would give 0x00800000).
// NaN results are the GPU's 0x7FFFFFFF. Measured on the H100 over 29,360,128 designed operand
// pairs next to FLT_MIN (cuda_check/ftz_probe.cu, data/hw/h100/ftz/, tests/hw/ftz_h100_test.cpp).
float fmul_ftz(float a, float b);

// FADD.FTZ (add.rn.ftz.f32): subnormal inputs read as zeros of their sign, the RN sum, a subnormal
// result flushed to a zero of its sign (a sum of binary32 values that is subnormal is exact, so
// tininess before or after rounding is the same). fma_f32(a, 1, b, RN, ftz = true), whose FTZ rule
// is the H100's (data/hw/h100/ftz/).
float fadd_ftz(float a, float b);

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

// tanhf of CUDA's libdevice (__nv_tanhf) as Triton 3.6 inlines it for sm_90 (the PTX of
// FlexAttention's softcap kernel, torch 2.11): |x| (abs.ftz) below 0.6: x + x·x²·p(x²) with
// p of degree 3 by FFMA.FTZ (x² an IEEE FMUL); otherwise 1 − 2 / (ex2.approx.ftz(2 log2(e)·|x|) + 1)
// (IEEE FMUL and FADD, rcp.approx.ftz, FFMA.FTZ), 1 for |x| >= 9.01 (0x41102CB4), the sign of x
// copied in. Read from the PTX; the recordings that pass through it are FlexAttention's softcap
// cases (data/hw/h100/serving).
float tanhf_libdevice(float x);
// Its steps around the two MUFU calls, for the array form (special_array.hpp): a = |x| (ftz);
// below 0.6 or NaN the result is tanhf_libdevice_poly(x); otherwise, with
// e = ex2.approx.ftz(a · 0x4038AA3B) and r = rcp.approx.ftz(e + 1), tanhf_libdevice_finish(x, a, r).
float tanhf_libdevice_abs(float x);
float tanhf_libdevice_poly(float x);
float tanhf_libdevice_finish(float x, float a, float r);

// fma.{rn,rz,rm,rp}.f32 and their .ftz forms (SASS FFMA, FFMA.RZ/.RM/.RP, .FTZ): a·b + c with one
// rounding in the mode `round` (kNearestEven, kTowardZero, kDown, kUp; PTX has no ties-away FMA,
// so kNearestAway throws std::invalid_argument). With ftz, subnormal inputs act as zeros of their
// sign and a tiny result becomes a zero of its sign (PTX ISA, fma: "subnormal numbers are flushed
// to sign-preserving zero"), tininess being detected after rounding with an unbounded exponent:
// a subnormal rounded result, and FLT_MIN when the exact value rounded to 24 bits without an
// exponent floor lies below FLT_MIN (fma.rn.ftz.f32 on the H100, every one of 29,360,128 designed
// cases, data/hw/h100/ftz/; the directed modes with .ftz follow the same rule by assumption:
// UNVERIFIED, only .rn was probed). NaN results are the GPU's 0x7FFFFFFF (every NaN the H100's
// FFMA wrote in the probe). Round to nearest is std::fma, correctly rounded
// by C's definition. The directed modes are exact in software, with no use of the host's rounding
// mode: a·b is exact in double (24 + 24 significant bits); Knuth's TwoSum gives p + c = s + e
// exactly, s the double nearest the exact sum (|e| <= half an ulp of s); every binary32 value lies
// on the double grid around s, so none lies strictly between s and the exact sum: the directed
// result is s's floor or ceiling on the binary32 grid, or, when s is itself a binary32 value, s or
// its neighbour on e's side. Overflow follows IEEE 754-2019 7.4 (toward zero gives the largest
// finite value, away gives Inf); an exact zero sum of operands of opposite sign is +0, or -0 when
// rounding down. Checked against the host's fmaf under
// fesetround on a million random and nearly cancelling triples per mode
// (tests/numerics/special_test.cpp), and through expf's FFMA.RM on the H100.
float fma_f32(float a, float b, float c, Round round, bool ftz);

// CUDA's expf (libdevice __nv_expf = __internal_accurate_expf, CUDA 13.0 libdevice.10.bc), as
// nvcc compiles it for sm_90 without --use_fast_math; ftz selects the __nvvm_reflect("__CUDA_FTZ")
// branch (nvcc -ftz=true), otherwise the IEEE branch. The PTX, and the SASS it becomes
// (cuda_check/libm_probe.cu, data/hw/h100/libm/README.md):
//   t = sat(fma.rn(x, 0x3BBB989D = fl(log2(e)/252), 0.5))  FFMA.SAT (ftz: FFMA, FADD.SAT); NaN → 0
//   j = fma.rm(t, 252, 12582913 = 1.5·2^23 + 1)            FFMA.RM: 1.5·2^23 + 1 + ⌊252 t⌋
//   n = j − 12583039                                       FADD: the exponent, −126..126
//   r = fma.rn(x, 0x32A57060, fma.rn(x, 0x3FB8AA3B, −n))   2 FFMA: x·log2(e) − n, hi and lo parts
//   result = ex2.approx.ftz(r) · 2^n, 2^n = bits(j) << 23  MUFU.EX2, SHF, FMUL
// Both branches use ex2.approx.ftz (Ex2ApproxFtz); they differ in .ftz on the FFMAs and the final
// FMUL, which in the IEEE branch rounds subnormal results (x below about −87.34) instead of
// flushing them. NaN results are the canonical 0x7FFFFFFF. Checked on the H100 over all 2^32
// inputs in both branches (cuda_check/libm_probe.cu).
float expf_libdevice(float x, bool ftz);
// expf_libdevice's steps before and after its MUFU.EX2, for the array form (special_array.hpp
// expf_libdevice_array runs the MUFU over many arguments in between):
// expf_libdevice(x) = expf_libdevice_finish(ex2.approx.ftz(s.r), s.scale) with
// s = expf_libdevice_reduce(x).
struct ExpfLibdeviceSteps {
  float r;      // the MUFU's argument x·log2(e) − n
  float scale;  // 2^n
};
ExpfLibdeviceSteps expf_libdevice_reduce(float x, bool ftz);
float expf_libdevice_finish(float ex2_r, float scale, bool ftz);

// CUDA's logf (libdevice __nv_logf = __internal_accurate_logf, CUDA 13.0), as nvcc compiles it for
// sm_90 without --use_fast_math; ftz as for expf_libdevice. x < 2^-126 (subnormals, zeros and
// negatives) is scaled by 2^23 (FMUL, i = −23, else i = 0); the exponent k is split off at the
// bit pattern of 2/3 (0x3F2AAAAB: the mantissa m in [2/3, 4/3)); f = m − 1 (exact);
// q = a degree-8 polynomial in f by 8 FMAs (0xBE055027 · f + 0x3E1039F6, …, −1/2 last);
// log = fma(k + i, ln 2 = 0x3F317218, fma(f · q, f, f)), f · q rounded by one FMUL and k + i by
// fma(k · 2^23, 2^-23, i). Inputs with bits >= 0x7F800000 (+Inf, NaN, every negative) give
// fma(x, +Inf, +Inf): +Inf for +Inf, else the canonical NaN; a (scaled) zero gives −Inf, so −0
// gives −Inf, and under ftz so does every subnormal (negative ones too: the IEEE branch gives NaN
// for those). Checked on the H100 over all 2^32 inputs in both branches.
float logf_libdevice(float x, bool ftz);

// CUDA's __expf (libdevice __nv_fast_expf, CUDA 13.0), and what expf becomes under
// --use_fast_math: FMUL by 0x3FB8AA3B (log2(e) as float), then ex2.approx. ftz (-ftz=true or
// --use_fast_math): FMUL.FTZ and ex2.approx.ftz (Ex2ApproxFtz); otherwise an IEEE FMUL and
// ex2.approx.f32 (ex2_approx_bits: the MUFU with ptxas's range scaling). The name is libdevice's
// (STYLE.md 16 bars "fast" in our own names; this one names CUDA's function). Checked on the H100
// over all 2^32 inputs in the three builds.
float fast_expf(float x, bool ftz);

// CUDA's __logf (libdevice __nv_fast_logf, CUDA 13.0), and what logf becomes under
// --use_fast_math: lg2.approx, then FMUL by 0x3F317218 (ln 2 as float). ftz: lg2.approx.ftz
// (Lg2ApproxFtz) and FMUL.FTZ; otherwise lg2.approx.f32 (lg2_approx_bits) and an IEEE FMUL.
// Checked on the H100 over all 2^32 inputs in the three builds.
float fast_logf(float x, bool ftz);

}  // namespace attnsim
