// numerics/model_math: the reproducible model arithmetic of attnsim.modelmath and the e2e forwards.
//  - The projection kernels (AVX-512, AVX2) equal linear_f32_ref bit for bit on adversarial shapes
//    and values at every instruction set this CPU runs, and the reference equals a second
//    implementation written differently (a chain of std::fma: the products are exact, so FMA and
//    multiply-then-add agree).
//  - The elementary functions' error against Boost.Multiprecision (50 digits) stays within a few
//    FP64 ulps over their ranges, special values as IEEE says.
//  - Pinned bits: digests of every function over fixed inputs, recorded once; a machine, compiler
//    or change that computes one bit differently fails here (the contract: the same bits on every
//    machine).
#include <gtest/gtest.h>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "model_math_cases.hpp"
#include "numerics/isa.hpp"
#include "numerics/model_math.hpp"

namespace attnsim {
namespace {

using Big = boost::multiprecision::cpp_bin_float_50;
using namespace model_math_cases;

class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_isa(saved_); }

 private:
  Isa saved_;
};

TEST(ModelMath, LinearKernelsEqualTheReference) {
  IsaGuard guard;
  std::mt19937_64 rng(20261207);
  std::size_t compared = 0;
  for (Isa isa : available_isas()) {
    set_isa(isa);
    for (int i = 0; i < 120; ++i) {
      const std::size_t rows = 1 + rng() % 60, n = 1 + rng() % 70, k = 1 + rng() % 90;
      compared += check_case(make_case(rng, rows, n, k, rng() % 2, i % 3 == 0));
    }
  }
  EXPECT_GT(compared, std::size_t(100000));
}

TEST(ModelMath, LinearReferenceEqualsAnFmaChain) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const Case c = make_case(rng, 1 + rng() % 9, 1 + rng() % 40, 1 + rng() % 200, rng() % 2, false);
    const PackedLinear p = pack_linear(c.w.data(), c.n, c.k, c.bias ? c.b.data() : nullptr);
    std::vector<float> ref(c.rows * c.n);
    linear_f32_ref(c.x.data(), c.rows, c.k, p, 0, p.panels(), ref.data(), c.n);
    for (std::size_t t = 0; t < c.rows; ++t) {
      for (std::size_t o = 0; o < c.n; ++o) {
        double acc = 0.0;
        for (std::size_t j = 0; j < c.k; ++j) acc = std::fma(c.x[t * c.k + j], double(c.w[o * c.k + j]), acc);
        if (c.bias) acc = acc + double(c.b[o]);
        const float want = acc != acc ? std::numeric_limits<float>::quiet_NaN() : float(acc);
        std::uint32_t a, b;
        std::memcpy(&a, &ref[t * c.n + o], 4);
        std::memcpy(&b, &want, 4);
        ASSERT_EQ(a, b) << "row " << t << " output " << o << " k " << c.k;
      }
    }
  }
}

TEST(ModelMath, LinearPanelRangesAndRowSplitsDoNotChangeValues) {
  std::mt19937_64 rng(11);
  const Case c = make_case(rng, 37, 83, 64, true, false);
  const PackedLinear p = pack_linear(c.w.data(), c.n, c.k, c.b.data());
  std::vector<float> whole(c.rows * c.n), split(c.rows * c.n);
  linear_f32(c.x.data(), c.rows, c.k, p, 0, p.panels(), whole.data(), c.n);
  for (std::size_t t0 = 0; t0 < c.rows; t0 += 5) {
    const std::size_t r = std::min<std::size_t>(5, c.rows - t0);
    for (std::size_t q = 0; q < p.panels(); ++q) {
      linear_f32(c.x.data() + t0 * c.k, r, c.k, p, q, q + 1, split.data() + t0 * c.n, c.n);
    }
  }
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0);
}

// The largest error of f against F (50 digits) in FP64 ulps of the exact value, over xs.
template <class Fn, class BigFn>
double max_ulps(const std::vector<double>& xs, Fn f, BigFn F) {
  double worst = 0;
  for (double x : xs) {
    const Big exact = F(Big(x));
    const double got = f(x);
    const double e = exact.convert_to<double>();
    if (e == 0 || !std::isfinite(e)) continue;
    const double ulp = std::ldexp(1.0, std::ilogb(e) - 52);
    const double err = std::fabs((Big(got) - exact).convert_to<double>()) / std::max(ulp, 4.9e-324);
    worst = std::max(worst, err);
  }
  return worst;
}

std::vector<double> uniform(std::mt19937_64& rng, double lo, double hi, int n) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST(ModelMath, ElementaryFunctionsWithinAFewUlps) {
  using boost::multiprecision::cos;
  using boost::multiprecision::erf;
  using boost::multiprecision::exp;
  using boost::multiprecision::log;
  using boost::multiprecision::sin;
  std::mt19937_64 rng(3);
  const double e_exp = max_ulps(uniform(rng, -700, 700, 4000), det_exp, [](Big x) { return exp(x); });
  const double e_exps = max_ulps(uniform(rng, -1, 1, 4000), det_exp, [](Big x) { return exp(x); });
  std::vector<double> lx;
  for (int i = 0; i < 4000; ++i) lx.push_back(std::ldexp(1.0 + double(rng() % 1000000) / 1e6, int(rng() % 2000) - 1000));
  for (double x : uniform(rng, 0.5, 2.0, 2000)) lx.push_back(x);
  const double e_log = max_ulps(lx, det_log, [](Big x) { return log(x); });
  std::vector<double> tx = uniform(rng, -8000, 8000, 3000);
  for (int i = 1; i < 1000; ++i) tx.push_back(double(float(i * 1.5707963267948966)));  // near nπ/2
  const double e_sin = max_ulps(tx, det_sin, [](Big x) { return sin(x); });
  const double e_cos = max_ulps(tx, det_cos, [](Big x) { return cos(x); });
  const double e_erf = max_ulps(uniform(rng, -6, 6, 3000), det_erf, [](Big x) { return erf(x); });
  RecordProperty("ulps", std::to_string(e_exp) + " " + std::to_string(e_log) + " " +
                             std::to_string(e_sin) + " " + std::to_string(e_erf));
  EXPECT_LE(e_exp, 3.0);
  EXPECT_LE(e_exps, 2.0);
  EXPECT_LE(e_log, 2.0);
  // sin/cos near their zeros are measured relative to tiny values: the absolute error stays
  // ~1e-16 (the reduction keeps 99 bits of π/2), the relative bound is looser there.
  EXPECT_LE(e_sin, 64.0);
  EXPECT_LE(e_cos, 64.0);
  EXPECT_LE(e_erf, 24.0);  // the series' rounding and that of e^(−x²) add up
  std::printf("max ulps: exp %.2f (|x|<=1: %.2f) log %.2f sin %.2f cos %.2f erf %.2f\n", e_exp,
              e_exps, e_log, e_sin, e_cos, e_erf);
}

TEST(ModelMath, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  EXPECT_EQ(det_exp(0.0), 1.0);
  EXPECT_EQ(det_exp(inf), inf);
  EXPECT_EQ(det_exp(-inf), 0.0);
  EXPECT_EQ(det_exp(710.0), inf);
  EXPECT_EQ(det_exp(-746.0), 0.0);
  EXPECT_GT(det_exp(-740.0), 0.0);  // subnormal
  EXPECT_TRUE(std::isnan(det_exp(nan)));
  EXPECT_EQ(det_log(1.0), 0.0);
  EXPECT_EQ(det_log(0.0), -inf);
  EXPECT_EQ(det_log(-0.0), -inf);
  EXPECT_EQ(det_log(inf), inf);
  EXPECT_TRUE(std::isnan(det_log(-1.0)));
  EXPECT_NEAR(det_log(4.9406564584124654e-324), -744.44007192138126, 1e-12);
  EXPECT_EQ(det_sin(0.0), 0.0);
  EXPECT_TRUE(std::signbit(det_sin(-0.0)));
  EXPECT_EQ(det_cos(0.0), 1.0);
  EXPECT_TRUE(std::isnan(det_sin(inf)));
  EXPECT_THROW(det_sin(2e6), std::domain_error);
  EXPECT_EQ(det_erf(0.0), 0.0);
  EXPECT_EQ(det_erf(7.0), 1.0);
  EXPECT_EQ(det_erf(-inf), -1.0);
  EXPECT_LE(det_erf(5.9), 1.0);
}

TEST(ModelMath, RowOperations) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f}, b[4] = {0, 1, 0, -1};
  float y[4];
  rms_norm_row(x, w, 4, 0.0, y);
  const double r = std::sqrt(30.0 / 4);
  EXPECT_EQ(y[0], float(1 / r));
  EXPECT_EQ(y[2], float(2 * (3 / r)));
  layer_norm_row(x, w, b, 4, 0.0, y);
  EXPECT_EQ(y[0], float(-1.5 / std::sqrt(1.25)));
  EXPECT_EQ(y[3], float(1.5 / std::sqrt(1.25) * 0.5 - 1));
  const float g[3] = {0.0f, 30.0f, -800.0f}, u[3] = {5.0f, 2.0f, 3.0f};
  silu_mul(g, u, 3, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 60.0f);  // 30/(1 + e^-30) rounds to 30 in FP32
  EXPECT_EQ(y[2], -0.0f);
  const float gx[2] = {0.0f, 10.0f};
  gelu_erf(gx, 2, y);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 10.0f);
}

TEST(ModelMath, RopeTablesAgreeWithAHighPrecisionTable) {
  std::vector<float> c(64 * 8192), s(64 * 8192);
  rope_tables(8192, 0, 64, 100000.0, c.data(), s.data());
  int differ = 0;
  for (std::size_t t = 0; t < 8192; t += 37) {
    for (std::size_t i = 0; i < 32; ++i) {
      const float inv = float(boost::multiprecision::pow(Big(100000), -Big(2 * i) / 64).convert_to<double>());
      const float ang = float(t) * inv;
      const float ec = boost::multiprecision::cos(Big(ang)).convert_to<float>();
      differ += c[t * 64 + i] != ec;
      ASSERT_EQ(c[t * 64 + i], c[t * 64 + 32 + i]);
      ASSERT_NEAR(s[t * 64 + i], boost::multiprecision::sin(Big(ang)).convert_to<double>(), 1e-7);
    }
  }
  EXPECT_LE(differ, 2);  // only where the FP64 value lies within a few ulps of an FP32 tie
  EXPECT_THROW(rope_tables(1, 0, 63, 1e4, c.data(), s.data()), std::invalid_argument);
}

TEST(ModelMath, LogSoftmaxAndKl) {
  const float z[4] = {1.0f, 2.0f, 3.0f, -1e30f};
  double l[4];
  log_softmax_row(z, 4, l);
  const double ls = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  EXPECT_NEAR(l[2], -ls, 1e-15);
  EXPECT_NEAR(l[0], -2 - ls, 1e-15);
  EXPECT_LT(l[3], -1e29);
  EXPECT_EQ(kl_row(l, l, 4), 0.0);
  const float bad[2] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  log_softmax_row(bad, 2, l);
  EXPECT_TRUE(std::isnan(l[0]));
}

// A 64-bit FNV-1a over the bits of f at n fixed inputs.
template <class F>
std::uint64_t digest(F f, double lo, double hi, int n) {
  std::uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    const double x = lo + (hi - lo) * double(i) / double(n - 1);
    const double y = f(x);
    std::uint64_t b;
    std::memcpy(&b, &y, 8);
    for (int j = 0; j < 8; ++j) h = (h ^ ((b >> (8 * j)) & 0xFF)) * 1099511628211ull;
  }
  return h;
}

// Recorded on an AMD EPYC (Zen 4, AVX-512) with g++ 12 at the commit that added this file; the
// same on every machine, instruction set and compiler that follows IEEE 754 (the functions use its
// basic operations only). A change here is a change of every e2e table: regenerate them.
TEST(ModelMath, PinnedBits) {
  EXPECT_EQ(digest(det_exp, -745.0, 709.0, 200001), 16760016304935811728ull) << "det_exp";
  EXPECT_EQ(digest(det_log, 1e-300, 1e300, 200001), 5407209959377262632ull) << "det_log";
  EXPECT_EQ(digest(det_sin, -1e5, 1e5, 200001), 6618446605150261327ull) << "det_sin";
  EXPECT_EQ(digest(det_cos, -1e5, 1e5, 200001), 7176087383500890006ull) << "det_cos";
  EXPECT_EQ(digest(det_erf, -7.0, 7.0, 200001), 16126663834651731359ull) << "det_erf";
}

}  // namespace
}  // namespace attnsim
