// Integer quantizers (see quantize.hpp and numerics/README.md).
#include "numerics/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "formats/intn.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/special.hpp"

namespace attnsim {

namespace {

// Float -> integer as PTX cvt.{rni,rzi,rpi}.s32.f32 then a saturating pack to `bits`: NaN gives
// 0, out-of-range values saturate (formats/intn.hpp round_to_int; proven on the H100 for s8).
std::int32_t to_int(float v, Round r, int bits) {
  switch (bits) {
    case 8:
      return round_to_int<s8>(v, r, IntOverflow::kSaturate);
    case 4:
      return round_to_int<s4>(v, r, IntOverflow::kSaturate);
    case 2:
      return round_to_int<s2>(v, r, IntOverflow::kSaturate);
  }
  throw std::invalid_argument("quantizers support 8, 4 and 2 bits");
}

}  // namespace

std::int32_t quantize_value(float x, float scale, float inv, const SymmetricQuantizer& qz) {
  const float v = qz.apply == ScaleApply::kDivide ? x / scale
                  : qz.apply == ScaleApply::kDivFull ? div_full(x, scale)
                  : qz.apply == ScaleApply::kMultiplyRcpApprox ? fmul_ftz(inv, x)
                                                               : x * inv;
  switch (qz.rounding) {
    case QuantRounding::kRneSat:  // cvt.rni.sat (cvt_rni_sat_s8 for 8 bits)
      return to_int(v, Round::kNearestEven, qz.bits);
    case QuantRounding::kHalfAwayFp32: {
      // `x_int8 += 0.5 * tl.where(x_int8 >= 0, 1, -1)`: an FP32 addition, then truncation.
      const float w = v + (v >= 0.0f ? 0.5f : -0.5f);
      return to_int(w, Round::kTowardZero, qz.bits);
    }
    case QuantRounding::kNearestEven:
      return to_int(v, Round::kNearestEven, qz.bits);
    case QuantRounding::kCeil:
      return to_int(v, Round::kUp, qz.bits);
  }
  throw std::logic_error("quantize_value");
}

void quantize_values_ref(const float* x, std::size_t n, float scale, float inv,
                         const SymmetricQuantizer& qz, std::int32_t* q) {
  for (std::size_t i = 0; i < n; ++i) q[i] = quantize_value(x[i], scale, inv, qz);
}

void quantize_values(const float* x, std::size_t n, float scale, float inv,
                     const SymmetricQuantizer& qz, std::int32_t* q) {
  array_kernels().quantize_values(x, n, scale, inv, qz, q);
}

// The blocked form every vector set takes (dispatch.cpp): quantize_value's steps over blocks of
// 256 values, the rounding by round_to_int_array (the active set's kernel).
void quantize_values_blocked(const float* x, std::size_t n, float scale, float inv,
                             const SymmetricQuantizer& qz, std::int32_t* q) {
  if (qz.bits != 8 && qz.bits != 4 && qz.bits != 2)
    return quantize_values_ref(x, n, scale, inv, qz, q);
  constexpr std::size_t kBlock = 256;
  float v[kBlock];
  for (std::size_t i0 = 0; i0 < n; i0 += kBlock) {
    const std::size_t m = std::min(kBlock, n - i0);
    const float* xi = x + i0;
    // quantize_value's v, then kHalfAwayFp32's FP32 ±0.5.
    switch (qz.apply) {
      case ScaleApply::kDivide:
        for (std::size_t k = 0; k < m; ++k) v[k] = xi[k] / scale;
        break;
      case ScaleApply::kDivFull:
        for (std::size_t k = 0; k < m; ++k) v[k] = div_full(xi[k], scale);
        break;
      case ScaleApply::kMultiplyRcpApprox:
        for (std::size_t k = 0; k < m; ++k) v[k] = fmul_ftz(inv, xi[k]);
        break;
      case ScaleApply::kMultiplyReciprocal:
        for (std::size_t k = 0; k < m; ++k) v[k] = xi[k] * inv;
        break;
    }
    Round r = Round::kNearestEven;
    if (qz.rounding == QuantRounding::kHalfAwayFp32) {
      for (std::size_t k = 0; k < m; ++k) v[k] = v[k] + (v[k] >= 0.0f ? 0.5f : -0.5f);
      r = Round::kTowardZero;
    } else if (qz.rounding == QuantRounding::kCeil) {
      r = Round::kUp;
    }
    round_to_int_array(v, m, q + i0, r, qz.bits);
  }
}

std::vector<float> group_amax(const float* x, int tokens, int channels, const GroupMap& map) {
  std::vector<float> amax(std::size_t(map.count(tokens, channels)), 0.0f);
  // A token's channels are either one group each (group(t, c) = group(t, 0) + c) or all one
  // group; the maximum of values >= 0 that skips NaNs does not depend on the order it is taken
  // in, so a token's row maximum is folded into its group once.
  const bool by_channel = per_channel_groups(map);
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + std::size_t(t) * channels;
    if (by_channel) {
      float* a = amax.data() + map.group(t, 0, tokens, channels);
      for (int c = 0; c < channels; ++c) {
        const float v = std::fabs(row[c]);
        a[c] = v > a[c] ? v : a[c];  // NaN inputs do not raise amax (fmaxf semantics)
      }
    } else {
      float m = 0.0f;
      for (int c = 0; c < channels; ++c) {
        const float v = std::fabs(row[c]);
        m = v > m ? v : m;
      }
      float& a = amax[std::size_t(map.group(t, 0, tokens, channels))];
      a = m > a ? m : a;
    }
  }
  return amax;
}

QuantizedTensor quantize_symmetric(const float* x, int tokens, int channels, const GroupMap& map,
                                   const SymmetricQuantizer& qz) {
  QuantizedTensor out;
  out.tokens = tokens;
  out.channels = channels;
  out.bits = qz.bits;
  out.map = map;
  std::vector<float> amax = group_amax(x, tokens, channels, map);
  out.scale.resize(amax.size());
  std::vector<float> inv(amax.size());
  for (std::size_t g = 0; g < amax.size(); ++g) {
    float a = amax[g];
    if (qz.epsilon == ScaleEpsilon::kFloor) a = a > 1e-7f ? a : 1e-7f;
    if (qz.scale_compute == ScaleCompute::kReciprocalConstant) {
      const float r = 1.0f / qz.qmax;  // fl(1/qmax): 0x3C010204 for 127
      out.scale[g] = qz.epsilon == ScaleEpsilon::kAdd              ? std::fma(a, r, 1e-7f)
                     : qz.apply == ScaleApply::kMultiplyRcpApprox ? fmul_ftz(a, r)
                                                                  : a * r;
    } else {
      out.scale[g] = a / qz.qmax;
      if (qz.epsilon == ScaleEpsilon::kAdd) out.scale[g] = out.scale[g] + 1e-7f;
    }
    inv[g] = qz.apply == ScaleApply::kMultiplyRcpApprox
                 ? fmul_ftz(RcpApproxFtz::h100()(a), qz.qmax)
                 : qz.qmax / a;
  }
  out.q.resize(std::size_t(tokens) * channels);
  // Runs of consecutive elements of one group (a whole row for per-token and per-block groups)
  // through quantize_values.
  for (int t = 0; t < tokens; ++t) {
    for (int c0 = 0; c0 < channels;) {
      const int g = map.group(t, c0, tokens, channels);
      int c1 = c0 + 1;
      while (c1 < channels && map.group(t, c1, tokens, channels) == g) ++c1;
      const std::size_t i = std::size_t(t) * channels + c0;
      if (c1 - c0 >= 16) {
        quantize_values(x + i, std::size_t(c1 - c0), out.scale[std::size_t(g)],
                        inv[std::size_t(g)], qz, out.q.data() + i);
      } else {  // per-channel groups: element by element
        out.q[i] = quantize_value(x[i], out.scale[std::size_t(g)], inv[std::size_t(g)], qz);
        c1 = c0 + 1;
      }
      c0 = c1;
    }
  }
  return out;
}

std::vector<float> QuantizedTensor::dequantize() const {
  std::vector<float> x(q.size());
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const std::size_t i = std::size_t(t) * channels + c;
      x[i] = float(q[i]) * scale[std::size_t(map.group(t, c, tokens, channels))];
    }
  }
  return x;
}

std::int64_t div_ceil(std::int64_t a, std::int64_t b) {
  if (b <= 0) throw std::invalid_argument("div_ceil: b must be positive");
  const std::int64_t q = a / b, r = a % b;  // C++ truncates toward zero
  return (r != 0 && a > 0) ? q + 1 : q;
}

std::int64_t div_round_nearest_even(std::int64_t a, std::int64_t b) {
  if (b <= 0) throw std::invalid_argument("div_round_nearest_even: b must be positive");
  std::int64_t q = a / b, r = a % b;
  if (r < 0) {  // floor division
    q -= 1;
    r += b;
  }
  // a / b = q + r / b with 0 <= r < b
  if (2 * r > b || (2 * r == b && (q & 1))) ++q;
  return q;
}

std::int64_t div_round(std::int64_t a, std::int64_t b, IntRound r) {
  return r == IntRound::kCeil ? div_ceil(a, b) : div_round_nearest_even(a, b);
}

ProgressiveTensor quantize_progressive(const QuantizedTensor& int8, const GroupMap& map, int bits,
                                       const ProgressiveQuantizer& config) {
  if (bits != 4 && bits != 2)
    throw std::invalid_argument("quantize_progressive: bits must be 4 or 2");
  ProgressiveTensor out;
  out.stage1 = int8;
  out.map = map;
  out.bits = bits;
  out.config = config;
  const int T = int8.tokens, C = int8.channels, G = map.count(T, C);
  std::vector<std::int32_t> mn(std::size_t(G), std::numeric_limits<std::int32_t>::max()),
      mx(std::size_t(G), std::numeric_limits<std::int32_t>::min());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const std::size_t g = std::size_t(map.group(t, c, T, C));
      const std::int32_t v = int8.q[std::size_t(t) * C + c];
      mn[g] = v < mn[g] ? v : mn[g];
      mx[g] = v > mx[g] ? v : mx[g];
    }
  }
  const bool scaled = config.zero == ZeroPointForm::kScaled;
  out.s_int.assign(std::size_t(G), 1);
  out.z_int.assign(std::size_t(G), 0);
  for (int g = 0; g < G; ++g) {
    if (mn[g] > mx[g]) continue;  // a group with no element (padding only)
    const std::int64_t range = std::int64_t(mx[g]) - mn[g];
    const std::int64_t div = config.divisor == RangeDivisor::kHalf
                                 ? (std::int64_t{1} << (bits - 1))
                                 : ((std::int64_t{1} << bits) - 1);
    const std::int64_t s = std::max<std::int64_t>(1, div_round(range, div, config.scale_round));
    out.s_int[g] = std::int32_t(s);
    out.z_int[g] = std::int32_t(scaled ? div_round(mn[g], s, config.zero_round) : mn[g]);
  }
  out.q.resize(std::size_t(T) * C);
  const std::int64_t qmax = (std::int64_t{1} << bits) - 1;
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const std::size_t g = std::size_t(map.group(t, c, T, C));
      const std::int64_t v = int8.q[std::size_t(t) * C + c];
      const std::int64_t q = scaled ? div_round(v, out.s_int[g], config.value_round) - out.z_int[g]
                                    : div_round(v - out.z_int[g], out.s_int[g], config.value_round);
      out.q[std::size_t(t) * C + c] = std::int32_t(q < 0 ? 0 : (q > qmax ? qmax : q));
    }
  }
  return out;
}

std::vector<std::int32_t> ProgressiveTensor::dequantize_int8() const {
  const int T = stage1.tokens, C = stage1.channels;
  const bool scaled = config.zero == ZeroPointForm::kScaled;
  std::vector<std::int32_t> r(q.size());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const std::size_t i = std::size_t(t) * C + c, g = std::size_t(map.group(t, c, T, C));
      r[i] = scaled ? (q[i] + z_int[g]) * s_int[g] : q[i] * s_int[g] + z_int[g];
    }
  }
  return r;
}

std::vector<float> ProgressiveTensor::dequantize() const {
  const std::vector<std::int32_t> q1 = dequantize_int8();
  const int T = stage1.tokens, C = stage1.channels;
  std::vector<float> x(q1.size());
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const std::size_t i = std::size_t(t) * C + c;
      x[i] = float(q1[i]) * stage1.scale[std::size_t(stage1.map.group(t, c, T, C))];
    }
  }
  return x;
}

}  // namespace attnsim
