// Reproducible model arithmetic: the operations of a model's forward pass outside attention
// (projections, norms, activations, RoPE tables) and of the end-to-end metrics (FP64 log-softmax,
// KL), with results that depend on the inputs alone: not on the CPU, its instruction set, the
// thread count or a BLAS build. attnsim.e2e's forwards run on these (experiments/python/realmodels),
// so that a KL or perplexity table reproduces bit for bit on every machine.
//
// How: every result is one FP64 computation from IEEE basic operations (+ - * / sqrt, no FMA
// contraction, no libm), in a fixed order, rounded once to FP32 where the model stores FP32.
//  - A product of two FP32 values is exact in FP64 (24 + 24 significant bits fit in 53), so a dot
//    product accumulated in FP64 in k order is the same with or without FMA: the vector kernels
//    (AVX-512, AVX2: 8 or 4 outputs per register, never a reduction split across lanes) give the
//    reference's bits by construction, and the tests check it on adversarial sets.
//  - The elementary functions (exp, log, sin, cos, erf) are this file's own FP64 polynomials:
//    libm's differ between libm builds and between glibc's FMA and non-FMA variants of one build.
//    They are accurate to a few FP64 ulps (tests/numerics/model_math_test.cpp measures the bound
//    against Boost.Multiprecision), so after the rounding to FP32 they equal the correctly rounded
//    result except within a few FP64 ulps of an FP32 rounding boundary.
// NaN results are the canonical quiet NaN (0x7fc00000 in FP32), whatever the payload of a NaN input.
#pragma once

#include <cstddef>
#include <vector>

namespace attnsim {

// --- elementary functions (FP64, IEEE basic operations only) ---------------------------------

double det_exp(double x);  // e^x; +Inf above 709.78, +0 below -745.14
double det_log(double x);  // ln x; -Inf at ±0, NaN below 0
// sin and cos of |x| <= kDetTrigMax (the three-part Cody-Waite reduction is exact there; beyond
// it these throw std::domain_error rather than lose the argument's low bits).
inline constexpr double kDetTrigMax = 1.0e6;
double det_sin(double x);
double det_cos(double x);
double det_erf(double x);  // the error function

// --- projections: y = x · Wᵀ + b ---------------------------------------------------------------

// W [n, k] FP32 (row o holds output o's weights, the layout of torch.nn.Linear and GGUF) repacked
// into panels of kLinearPanel outputs, k-major inside a panel (panel p, input j, lane i at
// packed[(p·k + j)·kLinearPanel + i]; the last panel zero-padded), plus an optional bias [n].
inline constexpr std::size_t kLinearPanel = 16;
struct PackedLinear {
  std::size_t n = 0, k = 0;
  std::vector<float> packed;
  std::vector<float> bias;  // empty: no bias
  std::size_t panels() const { return (n + kLinearPanel - 1) / kLinearPanel; }
};
PackedLinear pack_linear(const float* w, std::size_t n, std::size_t k, const float* bias);

// Rows [0, rows) of y (row stride ldy) for the outputs of panels [p0, p1): y[t][o] =
// fp32(Σ_{j=0..k-1} x[t][j]·W[o][j] (FP64, from +0, j ascending) + bias[o]) with x given in FP64
// (row stride ldx; each value an FP32 value, so that the products stay exact). One rounding per
// output. The threads of a caller split rows or panels: an output's value never depends on them.
void linear_f32(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                std::size_t p0, std::size_t p1, float* y, std::size_t ldy);
void linear_f32_ref(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                    std::size_t p0, std::size_t p1, float* y, std::size_t ldy);

// --- row operations (one row of n values; FP64 inside, one rounding to FP32) ------------------

// RMSNorm (Llama): y = w · x / sqrt(Σx²/n + eps), Σ in FP64 (exact squares) in index order.
void rms_norm_row(const float* x, const float* w, std::size_t n, double eps, float* y);
// LayerNorm (BERT): mean and variance in FP64 in index order, y = (x − μ)/sqrt(σ² + eps)·g + b.
void layer_norm_row(const float* x, const float* g, const float* b, std::size_t n, double eps,
                    float* y);

// --- element-wise (FP64 inside, one rounding to FP32) ------------------------------------------

// The SiLU-gated MLP's product: y = silu(g)·u = g/(1 + e^−g)·u.
void silu_mul(const float* g, const float* u, std::size_t n, float* y);
// BERT's exact-erf GELU: y = x/2 · (1 + erf(x/√2)).
void gelu_erf(const float* x, std::size_t n, float* y);

// --- RoPE tables --------------------------------------------------------------------------------

// Hugging Face's rotate_half tables for positions start .. start+rows-1 and head_dim d (even):
// inv_freq[i] = fp32(base^(−2i/d)), angle = fp32(position · inv_freq[i]) (FP32, as transformers
// computes it), cos/sin [rows, d] = fp32(cos/sin(angle)), the d/2 frequencies repeated.
void rope_tables(std::size_t rows, std::size_t start, std::size_t d, double base, float* cos_out,
                 float* sin_out);

// --- metrics ------------------------------------------------------------------------------------

// FP64 log-softmax of one row of FP32 logits: out[i] = (z[i] − max) − ln Σ_j e^(z[j] − max), the
// sum in index order. A row with a NaN gives NaN everywhere; +Inf logits give NaN (undefined).
void log_softmax_row(const float* z, std::size_t n, double* out);
// KL(p ‖ q) of two log-probability rows: Σ_i e^lp[i] · (lp[i] − lq[i]) in index order (a term
// whose probability is 0 contributes 0).
double kl_row(const double* lp, const double* lq, std::size_t n);

}  // namespace attnsim
