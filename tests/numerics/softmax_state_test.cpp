// numerics/softmax_state: merge and normalize semantics of the online-softmax state.
#include "numerics/softmax_state.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace attnsim {
namespace {

// State of a set of (base-2 score, value-vector) pairs, built directly.
SoftmaxState<double> state_of(const std::vector<double>& s, const std::vector<std::vector<double>>& v) {
  SoftmaxState<double> st(int(v.empty() ? 0 : v[0].size()));
  if (s.empty()) return st;
  double m = s[0];
  for (double x : s) m = std::max(m, x);
  st.m = m;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp2(s[j] - m);
    st.l += p;
    for (std::size_t c = 0; c < st.o.size(); ++c) st.o[c] += p * v[j][c];
  }
  return st;
}

TEST(SoftmaxState, EmptyIsIdentityForMerge) {
  SoftmaxState<float> a(2), e(2);
  a.m = 3.0f;
  a.l = 1.5f;
  a.o = {0.25f, -7.0f};
  SoftmaxState<float> b = a;
  b.merge(e);
  EXPECT_EQ(b.m, a.m);
  EXPECT_EQ(b.l, a.l);
  EXPECT_EQ(b.o, a.o);
  SoftmaxState<float> c = e;
  c.merge(a);
  EXPECT_EQ(c.m, a.m);
  EXPECT_EQ(c.o, a.o);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.normalize(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_TRUE(std::isinf(e.lse2()) && e.lse2() < 0);
}

TEST(SoftmaxState, MergeOfSplitsEqualsWhole) {
  // Scores chosen so that every exp2 is exact (integer differences): merging is then exact and
  // must equal the state of the whole set bit for bit, in any grouping.
  const std::vector<double> s{1, 4, 2, 4, -3, 0};
  const std::vector<std::vector<double>> v{{1, 2}, {3, -1}, {0.5, 0.25}, {-2, 8}, {16, 1}, {7, 7}};
  const auto whole = state_of(s, v);
  auto left = state_of({1, 4, 2}, {v[0], v[1], v[2]});
  auto right = state_of({4, -3, 0}, {v[3], v[4], v[5]});
  auto a = left;
  a.merge(right);
  auto b = right;
  b.merge(left);
  for (auto* st : {&a, &b}) {
    EXPECT_EQ(st->m, whole.m);
    EXPECT_EQ(st->l, whole.l);
    EXPECT_EQ(st->o, whole.o);
  }
  // Associativity over three parts.
  auto p1 = state_of({1, 4}, {v[0], v[1]}), p2 = state_of({2, 4}, {v[2], v[3]}), p3 = state_of({-3, 0}, {v[4], v[5]});
  auto x = p1;
  x.merge(p2);
  x.merge(p3);
  auto y = p2;
  y.merge(p3);
  auto z = p1;
  z.merge(y);
  EXPECT_EQ(x.o, z.o);
  EXPECT_EQ(x.l, z.l);
  const auto n = whole.normalize();
  EXPECT_DOUBLE_EQ(n[0], whole.o[0] / whole.l);
  EXPECT_DOUBLE_EQ(whole.lse2(), whole.m + std::log2(whole.l));
}

}  // namespace
}  // namespace attnsim
