// SAS (TurboAttention §4, Algorithm 3). Two formulations: sas_exp works in the format's own
// arithmetic (_Float16 or float, a table for every fp16 argument), sas_exp_ref in FP64 with an
// explicit rounding to the format after each operation (formats/ encoders). They are compared on
// every fp16 argument and on millions of FP32 ones (tests/sim/turbo/sas_test.cpp).
#include "sim/turbo/sas.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <boost/math/quadrature/gauss.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"

namespace attnsim {

namespace {

// The magnitude n_r and the table entry that reads 0: n_r + 1 (intended: the sentinel past the
// threshold) or, literally, the entry "T[n_r + 1]" with n_r = −6, i.e. |−5| = n_r − 1.
int zero_entry(const SasRule& r) {
  return r.threshold == SasThreshold::kIntended ? r.n_r + 1 : r.n_r - 1;
}

// ---- reference: FP64 arithmetic, one explicit rounding per operation -----------------------
double round_fmt(double x, SasFormat f) {
  if (f == SasFormat::kFp32) return double(float(x));  // one RNE rounding of an exact value
  return decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x, kCudaRn));
}

}  // namespace

float sas_exp_ref(float x, const SasRule& r) {
  const double h = round_fmt(double(x), r.fmt);  // the argument in the SAS format
  double t = -h;
  if (std::isnan(t)) return 0.0f;
  if (t > double(r.n_r)) {
    if (r.threshold == SasThreshold::kIntended) return 0.0f;  // T[n_r + 1] = 0
    t = double(r.n_r - 1);  // Alg. 3 step 2: X[X < n_r] = n_r + 1 (n_r = −6)
  }
  const double n = t < 0.0 ? 0.0 : std::floor(t);
  const double f = t - n;  // exact: t and n share the format's exponent range
  if (int(n) == zero_entry(r)) return 0.0f;
  double p = round_fmt(r.poly[0], r.fmt);
  for (int k = 1; k < 4; ++k) {
    const double c = round_fmt(r.poly[std::size_t(k)], r.fmt);
    // p·f + c: one rounding (fma) or two. The FP64 product of two fp16/fp32 values is exact and
    // the FP64 sum of the exact product and c rounds once more than the fused form: exact for
    // fp16 (22 + 11 bits < 53) but not for fp32, so the fused fp32 form uses std::fma.
    if (r.fma) {
      p = r.fmt == SasFormat::kFp32 ? double(std::fma(float(p), float(f), float(c)))
                                    : round_fmt(p * f + c, r.fmt);
    } else {
      p = round_fmt(round_fmt(p * f, r.fmt) + c, r.fmt);
    }
  }
  const double lut = round_fmt(std::exp(-n), r.fmt);
  return float(round_fmt(lut * p, r.fmt));
}

namespace {

// ---- fast path: the format's own arithmetic ------------------------------------------------
template <class F>
float sas_native(float x, const SasRule& r) {
  const F h = F(x);
  F t = -h;
  if (!(t <= F(float(r.n_r)))) {
    if (t != t || r.threshold == SasThreshold::kIntended) return 0.0f;
    t = F(float(r.n_r - 1));
  }
  const int n = t < F(0.0f) ? 0 : int(float(t));  // t >= 0: truncation is floor
  const F f = F(t - F(float(n)));
  if (n == zero_entry(r)) return 0.0f;
  F p = F(float(r.poly[0]));
  for (int k = 1; k < 4; ++k) {
    const F c = F(float(r.poly[std::size_t(k)]));
    if (r.fma) {
      // A fused multiply-add of format values: fp16 computed exactly in FP64 and rounded once;
      // float uses fmaf.
      if constexpr (std::is_same_v<F, float>) {
        p = std::fma(p, f, c);
      } else {
        p = F(double(float(p)) * double(float(f)) + double(float(c)));  // exact in FP64, one rounding
      }
    } else {
      p = F(F(p * f) + c);
    }
  }
  // e^{-n} correctly rounded to the format: float(exp(double)) rounds once; fp16 via float
  // (double rounding float -> fp16 is harmless for these 7 values: none lies near an fp16 tie).
  const F lut = F(float(std::exp(-double(n))));
  return float(F(lut * p));
}

// The native half type: the compiler's _Float16 (GCC on x86-64; each operation computed and
// rounded once to fp16), or, where the compiler has none (clang 14 on x86-64, which builds the
// fuzz target; GCC 12 on AArch64, whose C++ front end lacks _Float16 before GCC 13), an emulation
// that rounds each result, exact in FP64, once with formats/ (the reference's own rounding). The
// two agree: +, −, × of fp16 values rounded through FP32 (24 >= 2·11 + 2 bits) or exactly are
// rounded once.
#if defined(__FLT16_MANT_DIG__) && \
    !(defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13)
using Half = _Float16;
float half_bits_to_float(std::uint16_t b) {
  Half h;
  std::memcpy(&h, &b, 2);
  return float(h);
}
std::uint16_t float_to_half_bits(float x) {
  const Half h = Half(x);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
#else
float rn16(double x) {
  return decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x, kCudaRn));
}
struct Half {
  float v = 0;
  Half() = default;
  explicit Half(float x) : v(rn16(x)) {}
  explicit Half(double x) : v(rn16(x)) {}
  explicit operator float() const { return v; }
  Half operator-() const { return Half(-v); }
  friend Half operator*(Half a, Half b) { return Half(double(a.v) * double(b.v)); }
  friend Half operator+(Half a, Half b) { return Half(double(a.v) + double(b.v)); }
  friend Half operator-(Half a, Half b) { return Half(double(a.v) - double(b.v)); }
  friend bool operator<=(Half a, Half b) { return a.v <= b.v; }
  friend bool operator<(Half a, Half b) { return a.v < b.v; }
  friend bool operator!=(Half a, Half b) { return a.v != b.v; }
};
float half_bits_to_float(std::uint16_t b) { return decode_float_bits(Encoding::kFp16, b); }
std::uint16_t float_to_half_bits(float x) {
  return std::uint16_t(encode_float_bits(Encoding::kFp16, x, kCudaRn));
}
#endif

struct Fp16Table {
  std::vector<float> y;  // indexed by the argument's fp16 bits
};

const Fp16Table& fp16_table(const SasRule& r) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Fp16Table>> tables;
  std::ostringstream key;
  key.precision(17);
  key << r.fma << ' ' << r.n_r << ' ' << int(r.threshold);
  for (double c : r.poly) key << ' ' << c;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = tables[key.str()];
  if (!slot) {
    slot = std::make_unique<Fp16Table>();
    slot->y.resize(65536);
    for (std::uint32_t b = 0; b < 65536; ++b) {
      slot->y[b] = sas_native<Half>(half_bits_to_float(std::uint16_t(b)), r);
    }
  }
  return *slot;
}

}  // namespace

float sas_exp(float x, const SasRule& r) {
  if (r.fmt == SasFormat::kFp32) return sas_native<float>(x, r);
  // The table caches one rule; look it up once per rule object (the pipeline passes the same one).
  thread_local const SasRule* last = nullptr;
  thread_local SasRule last_copy;
  thread_local const Fp16Table* table = nullptr;
  const auto same = [](const SasRule& a, const SasRule& b) {
    return a.fmt == b.fmt && a.fma == b.fma && a.n_r == b.n_r && a.threshold == b.threshold &&
           a.poly == b.poly;
  };
  if (last != &r || !same(last_copy, r)) {
    table = &fp16_table(r);
    last = &r;
    last_copy = r;
  }
  return table->y[float_to_half_bits(x)];
}

namespace {

// sas_exp_array's fp16 path on a rule's table.
void sas_fp16_rows(const float* x, std::size_t n, float* out, const Fp16Table& t) {
  // The fp16 arguments by the array conversion (formats' RNE with overflow to Inf, as the
  // compiler's _Float16 conversion of sas_exp: equal on every non-NaN input; every NaN reads the
  // table's 0), then the table, in chunks that stay in the L1 cache.
  const float* y = t.y.data();
  std::uint16_t h[256];
  for (std::size_t i0 = 0; i0 < n; i0 += 256) {
    const std::size_t m = std::min<std::size_t>(256, n - i0);
    encode_array(Encoding::kFp16, x + i0, m, h, kCudaRn);
    for (std::size_t i = 0; i < m; ++i) out[i0 + i] = y[h[i]];
  }
}

}  // namespace

void sas_exp_array(const float* x, std::size_t n, float* out, const SasRule& r) {
  if (r.fmt == SasFormat::kFp32) {
    for (std::size_t i = 0; i < n; ++i) out[i] = sas_native<float>(x[i], r);
    return;
  }
  sas_fp16_rows(x, n, out, fp16_table(r));
}

namespace {

class SasExpHook final : public ExpHook {
 public:
  explicit SasExpHook(const SasRule& r) : rule_(r) {}
  float eval(float x) const override { return sas_exp(x, rule_); }
  void eval_array(const float* x, std::size_t n, float* out) const override {
    if (rule_.fmt == SasFormat::kFp32) return sas_exp_array(x, n, out, rule_);
    // The rule's table looked up once per hook (fp16_table builds a key string).
    std::call_once(table_once_, [this] { table_ = &fp16_table(rule_); });
    sas_fp16_rows(x, n, out, *table_);
  }
  std::string name() const override { return "sas"; }
  OptionList options() const override {
    if (rule_.poly != SasRule{}.poly)
      throw std::logic_error("sas: a refit cubic has no method-string spelling");
    return {{"sas_fmt", rule_.fmt == SasFormat::kFp16 ? "fp16" : "fp32"},
            {"sas_fma", rule_.fma ? "on" : "off"},
            {"n_r", "-" + std::to_string(rule_.n_r)},
            {"sas_threshold", rule_.threshold == SasThreshold::kIntended ? "intended" : "literal"}};
  }

 private:
  SasRule rule_;
  mutable std::once_flag table_once_;
  mutable const Fp16Table* table_ = nullptr;
};

}  // namespace

HookRef<ExpHook> sas_hook(const SasRule& r) { return {std::make_shared<SasExpHook>(r)}; }

ExpHookSpec sas_hook_spec() {
  ExpHookSpec h;
  h.name = "sas";
  h.help = "TurboAttention's SAS: LUT(integer part) x cubic(fraction), 0 below -n_r (sim/turbo)";
  h.base = ExpKind::kExp;
  std::vector<std::string> nr;
  for (int k = 1; k <= 16; ++k) nr.push_back("-" + std::to_string(k));
  auto key = [](const char* k, std::vector<std::string> choices, const char* def, const char* help) {
    return hook_key(k, "exp", std::move(choices), def, help);
  };
  h.keys = {key("sas_fmt", {"fp16", "fp32"}, "fp16", "exp=sas: the format SAS evaluates in"),
            key("sas_fma", {"on", "off"}, "off",
                "exp=sas: each Horner step fused (HFMA2/FFMA) instead of multiply then add"),
            key("n_r", nr, "-6", "exp=sas: sparsity threshold (exp of arguments below it is 0)"),
            key("sas_threshold", {"intended", "literal"}, "intended",
                "exp=sas: Algorithm 3's sparsity step as intended or as printed")};
  h.make = [](const OptionMap& v) {
    SasRule r;
    r.fmt = v.at("sas_fmt") == "fp32" ? SasFormat::kFp32 : SasFormat::kFp16;
    r.fma = v.at("sas_fma") == "on";
    r.n_r = -std::stoi(v.at("n_r"));
    r.threshold = v.at("sas_threshold") == "literal" ? SasThreshold::kLiteral : SasThreshold::kIntended;
    return sas_hook(r);
  };
  return h;
}

std::array<double, 4> sas_poly_fit(int points) {
  // Columns x^3, x^2, x, 1 (highest degree first).
  Eigen::Matrix4d a = Eigen::Matrix4d::Zero();
  Eigen::Vector4d b = Eigen::Vector4d::Zero();
  if (points == 0) {
    // Normal equations of the continuous problem: a_ij = ∫₀¹ x^(6−i−j) dx, b_i = ∫₀¹ x^(3−i) e^-x dx
    // (Gauss–Legendre, 64 nodes: exact to rounding for these smooth integrands).
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) a(i, j) = 1.0 / double(7 - i - j);
      b(i) = boost::math::quadrature::gauss<double, 64>::integrate(
          [i](double x) { return std::pow(x, 3 - i) * std::exp(-x); }, 0.0, 1.0);
    }
    const Eigen::Vector4d c = a.fullPivLu().solve(b);
    return {c(0), c(1), c(2), c(3)};
  }
  if (points < 4) throw std::invalid_argument("sas_poly_fit: need at least 4 points");
  Eigen::MatrixXd v(points, 4);
  Eigen::VectorXd y(points);
  for (int k = 0; k < points; ++k) {
    const double x = double(k) / double(points - 1);
    v(k, 0) = x * x * x;
    v(k, 1) = x * x;
    v(k, 2) = x;
    v(k, 3) = 1.0;
    y(k) = std::exp(-x);
  }
  const Eigen::Vector4d c = v.colPivHouseholderQr().solve(y);
  return {c(0), c(1), c(2), c(3)};
}

SasErrorStats sas_error(const SasRule& r, double lo, long long samples) {
  SasErrorStats s;
  double sum = 0;
  auto visit = [&](float x) {
    const double e = std::exp(double(x));
    const double rel = std::fabs(double(sas_exp(x, r)) - e) / e;
    sum += rel;
    ++s.count;
    if (rel > s.max_rel) {
      s.max_rel = rel;
      s.argmax = x;
    }
  };
  if (r.fmt == SasFormat::kFp16) {
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float x = half_bits_to_float(std::uint16_t(b));
      if (x != x || x > 0.0f || double(x) < lo) continue;
      visit(x);
    }
  } else {
    for (long long k = 0; k < samples; ++k) visit(float(lo * double(k) / double(samples - 1)));
  }
  s.mean_rel = s.count ? sum / double(s.count) : 0.0;
  return s;
}

std::string describe(const SasRule& r) {
  std::ostringstream o;
  o << "sas(" << (r.fmt == SasFormat::kFp16 ? "fp16" : "fp32") << ", "
    << (r.fma ? "fma" : "mul+add") << ", n_r=" << r.n_r << ", "
    << (r.threshold == SasThreshold::kIntended ? "intended" : "literal") << ")";
  return o.str();
}

}  // namespace attnsim
