// KIVI's asymmetric FP16 group quantizer (kivi_quant.hpp): the FP32-then-FP16 form PyTorch's half
// kernels compute, and the FP64 reference.
#include "numerics/kivi_quant.hpp"

#include <cmath>
#include <limits>

#include "formats/encoding.hpp"
#include "formats/float16.hpp"

namespace attnsim {

namespace {

// An FP32 result rounded to FP16 (PyTorch: the op in FP32 "opmath", stored as half).
float fl16(float x) {
  return decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x, kCudaRn));
}

// An FP64 result rounded once to FP16.
double fl16_ref(double x) { return double(decode_f32<fp16>(encode<fp16>(x, kCudaRn))); }

float max_code(int bits) { return float((1 << bits) - 1); }

}  // namespace

KiviGroup kivi_group(const float* x, int n, std::ptrdiff_t stride, int bits) {
  float mn = x[0], mx = x[0];
  bool nan = std::isnan(x[0]);
  for (int i = 1; i < n; ++i) {
    const float v = x[std::ptrdiff_t(i) * stride];
    nan = nan || std::isnan(v);
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  KiviGroup g;
  if (nan) {
    g.mn = g.scale = std::numeric_limits<float>::quiet_NaN();
    return g;
  }
  g.mn = mn;
  g.scale = fl16(fl16(mx - mn) / max_code(bits));
  return g;
}

std::uint8_t kivi_code(float x, const KiviGroup& g, int bits) {
  const float v = fl16(fl16(x - g.mn) / g.scale);
  if (std::isnan(v)) return 0;
  const float c = std::fmin(std::fmax(v, 0.0f), max_code(bits));
  return std::uint8_t(std::nearbyint(c));  // the default mode: nearest, ties to even
}

float kivi_dequantize(int q, const KiviGroup& g) { return fl16(fl16(float(q) * g.scale) + g.mn); }

KiviGroup kivi_quantize_group(const float* x, int n, std::ptrdiff_t stride, int bits,
                              std::uint8_t* q, std::ptrdiff_t q_stride) {
  const KiviGroup g = kivi_group(x, n, stride, bits);
  for (int i = 0; i < n; ++i)
    q[std::ptrdiff_t(i) * q_stride] = kivi_code(x[std::ptrdiff_t(i) * stride], g, bits);
  return g;
}

KiviGroup kivi_group_ref(const float* x, int n, std::ptrdiff_t stride, int bits) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    const double v = x[std::ptrdiff_t(i) * stride];
    if (v != v) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      return KiviGroup{nan, nan};
    }
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  const double range = fl16_ref(hi - lo);  // exact in FP64: both are FP16 values
  const double levels = double((1 << bits) - 1);
  return KiviGroup{float(fl16_ref(range / levels)), float(lo)};
}

std::uint8_t kivi_code_ref(float x, const KiviGroup& g, int bits) {
  const double num = fl16_ref(double(x) - double(g.mn));
  const double v = fl16_ref(num / double(g.scale));
  if (v != v) return 0;
  const double top = double((1 << bits) - 1);
  // Round half to even by hand: the fraction against 1/2.
  double r;
  if (v >= top) {
    r = top;
  } else if (v <= 0) {
    r = 0;
  } else {
    const double f = std::floor(v);
    const double frac = v - f;  // exact (f <= v < f + 1)
    if (frac > 0.5) {
      r = f + 1;
    } else if (frac < 0.5) {
      r = f;
    } else {
      r = std::fmod(f, 2.0) == 0.0 ? f : f + 1;
    }
  }
  return std::uint8_t(r);
}

float kivi_dequantize_ref(int q, const KiviGroup& g) {
  const double prod = fl16_ref(double(q) * double(g.scale));
  return float(fl16_ref(prod + double(g.mn)));
}

}  // namespace attnsim
