#include "numerics/model_math.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "numerics/dispatch.hpp"
#include "numerics/isa.hpp"
#include "numerics/model_math_kernels.hpp"

namespace attnsim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ln 2 in two parts: kLn2Hi has 32 significant bits, so n·kLn2Hi is exact for |n| < 2^21.
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
// π/2 in three parts of 33 significant bits (n·part exact for |n| < 2^20) and the rest.
constexpr double kPio2_1 = 0x1.921fb54400000p+0;
constexpr double kPio2_2 = 0x1.0b4611a600000p-34;
constexpr double kPio2_3 = 0x1.3198a2e000000p-69;
constexpr double kPio2_3t = 0x1.b839a252049c1p-104;
constexpr double kInvPio2 = 0x1.45f306dc9c883p-1;
constexpr double kTwoOverSqrtPi = 0x1.20dd750429b6dp+0;
constexpr double kSqrt1_2 = 0x1.6a09e667f3bcdp-1;

// The FP32 value of an FP64 result (one rounding, to nearest even), NaN canonical.
float to_f32(double v) {
  if (v != v) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(v);
}

// Round to the nearest integer, ties away from zero, from basic operations (|x| < 2^51).
double round_half_away(double x) {
  const double t = std::floor(x < 0 ? -x : x);  // floor is exact
  const double r = ((x < 0 ? -x : x) - t >= 0.5) ? t + 1.0 : t;
  return x < 0 ? -r : r;
}

// e^r for |r| <= ln2/2 + a little: Taylor to r^13/13! (truncation < 5e-18 relative), Horner.
double exp_kernel(double r) {
  constexpr double c[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,
                          1.0 / 3628800.0,    1.0 / 362880.0,    1.0 / 40320.0,
                          1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,
                          1.0 / 24.0,         1.0 / 6.0,         0.5};
  double p = c[0];
  for (int i = 1; i < 12; ++i) p = p * r + c[i];
  // 1 + r + r²·p: the two largest terms last.
  return 1.0 + (r + (r * r) * p);
}

// sin r and cos r for |r| <= π/4 (+ a little): Taylor to r^17/17! and r^18/18!.
double sin_kernel(double r) {
  const double z = r * r;
  constexpr double s[] = {1.0 / 355687428096000.0, -1.0 / 1307674368000.0, 1.0 / 6227020800.0,
                          -1.0 / 39916800.0,       1.0 / 362880.0,         -1.0 / 5040.0,
                          1.0 / 120.0,             -1.0 / 6.0};
  double p = s[0];
  for (int i = 1; i < 8; ++i) p = p * z + s[i];
  return r + r * (z * p);
}
double cos_kernel(double r) {
  const double z = r * r;
  constexpr double c[] = {-1.0 / 6402373705728000.0, 1.0 / 20922789888000.0,
                          -1.0 / 87178291200.0,      1.0 / 479001600.0,
                          -1.0 / 3628800.0,          1.0 / 40320.0,
                          -1.0 / 720.0,              1.0 / 24.0};
  double p = c[0];
  for (int i = 1; i < 8; ++i) p = p * z + c[i];
  // 1 − z/2 + z²·p
  return 1.0 + (-0.5 * z + (z * z) * p);
}

// x = n·π/2 + r with |r| <= π/4 (+ rounding); returns n mod 4.
int reduce_pio2(double x, double* r) {
  if (!(std::fabs(x) <= kDetTrigMax)) {
    throw std::domain_error("det_sin/det_cos: |x| = " + std::to_string(std::fabs(x)) +
                            " is beyond the reduction's range (1e6)");
  }
  const double n = round_half_away(x * kInvPio2);
  // Each n·part is exact; the first subtraction is exact (Sterbenz, as in fdlibm's medium case).
  *r = (((x - n * kPio2_1) - n * kPio2_2) - n * kPio2_3) - n * kPio2_3t;
  const long long q = static_cast<long long>(n);
  return static_cast<int>(((q % 4) + 4) % 4);
}

}  // namespace

// --- elementary functions -------------------------------------------------------------------------

double det_exp(double x) {
  if (x != x) return kNaN;
  if (x > 709.782712893384) return kInf;
  if (x < -745.1332191019412) return 0.0;
  const double n = round_half_away(x * kInvLn2);
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;
  const double p = exp_kernel(r);
  // p·2^n in two steps, so that neither overflows nor loses a subnormal result's bits twice.
  const int ni = static_cast<int>(n);
  if (ni > 1000) return std::ldexp(std::ldexp(p, 1000), ni - 1000);
  if (ni < -1000) return std::ldexp(std::ldexp(p, ni + 1000), -1000);
  return std::ldexp(p, ni);
}

double det_log(double x) {
  if (x != x || x < 0) return kNaN;
  if (x == 0) return -kInf;
  if (x == kInf) return kInf;
  int e = 0;
  double m = std::frexp(x, &e);  // x = m·2^e, m in [0.5, 1): exact
  if (m < kSqrt1_2) {
    m *= 2.0;
    e -= 1;
  }
  // ln m = 2·atanh(s), s = (m − 1)/(m + 1), |s| <= 0.1716: odd series to s^23.
  const double f = m - 1.0;  // exact (m within a factor 2 of 1)
  const double s = f / (2.0 + f);
  const double z = s * s;
  constexpr double c[] = {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                          1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3};
  double p = c[0];
  for (int i = 1; i < 11; ++i) p = p * z + c[i];
  const double lnm = 2.0 * s + (2.0 * s) * (z * p);
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (de * kLn2Lo + lnm);
}

double det_sin(double x) {
  if (x != x || std::fabs(x) == kInf) return kNaN;
  if (x == 0) return x;  // keeps the sign of zero
  double r = 0;
  switch (reduce_pio2(x, &r)) {
    case 0: return sin_kernel(r);
    case 1: return cos_kernel(r);
    case 2: return -sin_kernel(r);
    default: return -cos_kernel(r);
  }
}

double det_cos(double x) {
  if (x != x || std::fabs(x) == kInf) return kNaN;
  double r = 0;
  switch (reduce_pio2(x, &r)) {
    case 0: return cos_kernel(r);
    case 1: return -sin_kernel(r);
    case 2: return -cos_kernel(r);
    default: return sin_kernel(r);
  }
}

double det_erf(double x) {
  if (x != x) return kNaN;
  const double a = std::fabs(x);
  // erfc(6) = 2.2e-17 is below half an ulp of 1.
  if (a >= 6.0) return x < 0 ? -1.0 : 1.0;
  if (a == 0) return x;
  // erf a = 2/√π · e^(−a²) · Σ_n (2a²)^n · a / (1·3·5···(2n+1)): every term positive.
  const double a2 = a * a;
  const double two_a2 = 2.0 * a2;
  double term = a, sum = a;
  for (int n = 1; n < 200; ++n) {
    term = term * two_a2 / static_cast<double>(2 * n + 1);
    const double next = sum + term;
    if (next == sum) break;
    sum = next;
  }
  double v = kTwoOverSqrtPi * det_exp(-a2) * sum;
  if (v > 1.0) v = 1.0;
  return x < 0 ? -v : v;
}

// --- projections ----------------------------------------------------------------------------------

PackedLinear pack_linear(const float* w, std::size_t n, std::size_t k, const float* bias) {
  if (n == 0 || k == 0) throw std::invalid_argument("pack_linear: an empty weight matrix");
  PackedLinear p;
  p.n = n;
  p.k = k;
  p.packed.assign(p.panels() * k * kLinearPanel, 0.0f);
  for (std::size_t o = 0; o < n; ++o) {
    const std::size_t panel = o / kLinearPanel, lane = o % kLinearPanel;
    float* dst = p.packed.data() + panel * k * kLinearPanel + lane;
    const float* src = w + o * k;
    for (std::size_t j = 0; j < k; ++j) dst[j * kLinearPanel] = src[j];
  }
  if (bias != nullptr) p.bias.assign(bias, bias + n);
  return p;
}

void linear_f32_ref(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                    std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  const std::size_t k = w.k;
  for (std::size_t t = 0; t < rows; ++t) {
    const double* xr = x + t * ldx;
    for (std::size_t p = p0; p < p1; ++p) {
      const float* panel = w.packed.data() + p * k * kLinearPanel;
      for (std::size_t i = 0; i < kLinearPanel; ++i) {
        const std::size_t o = p * kLinearPanel + i;
        if (o >= w.n) break;
        double acc = 0.0;
        for (std::size_t j = 0; j < k; ++j) {
          acc += xr[j] * static_cast<double>(panel[j * kLinearPanel + i]);
        }
        if (!w.bias.empty()) acc += static_cast<double>(w.bias[o]);
        y[t * ldy + o] = to_f32(acc);
      }
    }
  }
}

// The active set's kernel (numerics/dispatch.hpp: model_math_x86.cpp, model_math_neon.cpp, or
// the reference).
void linear_f32(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                std::size_t p0, std::size_t p1, float* y, std::size_t ldy) {
  array_kernels().linear_f32(x, rows, ldx, w, p0, p1, y, ldy);
}

// --- row operations ---------------------------------------------------------------------------

void rms_norm_row(const float* x, const float* w, std::size_t n, double eps, float* y) {
  double ss = 0.0;
  for (std::size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double r = std::sqrt(ss / static_cast<double>(n) + eps);
  for (std::size_t i = 0; i < n; ++i) {
    y[i] = to_f32(static_cast<double>(w[i]) * (static_cast<double>(x[i]) / r));
  }
}

void layer_norm_row(const float* x, const float* g, const float* b, std::size_t n, double eps,
                    float* y) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  const double mu = s / static_cast<double>(n);
  double v = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mu;
    v += d * d;
  }
  const double r = std::sqrt(v / static_cast<double>(n) + eps);
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mu;
    y[i] = to_f32((d / r) * static_cast<double>(g[i]) + static_cast<double>(b[i]));
  }
}

// --- element-wise -----------------------------------------------------------------------------

void silu_mul(const float* g, const float* u, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    y[i] = to_f32(gi / (1.0 + det_exp(-gi)) * static_cast<double>(u[i]));
  }
}

void gelu_erf(const float* x, std::size_t n, float* y) {
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    y[i] = to_f32(0.5 * xi * (1.0 + det_erf(xi * kSqrt1_2)));
  }
}

// --- RoPE ---------------------------------------------------------------------------------------

void rope_tables(std::size_t rows, std::size_t start, std::size_t d, double base, float* cos_out,
                 float* sin_out) {
  if (d == 0 || d % 2 != 0) throw std::invalid_argument("rope_tables: head_dim must be even");
  if (!(base > 1.0) || !std::isfinite(base)) {
    throw std::invalid_argument("rope_tables: base must be a finite number > 1");
  }
  const std::size_t half = d / 2;
  std::vector<float> inv_freq(half);
  const double ln_base = det_log(base);
  for (std::size_t i = 0; i < half; ++i) {
    inv_freq[i] = to_f32(det_exp(-(static_cast<double>(2 * i) / static_cast<double>(d)) * ln_base));
  }
  for (std::size_t t = 0; t < rows; ++t) {
    const float pos = static_cast<float>(start + t);
    if (static_cast<std::size_t>(pos) != start + t) {
      throw std::invalid_argument("rope_tables: position " + std::to_string(start + t) +
                                  " is not exact in FP32");
    }
    for (std::size_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos * inv_freq[i]);  // the FP32 product
      const float c = to_f32(det_cos(ang)), s = to_f32(det_sin(ang));
      cos_out[t * d + i] = cos_out[t * d + half + i] = c;
      sin_out[t * d + i] = sin_out[t * d + half + i] = s;
    }
  }
}

// --- metrics ------------------------------------------------------------------------------------

void log_softmax_row(const float* z, std::size_t n, double* out) {
  double m = -kInf;
  bool nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(z[i]);
    if (v != v || v == kInf) nan = true;
    if (v > m) m = v;
  }
  if (nan || n == 0 || m == -kInf) {
    for (std::size_t i = 0; i < n; ++i) out[i] = kNaN;
    return;
  }
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) s += det_exp(static_cast<double>(z[i]) - m);
  const double ls = det_log(s);
  for (std::size_t i = 0; i < n; ++i) out[i] = (static_cast<double>(z[i]) - m) - ls;
}

double kl_row(const double* lp, const double* lq, std::size_t n) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double p = det_exp(lp[i]);
    if (p == 0.0) continue;
    s += p * (lp[i] - lq[i]);
  }
  return s;
}

}  // namespace attnsim
