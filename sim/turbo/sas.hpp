// TurboAttention's SAS (Sparse Activated Softmax, Kang et al. §4 Eq. 13-15, Algorithm 3): e^x for
// x <= 0 as LUT(integer part) × POLY(fraction), with every x below the sparsity threshold sent to
// zero. sim/turbo/README.md names the paper line behind each choice (threshold reading, operation
// order, the cubic's coefficients); the refit of the cubic lives here too (`sas_poly_fit`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/pipeline/options.hpp"

namespace attnsim {

// The format SAS computes in (`sas_fmt`): the FP32 argument is rounded once (RNE) to it, and
// every product and sum of the Horner evaluation is rounded to it.
enum class SasFormat : std::uint8_t { kFp16, kFp32 };

// How Algorithm 3's sparsity step is read (sim/turbo/README.md item g).
//  kIntended  t = −x; t > n_r → 0 (T[n_r + 1] = 0 is the sentinel entry), else
//             T[⌊t⌋]·POLY(t − ⌊t⌋): monotone, threshold exactly −n_r.
//  kLiteral   "X[X < n_r] = n_r + 1" with n_r = −6 and "T[n_r + 1] = 0" as printed: arguments below
//             −6 become −5, whose table entry is 0; the integer part truncates toward zero, so
//             x ∈ (−6, −5] also lands on the zero entry while x = −6 does not (a hole).
enum class SasThreshold : std::uint8_t { kIntended, kLiteral };

struct SasRule {
  SasFormat fmt = SasFormat::kFp16;  // the paper's "solely in GPU Tensor Cores in FP16" (§4)
  bool fma = false;  // each Horner step p·f + c as one fused rounding (HFMA2/FFMA) instead of two
  int n_r = 6;       // sparsity threshold magnitude: x < −n_r gives 0 (§5.1: "n_r to -6")
  SasThreshold threshold = SasThreshold::kIntended;
  // POLY(f) = c3 f³ + c2 f² + c1 f + c0 (Eq. 15), each rounded to fmt before use.
  std::array<double, 4> poly{-0.1025, 0.4626, -0.9922, 0.9996};
};

// SAS of one FP32 argument x (already multiplied by the softmax scale, x <= 0 in attention; a
// positive x is evaluated by the same formula with a negative integer part clamped to 0, NaN and
// −inf give 0). The result is exact in FP32 (a value of fmt widened).
// Fast path: fp16 rules read a 65,536-entry table indexed by the argument's fp16 bits.
float sas_exp(float x, const SasRule& r);
// sas_exp of n arguments (out may be x): fp16 rules convert the arguments by
// numerics/convert_array's fp16 kernel, then read the table (tests/sim/turbo/sas_test.cpp: equal to
// sas_exp on every FP32 upper half and on random arguments).
void sas_exp_array(const float* x, std::size_t n, float* out, const SasRule& r);
// The same function written step by step in FP64 with an explicit rounding after every
// operation (formats/ float16 encode/decode): the reference sas_exp is tested against, on every
// fp16 argument and on millions of FP32 ones.
float sas_exp_ref(float x, const SasRule& r);

// SAS as the pipeline's exp (ExpFn::kHook): `exp=sas` with the keys sas_fmt, sas_fma, n_r and
// sas_threshold (sim/pipeline/options.hpp). The cubic is the paper's (Eq. 15).
HookRef<ExpHook> sas_hook(const SasRule& r);
ExpHookSpec sas_hook_spec();

// Least-squares cubic for e^{-x} on [0, 1], highest degree first.
//  points = 0: the continuous fit (∫₀¹ (e^{-x} − p(x))² dx, Gauss–Legendre with 64 nodes);
//  points = n >= 4: the discrete fit on n uniform points 0, 1/(n−1), ..., 1.
std::array<double, 4> sas_poly_fit(int points);

// Largest and mean relative error |SAS(x) − e^x| / e^x over every argument of the rule's format in
// [lo, 0] (fp16: all fp16 values; fp32: `samples` uniformly spaced FP32 arguments), e^x in FP64.
struct SasErrorStats {
  double max_rel = 0, mean_rel = 0, argmax = 0;
  long long count = 0;
};
SasErrorStats sas_error(const SasRule& r, double lo, long long samples = 1 << 20);

std::string describe(const SasRule& r);  // e.g. "sas(fp16, mul+add, n_r=6, intended)"

}  // namespace attnsim
