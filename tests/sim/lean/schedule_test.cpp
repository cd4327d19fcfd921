// The stream-K partition (sim/lean/schedule.hpp): the closed forms against the tile-by-tile walk,
// hand-computed plans, and the invariants every plan must keep.
#include "sim/lean/schedule.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <random>
#include <stdexcept>

namespace attnsim {
namespace {

bool same(const LeanSegment& a, const LeanSegment& b) {
  return a.cta == b.cta && a.batch == b.batch && a.head == b.head && a.m_block == b.m_block &&
         a.n_begin == b.n_begin && a.n_end == b.n_end && a.host == b.host &&
         a.finisher == b.finisher && a.split == b.split;
}

// A LeanShape from its six leading fields, the rest at their defaults. (A positional aggregate
// would leave len_kv_per_batch without an initializer, which -Wmissing-field-initializers
// reports.)
LeanShape shape(int batch, int heads_q, int heads_kv, int len_q, int len_kv, int head_dim) {
  LeanShape s;
  s.batch = batch;
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.len_q = len_q;
  s.len_kv = len_kv;
  s.head_dim = head_dim;
  return s;
}

// Every block's tiles covered once by contiguous segments with splits 0, 1, ...; every CTA's
// tiles contiguous in the global order, max_tiles_per_tb or one fewer.
void check_invariants(const LeanShape& s, const LeanPlan& p) {
  std::map<long long, int> next, splits;
  std::map<int, long long> per_cta;
  for (const LeanSegment& g : p.segments) {
    const long long key = ((long long)g.batch * p.heads + g.head) * p.num_m_blocks + g.m_block;
    ASSERT_EQ(g.n_begin, next[key]) << "block " << key;
    ASSERT_LT(g.n_begin, g.n_end);
    next[key] = g.n_end;
    ASSERT_EQ(g.split, splits[key]++);
    ASSERT_EQ(g.host, g.n_begin == 0);
    ASSERT_EQ(g.finisher, g.n_end == p.tiles_of(g.batch, g.m_block));
    per_cta[g.cta] += g.n_end - g.n_begin;
  }
  long long total = 0;
  for (auto& [key, n] : next) {
    (void)key;
    total += n;
  }
  EXPECT_EQ(total, p.total_tiles);
  ASSERT_EQ(int(per_cta.size()), p.grid);
  for (auto& [c, n] : per_cta)
    EXPECT_EQ(n, c < p.high_load_tbs ? p.max_tiles_per_tb : p.max_tiles_per_tb - 1) << c;
  // No block needs more CTAs than the host's buffer sizing allows (where the kernel's blocks are
  // what the host assumes: at most n_blocks tiles each).
  if (!p.coverage.empty()) return;
  for (auto& [key, n] : splits) {
    (void)key;
    EXPECT_LE(n, p.num_splits) << s.batch << " " << s.heads_q << " " << s.len_kv;
  }
}

TEST(LeanSchedule, HandComputedDecodeGqa) {
  // (1, 32, 8, 1, 8192, 128): folded to 8 KV heads of 4 rows; 64 n-tiles of 128 keys; 512 tiles
  // <= 4·132, grid = min(256, ceil(32·512/64) = 256) = 256, 2 tiles each, all high-load;
  // num_splits (exact division) = 1 + (64 + 0)/2 = 33.
  LeanShape s = shape(1, 32, 8, 1, 8192, 128);
  const LeanPlan p = lean_plan(s);
  EXPECT_TRUE(p.folded);
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.block_n, 128);
  EXPECT_EQ(p.tiles_per_head, 64);
  EXPECT_EQ(p.total_tiles, 512);
  EXPECT_EQ(p.grid, 256);
  EXPECT_EQ(p.max_tiles_per_tb, 2);
  EXPECT_EQ(p.high_load_tbs, 256);
  EXPECT_EQ(p.num_splits, 33);
  ASSERT_EQ(p.segments.size(), 256u);
  EXPECT_TRUE(same(p.segments[33], LeanSegment{33, 0, 1, 0, 2, 4, false, false, 1}));
}

TEST(LeanSchedule, HandComputedLargeDecode) {
  // (4, 64, 64, 1, 30000, 64): MHA (no fold), 1 row; d = 64 -> 256 keys per n-tile; 118 n-tiles
  // per head; 4·64·118 = 30208 tiles > 528: grid = min(264, 32·64·4·1) = 264; 30208 / 264 =
  // 114.4 -> 115 per CTA, high_load = 30208 − 114·264 = 112; not exact: num_splits =
  // 1 + (118 + 115 − 3)/114 = 3.
  LeanShape s = shape(4, 64, 64, 1, 30000, 64);
  const LeanPlan p = lean_plan(s);
  EXPECT_FALSE(p.folded);
  EXPECT_EQ(p.block_n, 256);
  EXPECT_EQ(p.tiles_per_head, 118);
  EXPECT_EQ(p.total_tiles, 30208);
  EXPECT_EQ(p.grid, 264);
  EXPECT_EQ(p.max_tiles_per_tb, 115);
  EXPECT_EQ(p.high_load_tbs, 112);
  EXPECT_EQ(p.num_splits, 3);
  // CTA 112 is the first low-load CTA: tiles [112·115, +114) = [12880, 12994): head 109 of batch 0
  // starts at 109·118 = 12862, so n-tiles [18, 118), then head 110 [0, 14).
  std::vector<LeanSegment> c112;
  for (const auto& g : p.segments)
    if (g.cta == 112) c112.push_back(g);
  ASSERT_EQ(c112.size(), 2u);
  EXPECT_TRUE(same(c112[0], LeanSegment{112, 1, 45, 0, 18, 118, false, true, 1}));
}

TEST(LeanSchedule, OrtWorkedExampleThreeHeads) {
  // (1, 3, 3, 1, 640, 128) on 132 SMs, walked through lean_api.cc and lean_fwd_kernel.h by hand
  // (and by a Python transcription of that code): nb = 5, 15 tiles, grid min(8, ceil(32·15/5)) =
  // 8, mtpt 2, high_load 7, num_splits 1 + (5 + 2 − 3)/1 = 5. CTA 2 ends head 0 (tile 4, split 2)
  // and hosts head 1 (tile 0); CTA 7 holds head 2's last tile alone.
  const LeanPlan p = lean_plan(shape(1, 3, 3, 1, 640, 128));
  EXPECT_EQ(p.grid, 8);
  EXPECT_EQ(p.max_tiles_per_tb, 2);
  EXPECT_EQ(p.high_load_tbs, 7);
  EXPECT_EQ(p.num_splits, 5);
  const std::vector<LeanSegment> want{
      {0, 0, 0, 0, 0, 2, true, false, 0},  {1, 0, 0, 0, 2, 4, false, false, 1},
      {2, 0, 0, 0, 4, 5, false, true, 2},  {2, 0, 1, 0, 0, 1, true, false, 0},
      {3, 0, 1, 0, 1, 3, false, false, 1}, {4, 0, 1, 0, 3, 5, false, true, 2},
      {5, 0, 2, 0, 0, 2, true, false, 0},  {6, 0, 2, 0, 2, 4, false, false, 1},
      {7, 0, 2, 0, 4, 5, false, true, 2}};
  ASSERT_EQ(p.segments.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same(p.segments[i], want[i])) << i;
}

TEST(LeanSchedule, ClosedFormsEqualTheTileWalk) {
  std::mt19937 rng(14);
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + std::uniform_int_distribution<int>(0, int(v.size()) - 1)(rng));
  };
  int compared = 0;
  for (int it = 0; it < 3000; ++it) {
    LeanShape s;
    s.batch = pick({1, 2, 3, 4, 7, 16});
    s.heads_kv = pick({1, 2, 4, 8});
    s.heads_q = s.heads_kv * pick({1, 2, 4, 8, 16, 80});
    s.len_q = pick({1, 1, 1, 17, 64, 200});
    s.len_kv = pick({1, 100, 128, 129, 1000, 4096, 20000});
    s.head_dim = pick({64, 128});
    s.causal = rng() % 2;
    s.sms = pick({1, 8, 108, 132});
    s.m_blocks = rng() % 2 ? LeanMBlocks::kOrt : LeanMBlocks::kAll;
    if (s.len_q == 1 && rng() % 3 == 0) {
      for (int b = 0; b < s.batch; ++b)
        s.len_kv_per_batch.push_back(1 + int(rng() % std::uint32_t(s.len_kv)));
    }
    const LeanPlan a = lean_plan(s), b = lean_plan_ref(s);
    ASSERT_EQ(a.segments.size(), b.segments.size()) << it;
    for (std::size_t i = 0; i < a.segments.size(); ++i)
      ASSERT_TRUE(same(a.segments[i], b.segments[i])) << "shape " << it << " segment " << i;
    check_invariants(s, a);
    if (HasFatalFailure()) return;
    ++compared;
  }
  EXPECT_EQ(compared, 3000);
}

TEST(LeanSchedule, CausalPrefillTileCounts) {
  // len_q = len_kv = 300, block 64 x 128: ORT counts ceil(64(i+1) / 128) n-tiles for m-block i
  // (lean_api.cc L202-205, top-left); the corrected partition ceil(min(300, 64(i+1)) / 128): the
  // same here.
  LeanShape s = shape(1, 2, 2, 300, 300, 128);
  s.causal = true;
  const LeanPlan p = lean_plan(s);
  EXPECT_EQ(p.tiles_of_m_block, (std::vector<int>{1, 1, 2, 2, 3}));
  EXPECT_EQ(p.tiles_per_head, 9);
  EXPECT_TRUE(p.coverage.empty());
  // len_kv = 1000 > len_q: ORT keeps the top-left counts and says so; the corrected partition
  // counts bottom-right: ceil((64(i+1) + 700) / 128), at most 8.
  s.len_kv = 1000;
  EXPECT_EQ(lean_plan(s).tiles_of_m_block, (std::vector<int>{1, 1, 2, 2, 3}));
  EXPECT_EQ(lean_plan(s).coverage.size(), 1u);
  s.m_blocks = LeanMBlocks::kAll;
  EXPECT_EQ(lean_plan(s).tiles_of_m_block, (std::vector<int>{6, 7, 7, 8, 8}));
  // Decode ignores the causal flag (ORT runs seqlen_q == 1 non-causal).
  LeanShape d = shape(1, 2, 2, 1, 300, 128);
  d.causal = true;
  EXPECT_FALSE(lean_plan(d).causal);
}

TEST(LeanSchedule, WhatOrtLeavesOut) {
  // GQA prefill: the host counts h_k = 2 heads, the kernel indexes 8: of 2 batches x 8 heads only
  // the first 2·2 = 4 (batch, head) pairs, batch-major, get tiles (lean_api.cc L211, kernel L72-73).
  LeanShape s = shape(2, 8, 2, 64, 256, 128);
  s.causal = true;
  LeanPlan p = lean_plan(s);
  std::set<std::pair<int, int>> pairs;
  for (const auto& g : p.segments) pairs.insert({g.batch, g.head});
  EXPECT_EQ(pairs, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 2}, {0, 3}}));
  EXPECT_FALSE(p.coverage.empty());
  // GQA decode with 80 query heads per KV head: one m-block (the unfolded len_q), rows past 64 lost.
  LeanShape d = shape(1, 80, 1, 1, 1000, 128);
  p = lean_plan(d);
  EXPECT_EQ(p.num_m_blocks, 1);
  EXPECT_EQ(p.coverage.size(), 1u);
  d.m_blocks = LeanMBlocks::kAll;
  EXPECT_EQ(lean_plan(d).num_m_blocks, 2);
  // MHA decode, the caller's only case: nothing lost.
  EXPECT_TRUE(lean_plan(shape(4, 32, 32, 1, 5000, 128)).coverage.empty());
}

TEST(LeanSchedule, SplitKvPlansAndTheHeuristic) {
  LeanShape s = shape(2, 8, 8, 1, 5000, 128);  // 40 n-tiles per head
  const LeanPlan p = splitkv_plan(s, 3);  // 14 + 14 + 12
  ASSERT_EQ(p.segments.size(), 2u * 8 * 3);
  EXPECT_TRUE(same(p.segments[1], LeanSegment{1, 0, 0, 0, 14, 28, false, false, 1}));
  EXPECT_TRUE(same(p.segments[2], LeanSegment{2, 0, 0, 0, 28, 40, false, true, 2}));
  // FA2 num_splits_heuristic: 16 blocks on 132 SMs, 40 n-blocks: efficiencies of k splits
  // 16k/132 / ceil(16k/132); the best is k = 8 (128/132 = 0.970), and k = 7 (112/132 = 0.848)
  // is the first >= 0.85 · 0.970 = 0.824 (k = 6: 0.727).
  EXPECT_EQ(fa2_num_splits_heuristic(16, 132, 40, 128), 7);
  EXPECT_EQ(fa2_num_splits_heuristic(200, 132, 40, 128), 1);  // >= 0.8·SMs blocks: no split
  // splitkv_plan passes 2·SMs (flash_api.cpp set_params_splitkv: two 128-thread CTAs per SM):
  // heuristic(16, 264, 40, 128) = 14, transcribed from flash_api.cpp into Python and run there
  // (the best eligible efficiency 0.909 at k = 15; k = 14 gives 224/264 = 0.848 >= 0.773).
  EXPECT_EQ(fa2_num_splits_heuristic(16, 264, 40, 128), 14);
  EXPECT_EQ(splitkv_plan(s, 0).num_splits, 14);
}

TEST(LeanSchedule, CsvContract) {
  LeanShape s = shape(1, 4, 4, 1, 300, 128);
  s.sms = 2;
  const std::string csv = plan_csv(lean_plan(s));
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "cta,batch,head,m_block,n_tile_begin,n_tile_end,host,finisher,split");
}

TEST(LeanSchedule, BadShapesAreOneLineErrors) {
  auto bad = [](LeanShape s) {
    try {
      lean_plan(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find('\n') == std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(bad(shape(0, 1, 1, 1, 1, 128)));
  EXPECT_TRUE(bad(shape(1, 6, 4, 1, 1, 128)));
  EXPECT_TRUE(bad(shape(1, 4, 4, 0, 1, 128)));
  EXPECT_TRUE(bad(shape(1, 4, 4, 1, 0, 128)));
  EXPECT_TRUE(bad(shape(1, 4, 4, 1, 10, 96)));
  LeanShape s = shape(1, 4, 4, 1, 10, 128);
  s.sms = 0;
  EXPECT_TRUE(bad(s));
  s.sms = 132;
  s.len_kv_per_batch = {11};
  EXPECT_TRUE(bad(s));
}

}  // namespace
}  // namespace attnsim
