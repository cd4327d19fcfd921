// numerics/softmax_state: update, merge and normalize semantics of the online-softmax state.
#include "numerics/softmax_state.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attnsim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// State of a set of (base-2 score, value-vector) pairs, built directly from the definition.
SoftmaxState<double> state_of(const std::vector<double>& s,
                              const std::vector<std::vector<double>>& v) {
  SoftmaxState<double> st(int(v.empty() ? 0 : v[0].size()));
  if (s.empty()) return st;
  double m = s[0];
  for (double x : s) m = std::max(m, x);
  st.m = m;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp2(s[j] - m);
    st.l[0] += p;
    for (std::size_t c = 0; c < st.o.size(); ++c) st.o[c] += p * v[j][c];
  }
  return st;
}

void expect_same(const SoftmaxState<double>& a, const SoftmaxState<double>& b) {
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.sum(), b.sum());
  EXPECT_EQ(a.o, b.o);
}

TEST(SoftmaxState, EmptyIsIdentityForMerge) {
  SoftmaxState<float> a(2), e(2);
  a.m = 3.0f;
  a.l[0] = 1.5f;
  a.o = {0.25f, -7.0f};
  SoftmaxState<float> b = a;
  b.merge(e);
  EXPECT_EQ(b.m, a.m);
  EXPECT_EQ(b.l, a.l);
  EXPECT_EQ(b.o, a.o);
  SoftmaxState<float> c = e;
  c.merge(a);
  EXPECT_EQ(c.m, a.m);
  EXPECT_EQ(c.l, a.l);
  EXPECT_EQ(c.o, a.o);
  SoftmaxState<float> ee = e;
  ee.merge(e);
  EXPECT_TRUE(ee.empty());
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.normalize(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_TRUE(std::isinf(e.lse(1.0f)) && e.lse(1.0f) < 0);
}

TEST(SoftmaxState, AllMaskedUpdateStaysEmptyWithoutNaN) {
  // FA2 Check_inf: a block whose keys are all masked has max -inf; the exponent uses 0 instead,
  // so no -inf - (-inf) appears and the state stays empty, then a visible key works normally.
  SoftmaxState<float> st(1, 4);
  ExpModel<float> e;
  const float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  const float v[3] = {1.0f, 2.0f, 3.0f};
  st.update(masked, 3, v, 1, e);
  EXPECT_TRUE(st.empty());
  EXPECT_EQ(st.sum(), 0.0f);
  EXPECT_EQ(st.o[0], 0.0f);
  EXPECT_EQ(st.normalize()[0], 0.0f);
  const float one[2] = {-INFINITY, 5.0f};
  const float v2[2] = {100.0f, 7.0f};
  st.update(one, 2, v2, 1, e);
  EXPECT_EQ(st.m, 5.0f);
  EXPECT_EQ(st.sum(), 1.0f);
  EXPECT_EQ(st.normalize()[0], 7.0f);
}

TEST(SoftmaxState, MergeOfSplitsEqualsWholeInExactCases) {
  // Scores with integer differences make every exp2 exact, and values chosen so every sum is
  // exact in FP64: merging is then exact and must equal the state of the whole set bit for bit,
  // in any grouping (associativity and commutativity of merge).
  const std::vector<double> s{1, 4, 2, 4, -3, 0};
  const std::vector<std::vector<double>> v{{1, 2}, {3, -1}, {0.5, 0.25}, {-2, 8}, {16, 1}, {7, 7}};
  const auto whole = state_of(s, v);
  auto left = state_of({1, 4, 2}, {v[0], v[1], v[2]});
  auto right = state_of({4, -3, 0}, {v[3], v[4], v[5]});
  auto a = left;
  a.merge(right);
  auto b = right;
  b.merge(left);
  expect_same(a, whole);
  expect_same(b, whole);
  auto p1 = state_of({1, 4}, {v[0], v[1]}), p2 = state_of({2, 4}, {v[2], v[3]}),
       p3 = state_of({-3, 0}, {v[4], v[5]});
  auto x = p1;  // (p1 + p2) + p3
  x.merge(p2);
  x.merge(p3);
  auto y = p2;  // p1 + (p2 + p3)
  y.merge(p3);
  auto z = p1;
  z.merge(y);
  auto w = p3;  // (p3 + p1) + p2
  w.merge(p1);
  w.merge(p2);
  expect_same(x, whole);
  expect_same(z, whole);
  expect_same(w, whole);
  const auto n = whole.normalize();
  EXPECT_EQ(n[0], whole.o[0] * (1.0 / whole.sum()));
  EXPECT_EQ(whole.lse(1.0), whole.m + std::log(whole.sum()));
}

TEST(SoftmaxState, UpdateInBlocksEqualsMergeInExactCases) {
  // Streaming two blocks through update (FA2's loop) and merging two single-block states give the
  // same exact state.
  const double s0[3] = {1, 4, 2}, s1[3] = {4, -3, 0};
  const float v0[6] = {1, 2, 3, -1, 0.5f, 0.25f}, v1[6] = {-2, 8, 16, 1, 7, 7};
  ExpModel<double> e;
  SoftmaxState<double> stream(2), a(2), b(2);
  stream.update(s0, 3, v0, 2, e);
  stream.update(s1, 3, v1, 2, e);
  a.update(s0, 3, v0, 2, e);
  b.update(s1, 3, v1, 2, e);
  a.merge(b, e);
  expect_same(stream, a);
  EXPECT_EQ(stream.m, 4.0);
  EXPECT_EQ(stream.sum(), 0.125 + 1 + 0.25 + 1 + 0.0078125 + 0.0625);
}

TEST(SoftmaxState, Fp32RescaleOrderMatchesFa2) {
  // Hand-computed FP32 step, raw scores with scale_log2 = 0.5 (so m is in raw units as in FA2).
  // Block 1: s = (2, 0): m = 2, p = exp2(fma(2, .5, -1)) = 1, exp2(fma(0, .5, -1)) = 0.5;
  //          l = 1.5, o = 1·10 + 0.5·20 = 20.
  // Block 2: s = (6): m = 6, alpha = exp2((2 - 6)·0.5) = 0.25: l = 0.375, o = 5; p = 1:
  //          l = 1.375, o = 5 + 1·(-4) = 1. normalize: 1 · fl(1/1.375) = 0x3F3A2E8C.
  ExpModel<float> e;
  e.scale = 0.5f;
  SoftmaxState<float> st(1);
  const float s1[2] = {2, 0}, v1[2] = {10, 20}, s2[1] = {6}, v2[1] = {-4};
  st.update(s1, 2, v1, 1, e);
  EXPECT_EQ(st.sum(), 1.5f);
  EXPECT_EQ(st.o[0], 20.0f);
  st.update(s2, 1, v2, 1, e);
  EXPECT_EQ(st.m, 6.0f);
  EXPECT_EQ(st.sum(), 1.375f);
  EXPECT_EQ(st.o[0], 1.0f);
  // 1/1.375 = 0.7272727...; fl32 = 12201611·2^-24 = 0x3F3A2E8C (RN: remainder 0.36 ulp, down).
  EXPECT_EQ(std::bit_cast<std::uint32_t>(st.normalize()[0]), 0x3F3A2E8Cu);
}

TEST(SoftmaxState, QuadLanesSumInAllreduceOrder) {
  // Lane of column c: (c % 8) / 2. Partial sums l = (a, b, c, d) combine as (a + c) + (b + d).
  SoftmaxState<float> st(0, 4);
  for (int col = 0; col < 16; ++col) EXPECT_EQ(st.lane_of(col), (col % 8) / 2);
  st.m = 0.0f;
  st.l = {1.0f, std::ldexp(1.0f, -24), 0.0f, std::ldexp(1.0f, -24)};
  // (1 + 0) + (2^-24 + 2^-24) = 1 + 2^-23 exactly; a left-to-right sum would give 1.
  EXPECT_EQ(st.sum(), 1.0f + std::ldexp(1.0f, -23));
  SoftmaxState<float> one(0, 1);
  EXPECT_EQ(one.lane_of(13), 0);
}

TEST(SoftmaxState, NormalizeOfZeroOrNanSumUsesInvOne) {
  // FA2: inv_sum = 1 when sum is 0 or NaN.
  SoftmaxState<float> st(1);
  st.m = 1.0f;
  st.l[0] = NAN;
  st.o[0] = 2.0f;
  EXPECT_EQ(st.normalize()[0], 2.0f);
  EXPECT_TRUE(std::isinf(st.lse(1.0f)));
}

}  // namespace
}  // namespace attnsim
