// Models of the GPU's approximate special functions (see special.hpp).
#include "numerics/special.hpp"

#include <bit>
#include <cfloat>
#include <cmath>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "formats/float32.hpp"

#ifndef ATTNSIM_DATA_DIR
#error "ATTNSIM_DATA_DIR must name the repository's data/ folder"
#endif

namespace attnsim {

namespace {
std::string& data_dir_setting() {
  static std::string dir = ATTNSIM_DATA_DIR;
  return dir;
}
}  // namespace

void set_special_data_dir(const std::string& data_dir) { data_dir_setting() = data_dir; }
const std::string& special_data_dir() { return data_dir_setting(); }

namespace {
// The 2^23 two-bit codes of a table file (entry i in bits 2·(i%4) of byte i/4).
std::vector<unsigned char> read_2bit_codes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> packed(std::size_t{1} << 21);
  if (!in || !in.read(reinterpret_cast<char*>(packed.data()), std::streamsize(packed.size()))) {
    throw std::runtime_error("cannot read the special-function table '" + path + "'");
  }
  std::vector<unsigned char> codes(std::size_t{1} << 23);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = (packed[i / 4] >> (2 * (i % 4))) & 3u;
  return codes;
}
}  // namespace

RcpApproxFtz::RcpApproxFtz(const std::string& delta_path) : t_(std::size_t{1} << 23) {
  const std::vector<unsigned char> codes = read_2bit_codes(delta_path);
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    // The correctly rounded 1/1.m (IEEE division on the host), corrected by the recorded delta.
    const std::uint32_t rn = f32_bits(1.0f / f32_from_bits(0x3F800000u | m));
    const unsigned code = codes[m];
    if (code == 3) throw std::runtime_error("corrupt rcp.approx table '" + delta_path + "'");
    t_[m] = code == 0 ? rn : (code == 1 ? rn + 1 : rn - 1);
  }
}

const RcpApproxFtz& RcpApproxFtz::h100() {
  static const RcpApproxFtz table(special_data_dir() + "/hw/h100/rcp_approx_ftz_delta.bin");
  return table;
}

std::uint32_t RcpApproxFtz::bits(std::uint32_t x) const {
  const std::uint32_t sign = x & 0x80000000u, e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0xFF) return m ? 0x7FFFFFFFu : sign;  // NaN -> canonical NaN; Inf -> signed zero
  if (e == 0) return sign | 0x7F800000u;         // zero or flushed subnormal -> Inf
  const std::uint32_t tm = t_[m];
  const int re = (int((tm >> 23) & 0xFF) - 127) - (int(e) - 127);
  if (re < -126) return sign;  // subnormal result flushed
  return sign | (std::uint32_t(re + 127) << 23) | (tm & 0x7FFFFF);
}

float RcpApproxFtz::operator()(float x) const { return f32_from_bits(bits(f32_bits(x))); }

namespace {
std::vector<std::uint32_t> load_steps(const std::string& path, int direction) {
  const std::vector<unsigned char> steps = read_2bit_codes(path);
  std::vector<std::uint32_t> t(std::size_t{1} << 23);
  std::uint32_t v = 0x3F800000u;  // ex2(0) = 1
  for (std::uint32_t f = 0; f < (1u << 23); ++f) {
    const std::uint32_t step = steps[f];
    v = direction > 0 ? v + step : v - step;
    t[f] = v;
  }
  return t;
}
}  // namespace

Ex2ApproxFtz::Ex2ApproxFtz(const std::string& pos_steps_path, const std::string& neg_steps_path)
    : pos_(load_steps(pos_steps_path, +1)), neg_(load_steps(neg_steps_path, -1)) {}

const Ex2ApproxFtz& Ex2ApproxFtz::h100() {
  static const Ex2ApproxFtz table(special_data_dir() + "/hw/h100/ex2_approx_ftz_pos_steps.bin",
                                  special_data_dir() + "/hw/h100/ex2_approx_ftz_neg_steps.bin");
  return table;
}

const void* Ex2ApproxFtz::derived(std::shared_ptr<const void> (*build)(const Ex2ApproxFtz&)) const {
  std::call_once(derived_once_, [&] { derived_ = build(*this); });
  return derived_.get();
}

std::uint32_t Ex2ApproxFtz::bits(std::uint32_t x) const {
  const bool neg = (x >> 31) != 0;
  const std::uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0xFF && m != 0) return 0x7FFFFFFFu;      // NaN
  if (e >= 127 + 7) return neg ? 0u : 0x7F800000u;  // |x| >= 128 (and Inf)
  // K = trunc(|x| * 2^23): |x| = (2^23 + m) * 2^(e - 150) for normal x; subnormals flush to 0.
  std::uint64_t K = 0;
  if (e != 0) {
    const std::uint64_t sig = (std::uint64_t{1} << 23) | m;
    const int sh = int(e) - 127;  // |x| * 2^23 = sig * 2^sh
    K = sh >= 0 ? (sig << sh) : (-sh >= 64 ? 0 : (sig >> -sh));
  }
  const std::int64_t a = std::int64_t(K >> 23);
  const std::uint32_t t = (neg ? neg_ : pos_)[K & 0x7FFFFF];
  const std::int64_t re = std::int64_t((t >> 23) & 0xFF) - 127 + (neg ? -a : a);
  if (re < -126) return 0u;  // flushed
  if (re > 127) return 0x7F800000u;
  return (std::uint32_t(re + 127) << 23) | (t & 0x7FFFFF);
}

float Ex2ApproxFtz::operator()(float x) const { return f32_from_bits(bits(f32_bits(x))); }

namespace {
// Reads the Elias-gamma coded residuals of lg2_approx_ftz_l36.bin and rebuilds L(m) with the
// packer's predictor (cuda_check/pack_lg2.py): P = L[m-s] + L[m-2s] - L[m-3s] with s
// the lowest set bit of m when m >= 3s, else 2 L[m-1] - L[m-2] (m >= 2), L[0] (m = 1), 0 (m = 0).
std::vector<std::uint64_t> load_l36(const std::string& path) {
  const auto corrupt = [&path]() {
    return std::runtime_error("cannot read the lg2.approx table '" + path + "'");
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw corrupt();
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                         std::istreambuf_iterator<char>());
  const std::uint64_t nbits = std::uint64_t(bytes.size()) * 8;
  std::uint64_t pos = 0;
  auto bit = [&]() -> unsigned {
    if (pos >= nbits) throw corrupt();
    const unsigned b = (bytes[pos / 8] >> (pos % 8)) & 1u;
    ++pos;
    return b;
  };
  std::vector<std::uint64_t> l(std::size_t{1} << 23);
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    int zeros = 0;
    while (bit() == 0) {
      if (++zeros > 40) throw corrupt();
    }
    std::uint64_t v = 1;
    for (int k = 0; k < zeros; ++k) v = (v << 1) | bit();
    const std::uint64_t z = v - 1;  // zigzag: 2r for r >= 0, -2r - 1 for r < 0
    const std::int64_t r = (z & 1) ? -std::int64_t(z >> 1) - 1 : std::int64_t(z >> 1);
    const std::uint32_t s = m & (0u - m);
    std::int64_t p = 0;
    if (m != 0 && m >= 3 * s) {
      p = std::int64_t(l[m - s]) + std::int64_t(l[m - 2 * s]) - std::int64_t(l[m - 3 * s]);
    } else if (m >= 2) {
      p = 2 * std::int64_t(l[m - 1]) - std::int64_t(l[m - 2]);
    } else if (m == 1) {
      p = std::int64_t(l[0]);
    }
    const std::int64_t x = p + r;
    if (x <= 0 || x >= (std::int64_t{1} << 36)) throw corrupt();
    l[m] = std::uint64_t(x);
  }
  if (pos + 8 <= nbits) throw corrupt();  // trailing data: not the file this decoder expects
  return l;
}
}  // namespace

Lg2ApproxFtz::Lg2ApproxFtz(const std::string& l36_path) : l_(load_l36(l36_path)) {}

const Lg2ApproxFtz& Lg2ApproxFtz::h100() {
  static const Lg2ApproxFtz table(special_data_dir() + "/hw/h100/lg2_approx_ftz_l36.bin");
  return table;
}

std::uint32_t Lg2ApproxFtz::bits(std::uint32_t x) const {
  const std::uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0) return 0xFF800000u;                       // ±0 and flushed subnormals -> -Inf
  if (x >> 31) return 0x7FFFFFFFu;                      // negative, -Inf, negative NaN -> NaN
  if (e == 0xFF) return m ? 0x7FFFFFFFu : 0x7F800000u;  // NaN -> canonical NaN; +Inf -> +Inf
  if (x == 0x3F800000u) return 0u;                      // lg2(1) = +0, not L(0)
  // Fixed point, 36 fraction bits: e + L(m), or its bitwise complement's magnitude for e < 0.
  const int ue = int(e) - 127;
  const std::uint64_t mag =
      ue >= 0 ? (std::uint64_t(ue) << 36) + l_[m] : (std::uint64_t(-ue) << 36) - l_[m] - 1;
  const int nb = std::bit_width(mag);  // mag >= 1: 0 < L(m) < 1 - 2^-36
  const std::uint64_t sig = nb > 24 ? (mag >> (nb - 24)) : (mag << (24 - nb));  // truncated
  const std::uint32_t be = std::uint32_t(nb - 1 - 36 + 127);
  return (ue < 0 ? 0x80000000u : 0u) | (be << 23) | std::uint32_t(sig & 0x7FFFFFu);
}

float Lg2ApproxFtz::operator()(float x) const { return f32_from_bits(bits(f32_bits(x))); }

namespace {

// A subnormal operand of an .ftz instruction: a zero of its sign.
float flush(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }

// The GPU's NaN result (every FMUL/FFMA/FADD NaN, whatever the operands: data/hw/h100/ftz/).
float canonical_nan() { return f32_from_bits(0x7FFFFFFFu); }

// The result of an .ftz multiply or FMA whose IEEE result (subnormals kept, rounded in `round`) is
// r: r when it is normal, Inf or an exact zero; a zero of r's sign when r is subnormal, or when r is
// FLT_MIN but the exact value, rounded to 24 bits with an unbounded exponent, lies below FLT_MIN
// (tininess after rounding, as x86's MXCSR.FTZ: 0x3F7FFFFF × 0x00800000 = (1 − 2^-24)·2^-126
// exactly, which the subnormal grid rounds up to FLT_MIN, gives +0). `exact_tiny(scale)` returns
// the same operation on the operands scaled so that the exact value is multiplied by 2^100 (no
// rounding below FLT_MIN, no overflow: a tiny non-zero FMA result bounds |a|, |b| < 2^49 and
// |c| < 2^-75, see fma_f32). Measured on the H100 (cuda_check/ftz_probe.cu, data/hw/h100/ftz/):
// mul.rn.ftz.f32 and fma.rn.ftz.f32 follow this rule on every one of 29,360,128 cases; rounding
// first and flushing subnormal results (the earlier model) misses 2.9 and 3.6 million of them,
// flushing every exact value below FLT_MIN (tininess before rounding) misses more.
template <class ExactScaled>
float ftz_result(float r, ExactScaled exact_scaled) {
  const float m = std::fabs(r);
  if (m > 0x1p-126f || m == 0.0f || std::isnan(r)) return r;
  if (m < 0x1p-126f) return std::copysign(0.0f, r);
  return std::fabs(exact_scaled()) < 0x1p-26f ? std::copysign(0.0f, r) : r;
}

}  // namespace

float fmul_ftz(float a, float b) {
  const float fa = flush(a), fb = flush(b);
  const float r = fa * fb;
  if (std::isnan(r)) return canonical_nan();
  // The exact product in double (48 bits), rounded to binary32 with the exponent moved up by 100.
  return ftz_result(r, [=] { return float(double(fa) * double(fb) * 0x1p100); });
}

float div_approx_ftz(float a, float b, const RcpApproxFtz& rcp) { return fmul_ftz(a, rcp(b)); }

float fadd_ftz(float a, float b) { return fma_f32(a, 1.0f, b, Round::kNearestEven, true); }

namespace {
float fma_ftz(float a, float b, float c) { return fma_f32(a, b, c, Round::kNearestEven, true); }
}  // namespace

float log2f_libdevice(float x) {
  float e0 = 0.0f;
  if (x < 0x1p-126f) {
    x = x * 8388608.0f;
    e0 = -23.0f;
  }
  const std::uint32_t b = f32_bits(x);
  const std::int32_t ie = std::int32_t(b - 0x3F3504F3u) & std::int32_t(0xFF800000u);
  const float f = f32_from_bits(b - std::uint32_t(ie)) - 1.0f;
  const float e = fma_ftz(float(ie), 0x1p-23f, e0);
  static constexpr std::uint32_t kCoef[] = {0xBE2C7F30u, 0x3E2FCF2Au, 0xBE374E43u, 0x3E520BF4u,
                                            0xBE763C8Bu, 0x3E93BF99u, 0xBEB8AA49u, 0x3EF6384Au,
                                            0xBF38AA3Bu};
  float q = f32_from_bits(0x3DC6B27Fu);
  for (std::uint32_t c : kCoef) q = fma_ftz(q, f, f32_from_bits(c));
  float r = f * q;
  r = f * r;
  r = fma_ftz(f, f32_from_bits(0x3FB8AA3Bu), r);
  float res = e + r;
  if (b >= 0x7F800000u) res = fma_ftz(x, INFINITY, INFINITY);
  return res;
}

float tanhf_libdevice_abs(float x) {
  return std::fabs(x) < 0x1p-126f ? 0.0f : std::fabs(x);  // abs.ftz.f32
}

float tanhf_libdevice_poly(float x) {
  const float x2 = x * x;
  float p = fma_ftz(f32_from_bits(0x3C80F082u), x2, f32_from_bits(0xBD563CAEu));
  p = fma_ftz(p, x2, f32_from_bits(0x3E085941u));
  p = fma_ftz(p, x2, f32_from_bits(0xBEAAA9EDu));
  p = fma_ftz(p, x2, 0.0f);
  return fma_ftz(p, x, x);
}

float tanhf_libdevice_finish(float x, float a, float r) {
  float t = fma_ftz(r, -2.0f, 1.0f);
  if (a >= f32_from_bits(0x41102CB4u)) t = 1.0f;
  return f32_from_bits(f32_bits(t) | (f32_bits(x) & 0x80000000u));
}

float tanhf_libdevice(float x) {
  const float a = tanhf_libdevice_abs(x);
  if (!(a >= 0.6f)) return tanhf_libdevice_poly(x);  // setp.ltu: below 0.6, or NaN
  const float e = Ex2ApproxFtz::h100()(a * f32_from_bits(0x4038AA3Bu));
  const float r = RcpApproxFtz::h100()(e + 1.0f);
  return tanhf_libdevice_finish(x, a, r);
}

float div_full(float a, float b, const RcpApproxFtz& rcp) {
  // FSEL/FMUL range scaling then MUFU.RCP and an FMUL (see special.hpp).
  if (std::fabs(b) > 0x1p126f) {
    b = b * 0.25f;
    a = a * 0.25f;
  } else if (std::fabs(b) < 0x1p-126f) {
    b = b * 16777216.0f;
    a = a * 16777216.0f;
  }
  return rcp(b) * a;
}

namespace {

// FMUL/FADD without .ftz on the host: IEEE binary32, round to nearest even, subnormals kept (SSE
// arithmetic without FTZ/DAZ, no -ffast-math); NaN results canonical, as the GPU writes them.
std::uint32_t canonical(float r) { return std::isnan(r) ? 0x7FFFFFFFu : f32_bits(r); }
constexpr float kTwo24 = 16777216.0f;
constexpr float kMinNormal = 0x1p-126f, kTwo126 = 0x1p126f;

}  // namespace

std::uint32_t ex2_approx_bits(std::uint32_t x, const Ex2ApproxFtz& ex2) {
  const float xf = f32_from_bits(x);
  if (!(xf < -126.0f)) return ex2.bits(x);  // NaN and x >= -126: the MUFU alone
  const float r = ex2(xf * 0.5f);
  return canonical(r * r);
}

std::uint32_t rcp_approx_bits(std::uint32_t x, const RcpApproxFtz& rcp) {
  const float xf = f32_from_bits(x), a = std::fabs(xf);
  if (a >= kTwo126) return canonical(rcp(xf * 0.25f) * 0.25f);
  if (a < kMinNormal) return canonical(rcp(xf * kTwo24) * kTwo24);
  return rcp.bits(x);
}

std::uint32_t lg2_approx_bits(std::uint32_t x, const Lg2ApproxFtz& lg2) {
  const float xf = f32_from_bits(x);
  if (std::fabs(xf) < kMinNormal) return canonical(lg2(xf * kTwo24) - 24.0f);
  return lg2.bits(x);
}

namespace {

// The binary32 value of the exact sum p + c (p a double, c a float) rounded toward zero (away ==
// false) or away from zero (away == true) in magnitude; see fma_f32 in special.hpp for why the
// double TwoSum decides every case. A magnitude past FLT_MAX gives FLT_MAX toward zero, Inf away.
float round_sum_directed(double p, double c, bool (*away_for_sign)(bool negative)) {
  const double s = p + c;  // Knuth TwoSum: p + c = s + e exactly (no overflow: |p| <= 2^256)
  const double pv = s - c, cv = s - pv;
  const double e = (p - pv) + (c - cv);
  const bool neg = std::signbit(s);
  const bool away = away_for_sign(neg);
  const double a = std::fabs(s), ea = neg ? -e : e;  // the exact magnitude is a + ea
  const int k = std::ilogb(a);                       // a in [2^k, 2^(k+1)), a >= 2^-298
  const double ulp = std::ldexp(1.0, std::max(k - 23, -149));
  const double t = a / ulp, fl = std::floor(t);  // exact: scaling by a power of two
  double r;
  if (t != fl) {
    r = (away ? fl + 1 : fl) * ulp;  // strictly between two binary32 values, and so is a + ea
  } else if (ea > 0 && away) {
    r = a + ulp;
  } else if (ea < 0 && !away) {
    // The binary32 value below a: half an ulp lower below a normal power of two (above 2^-126).
    r = a - ((fl == 8388608.0 && k >= -125) ? ulp / 2 : ulp);
  } else {
    r = a;
  }
  const float m = r > double(FLT_MAX) ? (away ? INFINITY : FLT_MAX) : float(r);
  return neg ? -m : m;
}

}  // namespace

float fma_f32(float a, float b, float c, Round round, bool ftz) {
  if (round == Round::kNearestAway) {
    throw std::invalid_argument("fma_f32: PTX fma has no ties-away rounding");
  }
  if (ftz) {
    a = flush(a);
    b = flush(b);
    c = flush(c);
  }
  float r;
  if (round == Round::kNearestEven || !std::isfinite(a) || !std::isfinite(b) || !std::isfinite(c)) {
    r = std::fma(a, b, c);  // correctly rounded; with an Inf or NaN operand no rounding happens
  } else {
    const double p = double(a) * double(b);  // exact
    if (p + double(c) == 0.0) {
      // An exact zero (p and c cancel, or both are zeros), IEEE 754-2019 6.3: zeros of one sign
      // keep it; otherwise +0, or -0 when rounding down.
      if (std::signbit(p) == std::signbit(c)) {
        r = std::signbit(p) ? -0.0f : 0.0f;
      } else {
        r = round == Round::kDown ? -0.0f : 0.0f;
      }
    } else {
      switch (round) {
        case Round::kTowardZero:
          r = round_sum_directed(p, c, [](bool) { return false; });
          break;
        case Round::kDown:
          r = round_sum_directed(p, c, [](bool negative) { return negative; });
          break;
        case Round::kUp:
          r = round_sum_directed(p, c, [](bool negative) { return !negative; });
          break;
        default:
          r = std::fma(a, b, c);  // not reached: kNearestEven above, kNearestAway rejected
      }
    }
  }
  if (std::isnan(r)) return canonical_nan();
  if (!ftz) return r;
  // With an exponent range moved up by 100 (a·2^50, b·2^50, c·2^100: exact, see ftz_result) the
  // exact value is rounded in `round` at 24 bits as with an unbounded exponent.
  return ftz_result(r, [=] { return fma_f32(a * 0x1p50f, b * 0x1p50f, c * 0x1p100f, round, false); });
}

ExpfLibdeviceSteps expf_libdevice_reduce(float x, bool ftz) {
  const auto fma_rn = [ftz](float a, float b, float c) {
    return fma_f32(a, b, c, Round::kNearestEven, ftz);
  };
  // FFMA.SAT: the rounded sum clamped to [0, 1], NaN to +0.
  const float t0 = fma_rn(x, f32_from_bits(0x3BBB989Du), 0.5f);
  const float t = std::isnan(t0) ? 0.0f : std::fmin(std::fmax(t0, 0.0f), 1.0f);
  const float j = fma_f32(t, 252.0f, 12582913.0f, Round::kDown, ftz);
  const float n = j - 12583039.0f;  // exact: two integers below 2^24
  const float r = fma_rn(x, f32_from_bits(0x32A57060u), fma_rn(x, f32_from_bits(0x3FB8AA3Bu), -n));
  return {r, f32_from_bits(f32_bits(j) << 23)};  // 2^n
}

float expf_libdevice_finish(float ex2_r, float scale, bool ftz) {
  return f32_from_bits(canonical(ftz ? fmul_ftz(ex2_r, scale) : ex2_r * scale));
}

float expf_libdevice(float x, bool ftz) {
  const ExpfLibdeviceSteps s = expf_libdevice_reduce(x, ftz);
  return expf_libdevice_finish(Ex2ApproxFtz::h100()(s.r), s.scale, ftz);
}

float logf_libdevice(float x, bool ftz) {
  const auto fma_rn = [ftz](float a, float b, float c) {
    return fma_f32(a, b, c, Round::kNearestEven, ftz);
  };
  const auto mul = [ftz](float a, float b) { return ftz ? fmul_ftz(a, b) : a * b; };
  float xs = x, i = 0.0f;
  if (x < 0x1p-126f) {  // the .ftz compare sees a subnormal as a zero: the same outcome
    xs = mul(x, 8388608.0f);
    i = -23.0f;
  }
  const std::uint32_t b = f32_bits(xs);
  const std::int32_t ie = std::int32_t(b - 0x3F2AAAABu) & std::int32_t(0xFF800000u);
  const float m = f32_from_bits(b - std::uint32_t(ie));
  const float e = fma_rn(float(ie), 0x1p-23f, i);  // cvt.rn.f32.s32 is exact: ie = k · 2^23
  const float f = ftz ? flush(m - 1.0f) : m - 1.0f;
  static constexpr std::uint32_t kCoef[] = {0x3E1039F6u, 0xBDF8CDCCu, 0x3E0F2955u, 0xBE2AD8B9u,
                                            0x3E4CED0Bu, 0xBE7FFF22u, 0x3EAAAA78u, 0xBF000000u};
  float q = f32_from_bits(0xBE055027u);
  for (std::uint32_t c : kCoef) q = fma_rn(q, f, f32_from_bits(c));
  q = fma_rn(mul(f, q), f, f);
  float r = fma_rn(e, f32_from_bits(0x3F317218u), q);
  if (b >= 0x7F800000u) r = fma_rn(xs, INFINITY, INFINITY);  // +Inf, NaN and negatives
  if (xs == 0.0f) r = -INFINITY;
  return f32_from_bits(canonical(r));
}

float fast_expf(float x, bool ftz) {
  constexpr float kLog2e = 0x1.715476p+0f;  // 0x3FB8AA3B
  if (ftz) return f32_from_bits(canonical(Ex2ApproxFtz::h100()(fmul_ftz(x, kLog2e))));
  return f32_from_bits(ex2_approx_bits(f32_bits(x * kLog2e)));
}

float fast_logf(float x, bool ftz) {
  constexpr float kLn2 = 0x1.62e43p-1f;  // 0x3F317218
  if (ftz) return f32_from_bits(canonical(fmul_ftz(Lg2ApproxFtz::h100()(x), kLn2)));
  return f32_from_bits(canonical(f32_from_bits(lg2_approx_bits(f32_bits(x))) * kLn2));
}

}  // namespace attnsim
