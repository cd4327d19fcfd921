// sim/pipeline's row state (TileState): merge_row of split schedules, the row sum's lane order,
// and the hand-computed FP32 step order of FA2 through attend_tile.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sim/pipeline/pipeline.hpp"

namespace attnsim {
namespace {

// The state of one row over (base-2 score, value) pairs from the definition, in FP64.
TileState<double> state_of(const std::vector<double>& s, const std::vector<std::vector<double>>& v) {
  TileState<double> st;
  st.reset(1, 2);
  if (s.empty()) return st;
  double m = s[0];
  for (double x : s) m = std::max(m, x);
  st.m[0] = m;
  for (std::size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp2(s[j] - m);
    st.lanes(0)[0] += p;
    for (int c = 0; c < 2; ++c) st.o_row(0)[c] += p * v[j][std::size_t(c)];
  }
  return st;
}

void expect_same(const TileState<double>& a, const TileState<double>& b) {
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.l, b.l);
  EXPECT_EQ(a.o, b.o);
}

TileState<double> merged(TileState<double> a, const TileState<double>& b) {
  merge_row(a, 0, b, 0, RowSum::kSingle, ExpModel<double>{});
  return a;
}

TEST(TileState, EmptyIsIdentityForMerge) {
  TileState<double> a = state_of({1, 3}, {{1, 2}, {3, 4}}), e;
  e.reset(1, 2);
  expect_same(merged(a, e), a);
  expect_same(merged(e, a), a);
  EXPECT_TRUE(merged(e, e).empty(0));
}

TEST(TileState, MergeOfSplitsEqualsWholeInExactCases) {
  // Integer score differences make every exp2 exact and the chosen values keep every sum exact:
  // merging is exact and must equal the whole set's state in any grouping.
  const std::vector<double> s{1, 4, 2, 4, -3, 0};
  const std::vector<std::vector<double>> v{{1, 2}, {3, -1}, {0.5, 0.25}, {-2, 8}, {16, 1}, {7, 7}};
  const auto whole = state_of(s, v);
  const auto left = state_of({1, 4, 2}, {v[0], v[1], v[2]});
  const auto right = state_of({4, -3, 0}, {v[3], v[4], v[5]});
  expect_same(merged(left, right), whole);
  expect_same(merged(right, left), whole);
  const auto p1 = state_of({1, 4}, {v[0], v[1]}), p2 = state_of({2, 4}, {v[2], v[3]}),
             p3 = state_of({-3, 0}, {v[4], v[5]});
  expect_same(merged(merged(p1, p2), p3), whole);
  expect_same(merged(p1, merged(p2, p3)), whole);
  expect_same(merged(merged(p3, p1), p2), whole);
}

TEST(TileState, QuadLanesCombineInAllreduceOrder) {
  TileState<float> st;
  st.reset(1, 1);
  st.m[0] = 0.0f;
  float* l = st.lanes(0);
  l[0] = 1.0f;
  l[1] = std::ldexp(1.0f, -24);
  l[2] = 0.0f;
  l[3] = std::ldexp(1.0f, -24);
  // FA2 quad_allreduce_: (l0 + l2) + (l1 + l3) = 1 + 2^-23 exactly; SageAttention2's normalize_d
  // (l0 + l1) + (l2 + l3) = 1 (two ties to even); one lane: l0.
  EXPECT_EQ(row_sum_total(st, 0, RowSum::kQuad), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(row_sum_total(st, 0, RowSum::kQuadFma), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(row_sum_total(st, 0, RowSum::kSageLanes), 1.0f);
  EXPECT_EQ(row_sum_total(st, 0, RowSum::kSingle), 1.0f);
}

TEST(TileState, Fp32RescaleOrderMatchesFa2) {
  // FA2 in FP32 over two KV blocks of 2 and 1 keys (descending: the last block first is the
  // partial one), scale_log2 = 0.5: sm_scale = 0.5·ln 2 gives fl32(fl32(sm)·log2 e) = 0.5.
  // Ascending order: block 0 s = (2, 0): m = 2, p = (1, 0.5), l = 1.5, o = 1·10 + 0.5·20 = 20.
  // Block 1 s = (6): m = 6, alpha = exp2((2 − 6)·0.5) = 0.25: l = 0.375, o = 5; p = 1:
  // l = 1.375, o = 5 + 1·(−4) = 1. Epilogue 1 · fl(1/1.375) = 0x3F3A2E8C.
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 3, 1, 1};
  in.q = {1.0f};
  in.k = {2.0f, 0.0f, 6.0f};
  in.v = {10.0f, 20.0f, -4.0f};
  in.sm_scale = 0.5 * 0.69314718055994530942;
  Pipeline p;
  p.tile.block_kv = 2;
  p.tile.kv_order = KvOrder::kAscending;
  p.softmax.row_sum = RowSum::kSingle;
  const PreparedInput prep = prepare(in, p);
  TileState<float> st;
  st.reset(1, 1);
  TileWorkspacePtr ws = make_workspace();
  attend_tile(prep, p, Tile{0, 0, 0, 1}, 0, 1, st, *ws);
  EXPECT_EQ(st.m[0], 2.0f);
  EXPECT_EQ(row_sum_total(st, 0, p.softmax.row_sum), 1.5f);
  EXPECT_EQ(st.o[0], 20.0f);
  attend_tile(prep, p, Tile{0, 0, 0, 1}, 1, 2, st, *ws);
  EXPECT_EQ(st.m[0], 6.0f);
  EXPECT_EQ(row_sum_total(st, 0, p.softmax.row_sum), 1.375f);
  EXPECT_EQ(st.o[0], 1.0f);
  double o = 0, lse = 0;
  finish_tile(prep, p, Tile{0, 0, 0, 1}, st, &o, &lse);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(float(o)), 0x3F3A2E8Cu);
}

TEST(TileState, ZeroOrNanSumKeepsOAndReportsTheEmptyRow) {
  // FA2: inv_sum = 1 when the sum is 0 or NaN; the row's LSE is the empty-row marker +inf.
  AttentionInput in;
  in.shape = {1, 1, 1, 1, 1, 1, 1};
  in.q = {1.0f};
  in.k = {1.0f};
  in.v = {1.0f};
  const Pipeline p;
  const PreparedInput prep = prepare(in, p);
  TileState<float> st;
  st.reset(1, 1);
  st.m[0] = 1.0f;
  st.lanes(0)[0] = NAN;
  st.o[0] = 2.0f;
  double o = 0, lse = 0;
  finish_tile(prep, p, Tile{0, 0, 0, 1}, st, &o, &lse);
  EXPECT_EQ(o, 2.0);
  EXPECT_TRUE(std::isinf(lse) && lse > 0);
}

}  // namespace
}  // namespace attnsim
