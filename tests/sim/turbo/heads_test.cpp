// Head-wise mixed precision (sim/turbo/heads.hpp): the selectors' statistics against hand-computed
// values and an independent entropy loop, the ranking of Eq. 12 in both scopes with its tie rule,
// batch pooling, and turbo_head_bits.
#include "sim/turbo/heads.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

using simtest::random_input;

AttentionInput shaped(int batch, int hq, int hkv, int len, int d, bool causal) {
  AttentionShape s;
  s.batch = batch;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.len_q = s.len_kv = len;
  s.head_dim = s.head_dim_v = d;
  AttentionInput in;
  in.shape = s;
  in.causal = causal;
  in.q.assign(s.q_size(), 0.0f);
  in.k.assign(s.k_size(), 0.0f);
  in.v.assign(s.v_size(), 0.0f);
  return in;
}

// Element (t, c) of KV head h in batch 0.
float& at(std::vector<float>& x, const AttentionShape& s, int h, int t, int c, int b = 0) {
  return x[((std::size_t(b) * s.heads_kv + h) * s.len_kv + t) * s.head_dim + c];
}

TEST(HeadScoresTest, RangeStatisticsByHand) {
  // Two KV heads, d = 2, four tokens of which the prompt is three (the fourth is a huge value
  // that must not count).
  AttentionInput in = shaped(1, 2, 2, 4, 2, true);
  const AttentionShape& s = in.shape;
  // Head 0 K: channel 0 = {0, 4, 2}, channel 1 = {1, 1, 1}: gaps 4 and 0, global range 4 − 0 = 4,
  // std of {4, 0} = 2, priority 8.
  const float k0[3][2] = {{0, 1}, {4, 1}, {2, 1}};
  // Head 1 K: channel 0 = {−1, 1, 0}, channel 1 = {−3, 3, 0}: gaps 2 and 6, range 3 − (−3) = 6,
  // std 2, priority 12.
  const float k1[3][2] = {{-1, -3}, {1, 3}, {0, 0}};
  // V head 0: channels {0, 1, 2}, {0, 2, 4}: gaps 2, 4, range 4, std 1, priority 4.
  // V head 1: all 5: gaps 0, range 0, std 0, priority 0.
  const float v0[3][2] = {{0, 0}, {1, 2}, {2, 4}};
  for (int t = 0; t < 3; ++t)
    for (int c = 0; c < 2; ++c) {
      at(in.k, s, 0, t, c) = k0[t][c];
      at(in.k, s, 1, t, c) = k1[t][c];
      at(in.v, s, 0, t, c) = v0[t][c];
      at(in.v, s, 1, t, c) = 5;
    }
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 2; ++c) {
      at(in.k, s, h, 3, c) = 1000;
      at(in.v, s, h, 3, c) = -1000;
    }
  HeadScores p = head_scores(in, 3, HeadSelector::kPriority);
  EXPECT_DOUBLE_EQ(p.k[0], 8);
  EXPECT_DOUBLE_EQ(p.k[1], 12);
  EXPECT_DOUBLE_EQ(p.v[0], 4);
  EXPECT_DOUBLE_EQ(p.v[1], 0);
  HeadScores g = head_scores(in, 3, HeadSelector::kMinMax);
  EXPECT_DOUBLE_EQ(g.k[0], 4);
  EXPECT_DOUBLE_EQ(g.k[1], 6);
  EXPECT_DOUBLE_EQ(g.v[0], 4);
  EXPECT_DOUBLE_EQ(g.v[1], 0);
  HeadScores v = head_scores(in, 3, HeadSelector::kVariation);
  EXPECT_DOUBLE_EQ(v.k[0], 2);
  EXPECT_DOUBLE_EQ(v.k[1], 2);
  EXPECT_DOUBLE_EQ(v.v[0], 1);
  EXPECT_DOUBLE_EQ(v.v[1], 0);

  // kHead: head 0 = 8 + 4 = 12, head 1 = 12 + 0 = 12: a tie, the lower index gets 2 bits.
  HeadBits b = select_head_bits(in, 3, HeadSelector::kPriority, HeadScope::kHead, 1);
  EXPECT_EQ(b.k, (std::vector<int>{2, 4}));
  EXPECT_EQ(b.v, (std::vector<int>{2, 4}));
  // kKvSeparate: candidates K0 = 8, V0 = 4, K1 = 12, V1 = 0 -> order V1, V0, K0, K1.
  b = select_head_bits(in, 3, HeadSelector::kPriority, HeadScope::kKvSeparate, 1);
  EXPECT_EQ(b.k, (std::vector<int>{4, 4}));
  EXPECT_EQ(b.v, (std::vector<int>{4, 2}));
  b = select_head_bits(in, 3, HeadSelector::kPriority, HeadScope::kKvSeparate, 3);
  EXPECT_EQ(b.k, (std::vector<int>{2, 4}));
  EXPECT_EQ(b.v, (std::vector<int>{2, 2}));
  b = select_head_bits(in, 3, HeadSelector::kPriority, HeadScope::kKvSeparate, 4);
  EXPECT_EQ(b.k, (std::vector<int>{2, 2}));
  EXPECT_EQ(b.v, (std::vector<int>{2, 2}));
  b = select_head_bits(in, 3, HeadSelector::kPriority, HeadScope::kHead, 0);
  EXPECT_EQ(b.k, (std::vector<int>{4, 4}));
  // Min-max, kHead: head 0 = 8, head 1 = 6 -> head 1 at 2 bits.
  b = select_head_bits(in, 3, HeadSelector::kMinMax, HeadScope::kHead, 1);
  EXPECT_EQ(b.k, (std::vector<int>{4, 2}));
  // With the fourth token the ranges change (the prompt length matters).
  EXPECT_DOUBLE_EQ(head_scores(in, 4, HeadSelector::kMinMax).k[0], 1000);
}

TEST(HeadScoresTest, TieRuleKvSeparate) {
  // Equal K and V scores everywhere: the order is K0, V0, K1, V1, ...
  HeadScores sc{{1, 1, 1}, {1, 1, 1}};
  HeadBits b = head_bits_from_scores(sc, HeadSelector::kPriority, HeadScope::kKvSeparate, 3);
  EXPECT_EQ(b.k, (std::vector<int>{2, 2, 4}));
  EXPECT_EQ(b.v, (std::vector<int>{2, 4, 4}));
  // Entropy ranks from the highest: head 2 first, then head 0 and head 1 tie (head 0 first).
  HeadScores e{{0.5, 0.5, 2.0}, {0.5, 0.5, 2.0}};
  b = head_bits_from_scores(e, HeadSelector::kEntropy, HeadScope::kHead, 2);
  EXPECT_EQ(b.k, (std::vector<int>{2, 4, 2}));
  EXPECT_EQ(b.v, b.k);
  b = head_bits_from_scores(e, HeadSelector::kEntropy, HeadScope::kKvSeparate, 3);
  EXPECT_EQ(b.k, (std::vector<int>{2, 4, 2}));
  EXPECT_EQ(b.v, (std::vector<int>{4, 4, 2}));
}

TEST(HeadScoresTest, RangeChecks) {
  AttentionInput in = random_input({1, 4, 2, 16, 16, 8, 8}, true, 3);
  EXPECT_THROW(select_head_bits(in, 8, HeadSelector::kPriority, HeadScope::kHead, 3),
               std::invalid_argument);
  EXPECT_THROW(select_head_bits(in, 8, HeadSelector::kPriority, HeadScope::kHead, -1),
               std::invalid_argument);
  EXPECT_NO_THROW(select_head_bits(in, 8, HeadSelector::kPriority, HeadScope::kKvSeparate, 4));
  EXPECT_THROW(select_head_bits(in, 8, HeadSelector::kPriority, HeadScope::kKvSeparate, 5),
               std::invalid_argument);
  EXPECT_THROW(head_scores(in, 0, HeadSelector::kPriority), std::invalid_argument);
  EXPECT_THROW(head_scores(in, 17, HeadSelector::kEntropy), std::invalid_argument);
  try {
    select_head_bits(in, 8, HeadSelector::kEntropy, HeadScope::kHead, 7);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("0..2"), std::string::npos) << e.what();
  }
}

TEST(HeadScoresTest, BatchEntriesArePooled) {
  // The statistics of a batch-2 layer equal those of one sequence holding both prompts.
  const int P = 20, d = 8;
  AttentionInput two = random_input({2, 2, 2, 32, 32, d, d}, true, 11);
  AttentionInput one = shaped(1, 2, 2, 2 * P, d, true);
  for (int h = 0; h < 2; ++h)
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < P; ++t)
        for (int c = 0; c < d; ++c) {
          at(one.k, one.shape, h, b * P + t, c) = at(two.k, two.shape, h, t, c, b);
          at(one.v, one.shape, h, b * P + t, c) = at(two.v, two.shape, h, t, c, b);
        }
  for (HeadSelector sel :
       {HeadSelector::kPriority, HeadSelector::kMinMax, HeadSelector::kVariation}) {
    const HeadScores a = head_scores(two, P, sel), b = head_scores(one, 2 * P, sel);
    EXPECT_EQ(a.k, b.k);
    EXPECT_EQ(a.v, b.v);
  }
}

// −Σ p ln p of every prompt row, written as the definition: p = e^s / Σ e^s in FP64.
double entropy_ref(const AttentionInput& in, int prefill, int kv_head) {
  const AttentionShape& s = in.shape;
  const int off = s.len_kv - s.len_q;
  int rows = std::min(std::max(prefill - off, 0), s.len_q);
  if (rows == 0) rows = s.len_q;
  double sum = 0;
  long long n = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int h = kv_head * s.group(); h < (kv_head + 1) * s.group(); ++h)
      for (int i = 0; i < rows; ++i) {
        std::vector<double> e;
        double mx = -1e300;
        for (int j = 0; j < prefill; ++j) {
          if (in.causal && j > i + off) continue;
          double dot = 0;
          for (int c = 0; c < s.head_dim; ++c)
            dot +=
                double(in.q[((std::size_t(b) * s.heads_q + h) * s.len_q + i) * s.head_dim + c]) *
                double(in.k[((std::size_t(b) * s.heads_kv + kv_head) * s.len_kv + j) * s.head_dim +
                            c]);
          e.push_back(dot * in.scale());
          mx = std::max(mx, e.back());
        }
        if (e.empty()) continue;
        double z = 0;
        for (double& x : e) z += (x = std::exp(x - mx));
        double h_row = 0;
        for (double x : e) {
          const double p = x / z;
          if (p > 0) h_row -= p * std::log(p);
        }
        sum += h_row;
        ++n;
      }
  return sum / double(n);
}

TEST(HeadScoresTest, EntropyMatchesDefinition) {
  // GQA 6:2, batch 2, causal and not, a prompt shorter than the input, and a decode-shaped input
  // (len_q < len_kv) with and without prompt queries.
  for (bool causal : {true, false}) {
    AttentionInput in = random_input({2, 6, 2, 40, 40, 16, 16}, causal, 5, 1.5);
    const HeadScores e = head_scores(in, 30, HeadSelector::kEntropy);
    for (int h = 0; h < 2; ++h) {
      EXPECT_NEAR(e.k[std::size_t(h)], entropy_ref(in, 30, h), 1e-12);
      EXPECT_EQ(e.k[std::size_t(h)], e.v[std::size_t(h)]);
    }
  }
  AttentionInput dec = random_input({1, 4, 2, 10, 50, 16, 16}, true, 6);
  for (int prefill : {45, 40, 20}) {  // 5 prompt rows; none (every row over 40 / 20 keys)
    const HeadScores e = head_scores(dec, prefill, HeadSelector::kEntropy);
    for (int h = 0; h < 2; ++h)
      EXPECT_NEAR(e.k[std::size_t(h)], entropy_ref(dec, prefill, h), 1e-12) << prefill;
  }
}

TEST(HeadScoresTest, EntropyDirection) {
  // Head 0: Q = 0, uniform attention, entropy = mean over rows of ln(i + 1) (causal).
  // Head 1: one key far above the rest for every query, entropy near 0. With n_h = 1 the diffuse
  // head 0 gets 2 bits (heads.hpp: the highest entropy is the least important).
  AttentionInput in = shaped(1, 2, 2, 32, 4, true);
  const AttentionShape& s = in.shape;
  for (int t = 0; t < 32; ++t) {
    at(in.k, s, 1, t, 0) = t == 0 ? 50.0f : 0.0f;
    in.q[(std::size_t(1) * 32 + t) * 4 + 0] = 10.0f;
  }
  const HeadScores e = head_scores(in, 16, HeadSelector::kEntropy);
  double expect = 0;
  for (int i = 0; i < 16; ++i) expect += std::log(double(i + 1));
  EXPECT_NEAR(e.k[0], expect / 16, 1e-12);
  EXPECT_LT(e.k[1], 1e-6);
  const HeadBits b = select_head_bits(in, 16, HeadSelector::kEntropy, HeadScope::kHead, 1);
  EXPECT_EQ(b.k, (std::vector<int>{2, 4}));
  EXPECT_EQ(b.v, (std::vector<int>{2, 4}));
}

TEST(TurboHeadBitsTest, UniformAndMixed) {
  AttentionInput in = random_input({1, 8, 4, 64, 64, 16, 16}, true, 9);
  // A spread of head ranges so the ranking is not a tie.
  for (int h = 0; h < 4; ++h)
    for (int t = 0; t < 64; ++t)
      for (int c = 0; c < 16; ++c) at(in.k, in.shape, h, t, c) *= float(1 + h * (c % 3));
  TurboOptions o;
  o.kv_bits = 4;
  HeadBits b = turbo_head_bits(in, o, 32);
  EXPECT_EQ(b.k, std::vector<int>(4, 4));
  EXPECT_EQ(b.v, std::vector<int>(4, 4));
  o.kv_bits = 2;
  b = turbo_head_bits(in, o, 32);
  EXPECT_EQ(b.k, std::vector<int>(4, 2));
  o.kv_bits = 0;
  o.n_h = 2;
  for (HeadSelector sel : {HeadSelector::kPriority, HeadSelector::kEntropy, HeadSelector::kMinMax,
                           HeadSelector::kVariation})
    for (HeadScope scope : {HeadScope::kHead, HeadScope::kKvSeparate}) {
      o.selector = sel;
      o.nh_scope = scope;
      b = turbo_head_bits(in, o, 32);
      const HeadBits want = select_head_bits(in, 32, sel, scope, 2);
      EXPECT_EQ(b.k, want.k);
      EXPECT_EQ(b.v, want.v);
      int twos = 0;
      for (int h = 0; h < 4; ++h) twos += (b.k[std::size_t(h)] == 2) + (b.v[std::size_t(h)] == 2);
      EXPECT_EQ(twos, scope == HeadScope::kHead ? 4 : 2);
    }
  // Priority on these heads: K ranges grow with h, so with kHead the two lowest are 0 and 1.
  o.selector = HeadSelector::kPriority;
  o.nh_scope = HeadScope::kHead;
  b = turbo_head_bits(in, o, 32);
  EXPECT_EQ(b.k, (std::vector<int>{2, 2, 4, 4}));
  o.kv_bits = 3;
  EXPECT_THROW(turbo_head_bits(in, o, 32), std::invalid_argument);
  o.kv_bits = 0;
  o.n_h = 5;
  EXPECT_THROW(turbo_head_bits(in, o, 32), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
