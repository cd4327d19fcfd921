// TurboAttention (sim/turbo/turbo.hpp). The decode schedule is checked bit for bit against a
// second implementation written here with plain loops (its own stage-1 quantizer, BPQ, buffer and
// online softmax, one query at a time), on random, GQA, mixed-precision and clamping inputs; the
// prefill and the whole method against properties (stage attribution, thread count, cache shape,
// the literal readings). The H100 recordings (tests/hw/turbo_h100_test.cpp) are the other check.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "sim/golden/golden.hpp"
#include "tests/sim/random_input.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {
namespace {

float f16(float x) { return float(_Float16(x)); }
float rne_div(float a, float b) { return std::nearbyint(a / b); }

// ---- the reference -----------------------------------------------------------------------------
struct RefBlock {
  std::vector<int> x;  // [len][d] the INT8 values a query reads
  float scale = 0;
};

// Stage 1 of a block: s = amax / 119, q = RNE(x / s) (0/0 -> 0).
RefBlock ref_stage1(const std::vector<float>& x, int t0, int len, int d) {
  RefBlock b;
  float amax = 0;
  for (int i = 0; i < len * d; ++i) amax = std::max(amax, std::fabs(x[std::size_t(t0) * d + i]));
  b.scale = amax / 119.0f;
  for (int i = 0; i < len * d; ++i) {
    const float r = rne_div(x[std::size_t(t0) * d + i], b.scale);
    b.x.push_back(r != r ? 0 : int(r));
  }
  return b;
}

// BPQ stage 2 and back: per channel, s = max(1, ceil(range / (2^b - 1))), z = min,
// code = nearest-even (x - z) / s by integer comparison of the remainder, x̂ = code·s + z.
void ref_bpq(RefBlock& b, int len, int d, int bits) {
  for (int c = 0; c < d; ++c) {
    int mn = 1000, mx = -1000;
    for (int t = 0; t < len; ++t) {
      mn = std::min(mn, b.x[std::size_t(t) * d + c]);
      mx = std::max(mx, b.x[std::size_t(t) * d + c]);
    }
    const int levels = (1 << bits) - 1;
    const int s = std::max(1, (mx - mn + levels - 1) / levels);
    for (int t = 0; t < len; ++t) {
      int& x = b.x[std::size_t(t) * d + c];
      const int num = x - mn, q = num / s, rem = num % s;
      int code = q;
      if (2 * rem > s || (2 * rem == s && (q & 1))) code = q + 1;
      x = code * s + mn;
    }
  }
}

// One decode query against blocks (the last one the buffer): the pipeline's arithmetic as
// sim/turbo/README.md writes it (quad lanes, P scale per row, chunk per block).
std::vector<float> ref_query(const std::vector<float>& q16, const std::vector<RefBlock>& kb,
                             const std::vector<RefBlock>& vb, int visible, int bc, int d,
                             float sm, const SasRule& sas) {
  float amax = 0;
  for (float x : q16) amax = std::max(amax, std::fabs(x));
  const float sq = amax / 119.0f;
  std::vector<int> q8(static_cast<std::size_t>(d));
  for (int c = 0; c < d; ++c) {
    const float r = rne_div(q16[std::size_t(c)], sq);
    q8[std::size_t(c)] = r != r ? 0 : int(r);
  }
  float m = -std::numeric_limits<float>::infinity();
  float l[4] = {0, 0, 0, 0};
  std::vector<float> o(std::size_t(d), 0.0f);
  for (std::size_t j = 0; j < kb.size(); ++j) {
    const int t0 = int(j) * bc, cols = std::min(bc, visible - t0);
    std::vector<float> s(static_cast<std::size_t>(cols));
    const float dq = sq * kb[j].scale;
    float bm = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < cols; ++t) {
      long long acc = 0;
      for (int c = 0; c < d; ++c) acc += (long long)q8[std::size_t(c)] * kb[j].x[std::size_t(t) * d + c];
      s[std::size_t(t)] = float(acc) * dq;
      bm = std::max(bm, s[std::size_t(t)]);
    }
    const float m_old = m;
    m = std::max(m, bm);
    const float alpha = sas_exp((m_old - m) * sm, sas);
    for (float& x : l) x = x * alpha;
    for (float& x : o) x = x * alpha;
    std::vector<float> p(static_cast<std::size_t>(cols));
    float pmax = 0;
    for (int t = 0; t < cols; ++t) {
      p[std::size_t(t)] = sas_exp((s[std::size_t(t)] - m) * sm, sas);
      l[(t % 8) / 2] = l[(t % 8) / 2] + p[std::size_t(t)];
      pmax = std::max(pmax, p[std::size_t(t)]);
    }
    const float sp = pmax / 119.0f;
    for (int c = 0; c < d; ++c) {
      long long chunk = 0;
      for (int t = 0; t < cols; ++t) {
        const float r = rne_div(p[std::size_t(t)], sp);
        chunk += (long long)(r != r ? 0 : int(r)) * vb[j].x[std::size_t(t) * d + c];
      }
      o[std::size_t(c)] = o[std::size_t(c)] + float(chunk) * (sp * vb[j].scale);
    }
  }
  const float lsum = (l[0] + l[2]) + (l[1] + l[3]);
  const float inv = lsum == 0.0f || lsum != lsum ? 1.0f : 1.0f / lsum;
  for (float& x : o) x = f16(x * inv);
  return o;
}

// Every decode row of a causal self-attention input with prompt P, all heads at `bits`.
std::vector<float> ref_decode(const AttentionInput& in, int P, int bc, const std::vector<int>& bits,
                              int clamp, const SasRule& sas) {
  const AttentionShape& sh = in.shape;
  const int N = sh.len_kv, d = sh.head_dim;
  const float sm = float(in.scale());
  std::vector<float> out(sh.o_size(), 0.0f);
  for (int b = 0; b < sh.batch; ++b)
    for (int hk = 0; hk < sh.heads_kv; ++hk) {
      const std::size_t base = (std::size_t(b) * sh.heads_kv + hk) * N * d;
      std::vector<float> k(std::size_t(N) * d), v(std::size_t(N) * d);
      for (std::size_t i = 0; i < k.size(); ++i) {
        k[i] = f16(in.k[base + i]);
        v[i] = f16(in.v[base + i]);
      }
      // The prompt's blocks, the universal scales.
      float suk = 0, suv = 0;
      std::vector<RefBlock> kc, vc;
      for (int t0 = 0; t0 < P; t0 += bc) {
        const int len = std::min(bc, P - t0);
        RefBlock kb = ref_stage1(k, t0, len, d), vb = ref_stage1(v, t0, len, d);
        suk = std::max(suk, kb.scale);
        suv = std::max(suv, vb.scale);
        if (len == bc) {
          ref_bpq(kb, len, d, bits[std::size_t(hk)]);
          ref_bpq(vb, len, d, bits[std::size_t(hk)]);
          kc.push_back(kb);
          vc.push_back(vb);
        }
      }
      auto buffered = [&](const std::vector<float>& x, float su, int t0, int len) {
        RefBlock r;
        r.scale = su;
        for (int i = 0; i < len * d; ++i) {
          float q = rne_div(x[std::size_t(t0) * d + i], su);
          q = q != q ? 0.0f : std::max(-float(clamp), std::min(float(clamp), q));
          r.x.push_back(int(q));
        }
        return r;
      };
      for (int t = P; t < N; ++t) {
        const int kblk = t / bc, t0 = kblk * bc;
        // Blocks before kblk compressed (the prompt's, then the flushed buffers).
        while (int(kc.size()) < kblk) {
          const int f0 = int(kc.size()) * bc;
          RefBlock kb = buffered(k, suk, f0, bc), vb = buffered(v, suv, f0, bc);
          ref_bpq(kb, bc, d, bits[std::size_t(hk)]);
          ref_bpq(vb, bc, d, bits[std::size_t(hk)]);
          kc.push_back(kb);
          vc.push_back(vb);
        }
        std::vector<RefBlock> kview(kc.begin(), kc.begin() + kblk), vview(vc.begin(), vc.begin() + kblk);
        kview.push_back(buffered(k, suk, t0, t - t0 + 1));
        vview.push_back(buffered(v, suv, t0, t - t0 + 1));
        for (int g = 0; g < sh.group(); ++g) {
          const int hq = hk * sh.group() + g;
          const std::size_t qb = ((std::size_t(b) * sh.heads_q + hq) * sh.len_q + t) * d;
          std::vector<float> q16(static_cast<std::size_t>(d));
          for (int c = 0; c < d; ++c) q16[std::size_t(c)] = f16(in.q[qb + std::size_t(c)]);
          const std::vector<float> o = ref_query(q16, kview, vview, t + 1, bc, d, sm, sas);
          std::copy(o.begin(), o.end(), out.begin() + std::ptrdiff_t(qb));
        }
      }
    }
  return out;
}

long long count_mismatches(const TurboResult& r, const std::vector<float>& ref,
                           const AttentionInput& in, int P) {
  const AttentionShape& s = in.shape;
  long long bad = 0;
  for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
    for (int t = P; t < s.len_q; ++t)
      for (int c = 0; c < s.head_dim_v; ++c) {
        const std::size_t i = (std::size_t(bh) * s.len_q + t) * s.head_dim_v + c;
        const float a = float(r.out.o[i]);
        if (std::memcmp(&a, &ref[i], 4) != 0 && ++bad <= 3)
          ADD_FAILURE() << "row " << t << " bh " << bh << " c " << c << ": sim " << a << " ref "
                        << ref[i];
      }
  return bad;
}

AttentionShape shape(int hq, int hkv, int n, int d) {
  AttentionShape s;
  s.batch = 1;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.len_q = s.len_kv = n;
  s.head_dim = s.head_dim_v = d;
  return s;
}

TEST(Turbo, DecodeEqualsThePlainLoopReference) {
  struct Case {
    AttentionShape s;
    int P;
    std::vector<int> bits;
    double sigma;
    SasFormat fmt;
  };
  const std::vector<Case> cases{
      {shape(2, 2, 200, 64), 64, {4, 4}, 1.0, SasFormat::kFp16},
      {shape(4, 2, 300, 64), 130, {4, 2}, 2.0, SasFormat::kFp16},
      {shape(3, 1, 257, 128), 100, {2}, 1.0, SasFormat::kFp32},
      {shape(2, 2, 129, 32), 1, {2, 4}, 3.0, SasFormat::kFp16},
  };
  for (const Case& c : cases) {
    AttentionInput in = simtest::random_input(c.s, true, 7u + unsigned(c.P), c.sigma);
    // Outliers after the prompt, so the buffer clamps.
    for (int i = 0; i < 5; ++i) in.k[std::size_t(c.P + 10 + i) * c.s.head_dim + 3] = 40.0f;
    TurboOptions o;
    o.mode = TurboMode::kDecode;
    o.prefill = c.P;
    o.head_bits_k = c.bits;
    o.head_bits_v = c.bits;
    o.sas_rule.fmt = c.fmt;
    const TurboResult r = turbo_attention(in, o);
    EXPECT_TRUE(r.decode);
    const std::vector<float> ref = ref_decode(in, c.P, 64, c.bits, 119, o.sas_rule);
    EXPECT_EQ(count_mismatches(r, ref, in, c.P), 0) << c.s.len_kv << " P=" << c.P;
    long long clamped = 0;
    for (const TurboKvCache& kc : r.caches) clamped += kc.clamped_k;
    EXPECT_GT(clamped, 0);
  }
}

TEST(Turbo, CacheShapeFollowsTheGrid) {
  const AttentionInput in = simtest::random_input(shape(2, 1, 300, 64), true, 3);
  TurboOptions o;
  o.mode = TurboMode::kDecode;
  o.prefill = 130;
  const TurboResult r = turbo_attention(in, o);
  ASSERT_EQ(r.caches.size(), 1u);
  const TurboKvCache& c = r.caches[0];
  EXPECT_EQ(c.blocks(), 4);  // 300 = 4·64 + 44: the last 44 tokens stay in the buffer
  EXPECT_EQ(c.buf_tokens, 44);
  EXPECT_EQ(c.flushes, 2);  // blocks 2 and 3 came through the buffer (the prompt had 2 complete)
  for (int b = 0; b < c.blocks(); ++b) {
    const std::vector<std::int32_t> x = c.block_int8(false, b);
    for (std::int32_t v : x) {
      EXPECT_LE(v, 127);  // 119 + 8 headroom: the INT4 reconstruction stays in INT8
      EXPECT_GE(v, -128);
    }
  }
  EXPECT_EQ(c.k_code.size(), std::size_t(256 * 64));
  for (std::uint8_t q : c.k_code) EXPECT_LT(q, 16);
}

TEST(Turbo, ResultsDoNotDependOnTheThreadCount) {
  const AttentionInput in = simtest::random_input(shape(4, 2, 260, 64), true, 5);
  TurboOptions o;
  o.kv_bits = 2;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const TurboResult a = turbo_attention(in, o);
  omp_set_num_threads(2);
  const TurboResult b = turbo_attention(in, o);
  omp_set_num_threads(saved);
  EXPECT_EQ(a.out.o, b.out.o);
}

double rel_err(const std::vector<double>& a, const std::vector<double>& g) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - g[i]) * (a[i] - g[i]);
    den += g[i] * g[i];
  }
  return std::sqrt(num / den);
}

TEST(Turbo, StagesAddErrorInTheExpectedOrder) {
  AttentionInput in = simtest::random_input(shape(2, 2, 512, 64), true, 9);
  const std::vector<double> gold = golden_attention(in).o;
  auto err = [&](auto edit) {
    TurboOptions o;
    o.mode = TurboMode::kDecode;
    o.prefill = 128;
    o.out = Encoding::kFp32;
    edit(o);
    return rel_err(turbo_attention(in, o).out.o, gold);
  };
  const double fp16 = err([](TurboOptions& o) { o.flashq = false; o.sas = false; });
  const double sas = err([](TurboOptions& o) { o.flashq = false; });
  const double int8 = err([](TurboOptions& o) { o.compress = false; o.sas = false; });
  const double q4 = err([](TurboOptions& o) { o.sas = false; });
  const double q2 = err([](TurboOptions& o) { o.kv_bits = 2; o.sas = false; });
  const double both = err([](TurboOptions&) {});
  EXPECT_LT(fp16, sas);
  EXPECT_LT(fp16, int8);
  EXPECT_LT(int8, q4);
  EXPECT_LT(q4, q2);
  EXPECT_LT(q4, both * 1.5);
  EXPECT_LT(both, 0.2);
}

TEST(Turbo, LiteralRescaleAndCeilingDifferFromTheIntent) {
  const AttentionInput in = simtest::random_input(shape(1, 1, 200, 64), true, 11, 2.0);
  TurboOptions o;
  o.mode = TurboMode::kPrefill;
  const TurboResult a = turbo_attention(in, o);
  TurboOptions lit = o;
  lit.rescale = TurboRescale::kLiteralInverse;
  const TurboResult b = turbo_attention(in, lit);
  EXPECT_NE(a.out.o, b.out.o);
  const std::vector<double> gold = golden_attention(in).o;
  TurboOptions ceil = o;
  ceil.q8 = kTurboInt8AlgCeil;
  ceil.p8 = kTurboInt8AlgCeil;
  EXPECT_GT(rel_err(turbo_attention(in, ceil).out.o, gold), rel_err(a.out.o, gold));
}

TEST(Turbo, OracleBufferScaleNeverClamps) {
  AttentionInput in = simtest::random_input(shape(1, 1, 256, 64), true, 13);
  for (int i = 0; i < 64; ++i) in.v[std::size_t(150 + i) * 64 + 5] = 30.0f;
  TurboOptions o;
  o.mode = TurboMode::kDecode;
  o.prefill = 64;
  const TurboResult clamp = turbo_attention(in, o);
  o.buffer_scale = BufferScale::kOracle;
  const TurboResult oracle = turbo_attention(in, o);
  EXPECT_GT(clamp.caches[0].clamped_v, 0);
  EXPECT_EQ(oracle.caches[0].clamped_v, 0);
}

TEST(Turbo, BadOptionsAreOneLineErrors) {
  const AttentionInput in = simtest::random_input(shape(1, 1, 100, 64), true, 1);
  TurboOptions o;
  o.mode = TurboMode::kDecode;
  o.prefill = 100;
  EXPECT_THROW(turbo_attention(in, o), std::invalid_argument);
  AttentionInput nc = in;
  nc.causal = false;
  o.prefill = 50;
  EXPECT_THROW(turbo_attention(nc, o), std::invalid_argument);
  o.kv_bits = 3;
  EXPECT_THROW(turbo_attention(in, o), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
