// Array conversions behind `attnsim convert`: float -> encodings and back, for every format.
#include "experiments/io/convert.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "experiments/common/error.hpp"
#include "experiments/common/names.hpp"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/convert_array.hpp"

namespace attnsim {

std::int64_t round_exact_quotient(double x, double scale, Round r) {
  constexpr std::int64_t kCap = std::int64_t{1} << 40;
  const FloatParts px = decompose<fp64>(f64_bits(x));
  if (px.kind == FloatParts::kZero) return 0;
  const FloatParts ps = decompose<fp64>(f64_bits(scale));
  const bool neg = px.neg;
  // |x/scale| is far beyond every integer format: no need for the exact quotient.
  if (std::fabs(x / scale) > double(kCap)) return neg ? -kCap : kCap;
  // x/scale = (sx / ss) * 2^(ex - es) with 53-bit integer significands: an exact integer
  // division in 128 bits gives the quotient and the remainder that decides the rounding.
  using u128 = unsigned __int128;
  const int sh = px.exp - ps.exp;
  u128 num = px.sig;
  u128 den = ps.sig;
  if (sh >= 0) {
    num <<= sh;  // < 2^41 * 2^53: the cap above bounds the shift
  } else if (-sh <= 70) {
    den <<= -sh;  // < 2^53 * 2^70
  } else {
    // Quotient below 2^-16: zero, but not exactly, so directed rounding may step away from it.
    const bool up = (r == Round::kUp && !neg) || (r == Round::kDown && neg);
    return up ? (neg ? -1 : 1) : 0;
  }
  std::int64_t k = std::int64_t(num / den);
  const u128 rem = num % den;
  const u128 twice = rem * 2;
  bool up = false;
  switch (r) {
    case Round::kNearestEven:
      up = twice > den || (twice == den && (k & 1));
      break;
    case Round::kNearestAway:
      up = twice >= den && rem != 0;
      break;
    case Round::kTowardZero:
      up = false;
      break;
    case Round::kUp:
      up = !neg && rem != 0;
      break;
    case Round::kDown:
      up = neg && rem != 0;
      break;
  }
  k += up ? 1 : 0;
  return neg ? -k : k;
}

namespace {

template <class Fmt>
constexpr Encoding encoding_of() {
  return std::is_same_v<Fmt, bf16>     ? Encoding::kBf16
         : std::is_same_v<Fmt, fp16>   ? Encoding::kFp16
         : std::is_same_v<Fmt, e4m3fn> ? Encoding::kE4m3fn
                                       : Encoding::kE5m2;
}

// FP32 sources through numerics/convert_array (vector kernels, bit-identical to encode<>), in
// blocks over the threads; FP64 sources element by element (one rounding from the double).
template <class Fmt, class T>
void encode_float(const T* x, std::size_t count, Policy p, std::vector<std::uint8_t>& out) {
  using S = typename Fmt::Storage;
  out.resize(count * sizeof(S));
  S* dst = reinterpret_cast<S*>(out.data());
  const std::int64_t n = std::int64_t(count);
  if constexpr (std::is_same_v<T, float>) {
    constexpr std::int64_t kBlock = std::int64_t{1} << 16;
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; i += kBlock)
      encode_array(encoding_of<Fmt>(), x + i, std::size_t(std::min(kBlock, n - i)), dst + i, p);
  } else {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = encode<Fmt>(x[i], p);
  }
}

template <class IntFmt, class T>
void encode_int(const T* x, std::size_t count, const ConvertRequest& req,
                std::vector<std::uint8_t>& out) {
  std::vector<std::int32_t> q(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double v = double(x[i]);
    if (std::isnan(v)) {
      throw UsageError("input element " + std::to_string(i) +
                       " is NaN; integer formats have no NaN");
    }
    // +-Inf saturates, as cvt.rni.sat does.
    const std::int64_t k = std::isinf(v)
                               ? (v < 0 ? -(std::int64_t{1} << 40) : (std::int64_t{1} << 40))
                               : round_exact_quotient(v, req.scale, req.policy.round);
    q[i] = int_clamp_or_wrap<IntFmt>(k, IntOverflow::kSaturate);
  }
  if (req.packed) {
    out.resize(packed_bytes<IntFmt>(q.size()));
    pack<IntFmt>(q.data(), q.size(), out.data());
  } else {
    out.resize(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) out[i] = std::uint8_t(std::int8_t(q[i]));
  }
}

template <class T>
std::vector<std::uint8_t> encode_any(const T* x, std::size_t n, const ConvertRequest& req) {
  std::vector<std::uint8_t> out;
  const std::string& f = req.format;
  const bool is_int = f == "int8" || f == "int4" || f == "int2";
  if (is_int) {
    if (!(req.scale > 0.0) || !std::isfinite(req.scale)) {
      throw UsageError("--to " + f + " needs --scale, a finite number > 0");
    }
    if (req.policy.overflow != Overflow::kSaturate) {
      throw UsageError("integer formats saturate; use --overflow saturate with --to " + f);
    }
    if (req.packed && f == "int8") throw UsageError("--packed applies to int4 and int2 only");
  } else {
    if (req.scale != 0.0) throw UsageError("--scale applies to integer formats only");
    if (req.packed) throw UsageError("--packed applies to int4 and int2 only");
  }
  if (f == "e4m3fn") {
    if (req.policy.overflow == Overflow::kInf) {
      throw UsageError(
          "e4m3fn has no infinity; choose --overflow saturate, saturate-finite or nan");
    }
    encode_float<e4m3fn>(x, n, req.policy, out);
  } else if (f == "e5m2") {
    encode_float<e5m2>(x, n, req.policy, out);
  } else if (f == "bf16") {
    encode_float<bf16>(x, n, req.policy, out);
  } else if (f == "fp16") {
    encode_float<fp16>(x, n, req.policy, out);
  } else if (f == "int8") {
    encode_int<s8>(x, n, req, out);
  } else if (f == "int4") {
    encode_int<s4>(x, n, req, out);
  } else if (f == "int2") {
    encode_int<s2>(x, n, req, out);
  } else {
    throw UsageError("unknown format '" + f + "' (expected " +
                     join_choices(convert_format_names()) + ")");
  }
  return out;
}

template <class Fmt>
std::vector<float> decode_float(const std::uint8_t* bytes, std::size_t size) {
  using S = typename Fmt::Storage;
  if (size % sizeof(S) != 0) {
    throw UsageError("input has " + std::to_string(size) + " bytes, not a whole number of " +
                     std::to_string(sizeof(S)) + "-byte encodings");
  }
  std::vector<S> codes(size / sizeof(S));
  if (size != 0) std::memcpy(codes.data(), bytes, size);
  std::vector<float> out(codes.size());
  decode_array(encoding_of<Fmt>(), codes.data(), codes.size(), out.data());  // numerics kernels
  return out;
}

template <class IntFmt>
std::vector<float> decode_int(const std::uint8_t* bytes, std::size_t size,
                              const ConvertRequest& req, std::size_t count) {
  std::vector<std::int32_t> q;
  if (req.packed) {
    const std::size_t capacity = size * IntFmt::kPerByte;
    const std::size_t n = count == 0 ? capacity : count;
    if (n > capacity) {
      throw UsageError("--count " + std::to_string(n) + " exceeds the " + std::to_string(capacity) +
                       " packed elements in the input");
    }
    q.resize(n);
    unpack<IntFmt>(bytes, n, q.data());
  } else {
    q.resize(size);
    for (std::size_t i = 0; i < size; ++i) {
      const std::int32_t v = std::int8_t(bytes[i]);
      if (v < IntFmt::kMin || v > IntFmt::kMax) {
        throw UsageError("input byte " + std::to_string(i) + " holds " + std::to_string(v) +
                         ", outside the range of the format");
      }
      q[i] = v;
    }
  }
  const float s = float(req.scale);
  std::vector<float> out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) out[i] = float(q[i]) * s;
  return out;
}

}  // namespace

std::vector<std::uint8_t> encode_array(const std::vector<float>& x, const ConvertRequest& req) {
  return encode_any(x.data(), x.size(), req);
}
std::vector<std::uint8_t> encode_array(const std::vector<double>& x, const ConvertRequest& req) {
  return encode_any(x.data(), x.size(), req);
}
std::vector<std::uint8_t> encode_array(const float* x, std::size_t n, const ConvertRequest& req) {
  return encode_any(x, n, req);
}
std::vector<std::uint8_t> encode_array(const double* x, std::size_t n, const ConvertRequest& req) {
  return encode_any(x, n, req);
}

std::vector<float> decode_array(const std::vector<std::uint8_t>& bytes, const ConvertRequest& req,
                                std::size_t count) {
  return decode_array(bytes.data(), bytes.size(), req, count);
}

std::vector<float> decode_array(const std::uint8_t* bytes, std::size_t size,
                                const ConvertRequest& req, std::size_t count) {
  const std::string& f = req.format;
  const bool is_int = f == "int8" || f == "int4" || f == "int2";
  if (is_int && (!(req.scale > 0.0) || !std::isfinite(req.scale))) {
    throw UsageError("decoding " + f + " needs --scale, a finite number > 0");
  }
  if (req.packed && f != "int4" && f != "int2")
    throw UsageError("--packed applies to int4 and int2 only");
  if (count != 0 && !req.packed) throw UsageError("--count applies to packed input only");
  if (f == "e4m3fn") return decode_float<e4m3fn>(bytes, size);
  if (f == "e5m2") return decode_float<e5m2>(bytes, size);
  if (f == "bf16") return decode_float<bf16>(bytes, size);
  if (f == "fp16") return decode_float<fp16>(bytes, size);
  if (f == "int8") return decode_int<s8>(bytes, size, req, count);
  if (f == "int4") return decode_int<s4>(bytes, size, req, count);
  if (f == "int2") return decode_int<s2>(bytes, size, req, count);
  throw UsageError("unknown format '" + f + "' (expected " + join_choices(convert_format_names()) +
                   ")");
}

}  // namespace attnsim
