// The AMLA presets (sim/amla) against a plain-loop reference written from Algorithm 1/2 and the
// CANN kernel directly (not through the pipeline or amla_step), the failure modes of the integer
// add (issue 13), and the direction of the compensation.
#include "sim/amla/amla.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/exact_sum.hpp"
#include "numerics/fp32_bits.hpp"
#include "numerics/metrics.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {
namespace {

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float to16(float x, Encoding e, Round r) {
  return decode_float_bits(e, encode_float_bits(e, x, Policy{r, Overflow::kInf, NanEncoding::kCuda}));
}

// Algorithm 1 / Algorithm 2 / CANN for one head, natural exp correctly rounded, exact or
// sequential FP32 products: the reference of record for the Ascend presets.
std::vector<float> amla_ref(const AttentionInput& in, AmlaVariant var, bool exact_acc, int block,
                            bool out_fp32) {
  const AttentionShape& s = in.shape;
  const int d = s.head_dim, dv = s.head_dim_v;
  const float sm = float(in.scale());
  const bool cann = var == AmlaVariant::kCann;
  const Round pr = cann ? Round::kNearestAway : Round::kNearestEven;
  auto rd = [](float x) { return to16(x, Encoding::kBf16, Round::kNearestEven); };
  auto dot = [&](const float* a, const float* b, int n, int sa, int sb) {
    if (exact_acc) {
      ExactSum e;
      for (int k = 0; k < n; ++k) e.add(double(a[k * sa]) * double(b[k * sb]));
      return e.round_f32();
    }
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc = acc + a[k * sa] * b[k * sb];
    return acc;
  };
  std::vector<float> q(in.q.size()), k(in.k.size()), v(in.v.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = rd(in.q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = rd(in.k[i]);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = rd(in.v[i]);
  const float ln2 = float(0.6931471805599453094172), rln2 = 1.0f / ln2;
  std::vector<float> out(std::size_t(s.len_q) * dv);
  for (int r = 0; r < s.len_q; ++r) {
    std::vector<float> o(static_cast<std::size_t>(dv), 0.0f), pj(static_cast<std::size_t>(block));
    float m = -INFINITY, l = 0.0f, n_prev = 0.0f, c_prev = 1.0f, s16 = 1.0f;
    const int nb = (s.len_kv + block - 1) / block;
    for (int b = 0; b < nb; ++b) {
      const int j0 = b * block, cols = std::min(block, s.len_kv - j0);
      std::vector<float> x(static_cast<std::size_t>(cols));
      float bm = -INFINITY;
      for (int j = 0; j < cols; ++j) {
        x[j] = dot(&q[std::size_t(r) * d], &k[std::size_t(j0 + j) * d], d, 1, 1) * sm;
        bm = std::max(bm, x[j]);
      }
      const float m_new = std::max(m, bm);
      const float mup = float(std::exp(double(m - m_new)));
      l = l * mup;
      for (int j = 0; j < cols; ++j) {
        pj[j] = float(std::exp(double(x[j] - m_new)));
        l = l + pj[j];
      }
      float mul = 1.0f;
      std::int32_t nint = 0;
      if (var != AmlaVariant::kBase) {
        float n, s32;
        if (cann) {
          n = std::round(m_new * -rln2);
          s32 = float(std::exp(double(((m_new * rln2) + n) * ln2)));
        } else {
          const float t = m_new / ln2;
          n = std::nearbyint(-t);
          s32 = float(std::exp(double(ln2 * (n + t))));
        }
        s16 = to16(s32, Encoding::kBf16, pr);
        // CANN: cof = S32/S16 and cof(i-1)/cof(i); the paper preset: Appendix A's c = S16/S32.
        const float c = cann ? s32 / s16 : s16 / s32;
        const float eps = cann ? ((c_prev / c) - 1.0f) * 1.5f : 1.5f * (c / c_prev - 1.0f);
        const float dn = b == 0 ? 0.0f : std::max(n - n_prev, -30.0f);
        nint = cann ? std::int32_t(std::round((dn + (eps + 1e-6f)) * 8388608.0f))
                    : std::int32_t(std::nearbyint(((dn + eps) + 1e-6f) * 8388608.0f));
        n_prev = n;
        c_prev = c;
        mul = s16;
      }
      m = m_new;
      std::vector<float> p(static_cast<std::size_t>(cols));
      for (int j = 0; j < cols; ++j)
        p[j] = to16(var == AmlaVariant::kBase ? pj[j] : pj[j] * mul, Encoding::kBf16, pr);
      for (int c = 0; c < dv; ++c) {
        const float chunk = dot(p.data(), &v[std::size_t(j0) * dv + c], cols, 1, dv);
        float oc = o[c];
        if (var == AmlaVariant::kBase) {
          oc = oc * mup;
        } else if (b > 0) {
          oc = as_fp32(std::int32_t(std::uint32_t(as_int32(oc)) + std::uint32_t(nint)));
        }
        o[c] = oc + chunk;
      }
    }
    const float den = var == AmlaVariant::kBase ? l : l * s16;
    for (int c = 0; c < dv; ++c) {
      float x = o[c];
      if (cann && !(std::fabs(x) <= 1e10f)) x = 0.0f;
      x = x / den;
      out[std::size_t(r) * dv + c] = out_fp32 ? x : rd(x);
    }
  }
  return out;
}

// One head: Q [G x d], K [S x d], V [S x dv]; scores drift upward along the keys so that the row
// max moves in many blocks (the integer add and its compensation run every block).
AttentionInput make_input(int g, int s, int d, int dv, double sigma, double drift, unsigned seed) {
  AttentionInput in;
  in.shape = AttentionShape{1, g, 1, 1, s, d, dv};
  in.shape.len_q = g;  // one query head, G query rows (MLA decode folded into rows)
  in.shape.heads_q = 1;
  in.dtype = "float32";
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, sigma);
  in.q.resize(std::size_t(g) * d);
  in.k.resize(std::size_t(s) * d);
  in.v.resize(std::size_t(s) * dv);
  for (float& x : in.q) x = float(nd(rng));
  for (int j = 0; j < s; ++j)
    for (int c = 0; c < d; ++c)
      in.k[std::size_t(j) * d + c] = float(nd(rng) + (c == 0 ? drift * j / s : 0.0));
  for (float& x : in.v) x = float(nd(rng));
  return in;
}

AmlaOptions opts(AmlaVariant v, AmlaAcc acc, int block) {
  AmlaOptions o;
  o.variant = v;
  o.qk_sum = o.pv_sum = acc;
  o.block = block;
  o.block_q = 16;
  return o;
}

TEST(Amla, PresetsMatchThePlainLoopReference) {
  int compared = 0;
  for (AmlaVariant var : {AmlaVariant::kBase, AmlaVariant::kPaper, AmlaVariant::kCann}) {
    for (bool exact : {true, false}) {
      for (unsigned seed = 1; seed <= 4; ++seed) {
        // 40 rows, 700 keys (blocks of 64, the last one ragged), sigma and drift per seed.
        AttentionInput in = make_input(40, 700, 48, 32, 0.5 * seed, 6.0 * seed, seed);
        AmlaOptions o = opts(var, exact ? AmlaAcc::kExact : AmlaAcc::kFp32Seq, 64);
        o.out = Encoding::kFp32;
        const PipelineResult r = run_pipeline(in, amla_pipeline(o));
        const std::vector<float> ref = amla_ref(in, var, exact, 64, true);
        ASSERT_EQ(r.o.size(), ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
          ASSERT_EQ(bits(float(r.o[i])), bits(ref[i]))
              << amla_variant_name(var) << " exact=" << exact << " seed " << seed << " element " << i;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 2 * 4 * 40 * 32);
}

TEST(Amla, CannIntegerOfHandPickedSteps) {
  // dn = 0, eps = 0: the +1e-6 bias alone, 1e-6f · 2^23 = 8.3886... -> 8 (8 ulps added to O).
  EXPECT_EQ(amla_cann_n_int(0.0f, 0.0f), 8);
  // dn = -1: -1 + 1e-6f rounds to -(1 - 17·2^-24); times 2^23 = -8388599.5, a tie: away -> -8388600.
  EXPECT_EQ(amla_cann_n_int(-1.0f, 0.0f), -8388600);
  // dn = -40 clamps to -30; -30 + 1e-6f rounds to -30 + 2^-19 (1e-6 is 0.52 ulp of 30):
  // (-30 + 2^-19)·2^23 = -251658240 + 16.
  EXPECT_EQ(amla_cann_n_int(-40.0f, 0.0f), -251658224);
  EXPECT_EQ(amla_cann_n_int(-30.0f, 0.0f), -251658224);
}

// Scores chosen by hand: Q = e_0, K_j = s_j·e_0, sm_scale 1, so x_j = s_j exactly.
AttentionInput scored(const std::vector<float>& s, const std::vector<std::vector<float>>& v) {
  AttentionInput in;
  const int n = int(s.size()), d = 16, dv = int(v[0].size());
  in.shape = AttentionShape{1, 1, 1, 1, n, d, dv};
  in.sm_scale = 1.0;
  in.q.assign(std::size_t(d), 0.0f);
  in.q[0] = 1.0f;
  in.k.assign(std::size_t(n) * d, 0.0f);
  for (int j = 0; j < n; ++j) in.k[std::size_t(j) * d] = s[j];
  for (const auto& row : v) in.v.insert(in.v.end(), row.begin(), row.end());
  return in;
}

TEST(Amla, NaiveEq3OverflowsWhereAmlaStaysExact) {
  // Eq. 3 keeps Ô = exp(m)·O: with m > 88.72, exp(m) is beyond FP32 (3.4e38) and Ô is Inf.
  EXPECT_TRUE(std::isinf(std::exp(89.0f)));
  std::vector<float> s(32);
  for (int j = 0; j < 32; ++j) s[j] = 80.0f + float(j);  // m reaches 111 in the second block
  std::vector<std::vector<float>> v(32, std::vector<float>(4));
  for (int j = 0; j < 32; ++j)
    for (int c = 0; c < 4; ++c) v[j][c] = float((j + c) % 5) - 2.0f;
  const AttentionInput in = scored(s, v);
  // The naive in-memory form: Ô += exp(x_j)·v_j in FP32.
  float naive = 0.0f, l_naive = 0.0f;
  for (int j = 0; j < 32; ++j) {
    naive += std::exp(s[j]) * v[j][0];
    l_naive += std::exp(s[j]);
  }
  EXPECT_FALSE(std::isfinite(naive / l_naive));
  const std::vector<double> g = golden_attention_ref(in);
  for (AmlaVariant var : {AmlaVariant::kBase, AmlaVariant::kPaper, AmlaVariant::kCann}) {
    AmlaOptions o = opts(var, AmlaAcc::kExact, 16);
    o.out = Encoding::kFp32;
    const PipelineResult r = run_pipeline(in, amla_pipeline(o));
    for (int c = 0; c < 4; ++c) {
      EXPECT_TRUE(std::isfinite(r.o[std::size_t(c)]));
      EXPECT_NEAR(r.o[std::size_t(c)], g[std::size_t(c)], 1e-2) << amla_variant_name(var);
    }
  }
}

TEST(Amla, ZeroOutputElementBecomesGarbageThatOnlyCannGuards) {
  // Column 1 of V is zero, so O[1] is exactly 0 when the max moves by 2^-1 ... 2^-k: the integer
  // add turns 0 into 0xFF8xxxxx (NaN or -Inf) - Lemma 3.1 needs 0 < E. CANN's |O| <= 1e10 select
  // maps it to 0 (NaN fails the comparison); Algorithm 2 as written divides the garbage; Base
  // multiplies 0 by alpha and stays exact.
  std::vector<float> s(32, 0.0f);
  for (int j = 16; j < 32; ++j) s[j] = 3.0f;  // second block: m moves by 3, n by -4
  std::vector<std::vector<float>> v(32, std::vector<float>{1.0f, 0.0f, 0.5f});
  const AttentionInput in = scored(s, v);
  auto run = [&](AmlaVariant var) {
    AmlaOptions o = opts(var, AmlaAcc::kExact, 16);
    o.out = Encoding::kFp32;
    return run_pipeline(in, amla_pipeline(o)).o;
  };
  const std::vector<double> base = run(AmlaVariant::kBase), paper = run(AmlaVariant::kPaper),
                            cann = run(AmlaVariant::kCann);
  EXPECT_EQ(base[1], 0.0);
  EXPECT_EQ(cann[1], 0.0);
  EXPECT_FALSE(std::fabs(paper[1]) < 1e30);  // -2^125-class garbage divided by l·S16
  // The bit pattern: 0 + N_int with N_int ≈ -4·2^23 sets the sign bit and the exponent field 252:
  // about -4.25e37. With a step of -1 the same add gives 0xFF800000 + small: -Inf or NaN.
  const float garbage = as_fp32(std::int32_t(0u + std::uint32_t(amla_cann_n_int(-4.0f, 0.0f))));
  EXPECT_LT(garbage, -1e37f);
  const float garbage1 = as_fp32(std::int32_t(0u + std::uint32_t(amla_cann_n_int(-1.0f, 0.0f))));
  EXPECT_FALSE(std::isfinite(garbage1));
  EXPECT_FALSE(amla_add_valid(0.0f, -4));
  // Columns 0 and 2 stay accurate in every variant.
  for (const auto* r : {&base, &paper, &cann}) {
    EXPECT_NEAR((*r)[0], 1.0, 1e-2);
    EXPECT_NEAR((*r)[2], 0.5, 1e-2);
  }
}

TEST(Amla, MaxJumpBeyondThirtyPowersOfTwoIsClamped) {
  // Block 1: scores 0; block 2: one key at 40, so n drops by 58 (40/ln 2 = 57.7). The clamp makes
  // the integer add a multiplication by ~2^-30 instead of 2^-58: the old block keeps a weight of
  // 2^-28 relative to what it should have, far below BF16's resolution - and without the clamp,
  // an O element below 2^-70 would have its exponent field driven below 1 (Lemma 3.1's
  // -E < n): the addition would borrow from the sign bit.
  std::vector<float> s(32, 0.0f);
  s[20] = 40.0f;
  std::vector<std::vector<float>> v(32, std::vector<float>{8192.0f, 1e-30f});
  v[20] = {2.0f, 1e-30f};
  const AttentionInput in = scored(s, v);
  EXPECT_FALSE(amla_add_valid(16.0f * 1e-30f, -58));  // |O| ~ 1.6e-29: E = 30, 30 - 58 < 1
  EXPECT_TRUE(amla_add_valid(16.0f * 1e-30f, -29));
  const std::vector<double> g = golden_attention_ref(in);
  for (AmlaVariant var : {AmlaVariant::kPaper, AmlaVariant::kCann}) {
    AmlaOptions o = opts(var, AmlaAcc::kExact, 16);
    o.out = Encoding::kFp32;
    const PipelineResult r = run_pipeline(in, amla_pipeline(o));
    // O[0] ≈ 2: the stale block (16 keys of value 8192 and weight e^-40 ≈ 4e-18 each in truth,
    // 5e-13 in all) enters with about 16·8192·2^-30 ≈ 1.2e-4 instead: a trace in FP32 far above
    // the true contribution, below BF16's resolution at 2 (2^-7).
    EXPECT_NEAR(r.o[0], g[0], 1e-3) << amla_variant_name(var);
    EXPECT_GT(std::fabs(r.o[0] - g[0]), 1e-5) << "the clamp should leave a trace in FP32";
    EXPECT_TRUE(std::isfinite(r.o[1]));
  }
  // Base multiplies by exp(-40): the stale block vanishes as it should.
  AmlaOptions o = opts(AmlaVariant::kBase, AmlaAcc::kExact, 16);
  o.out = Encoding::kFp32;
  EXPECT_NEAR(run_pipeline(in, amla_pipeline(o)).o[0], g[0], 1e-6);
}

TEST(Amla, CompensationDirectionOfAppendixAReducesTheErrorOfAlgorithm2AsPrinted) {
  // Rows whose max moves in every block (drift), FP32 output so the O error is visible: the
  // Appendix-A direction (and CANN's cof(i-1)/cof(i), the same direction) must beat no
  // compensation, and line 11 as printed (the reciprocal ratio) must be worse than none.
  double e_none = 0, e_app = 0, e_alg2 = 0, e_cann = 0;
  for (unsigned seed = 1; seed <= 6; ++seed) {
    const AttentionInput in = make_input(32, 2048, 32, 32, 1.0, 40.0, 100 + seed);
    const std::vector<double> g = golden_attention_ref(in);
    auto err = [&](AmlaVariant var, AmlaComp comp) {
      AmlaOptions o = opts(var, AmlaAcc::kExact, 64);
      o.comp = comp;
      o.out = Encoding::kFp32;
      const PipelineResult r = run_pipeline(in, amla_pipeline(o));
      return error_metrics(r.o, g).rel_fro;
    };
    e_none += err(AmlaVariant::kPaper, AmlaComp::kNone);
    e_app += err(AmlaVariant::kPaper, AmlaComp::kAppendix);
    e_alg2 += err(AmlaVariant::kPaper, AmlaComp::kAlg2);
    e_cann += err(AmlaVariant::kCann, AmlaComp::kDefault);
  }
  EXPECT_LT(e_app, e_none);
  EXPECT_LT(e_cann, e_none);
  EXPECT_GT(e_alg2, e_none);
}

}  // namespace
}  // namespace attnsim
