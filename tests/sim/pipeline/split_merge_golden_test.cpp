// Split schedules against FP64 golden: one tile's KV blocks run as uneven segments through
// attend_tile and merged (merge_row, in reverse order as a tree reduction might) reproduce
// attention in an FP64 state to FP64 accuracy and in an FP32 state to FP32 accuracy.
#include <gtest/gtest.h>

#include <cmath>

#include "numerics/metrics.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

template <class T>
std::vector<double> split_and_merge(const AttentionInput& in, const Pipeline& p,
                                    const std::vector<int>& cuts) {
  const AttentionShape& s = in.shape;
  const PreparedInput prep = prepare(in, p);
  const ExpConstants<T> kc = exp_constants<T>(p, prep.sm_scale);
  const ExpModel<T> em = exp_model<T>(p.exp, p.softmax.base, kc.c);
  std::vector<double> o(s.o_size());
  TileWorkspacePtr ws = make_workspace();
  for (int h = 0; h < s.heads_q; ++h) {
    const Tile t{0, h, 0, s.len_q};
    TileState<T> total;
    total.reset(t.rows, s.head_dim_v);
    for (std::size_t c = cuts.size() - 1; c-- > 0;) {
      TileState<T> part;
      part.reset(t.rows, s.head_dim_v);
      attend_tile(prep, p, t, cuts[c], cuts[c + 1], part, *ws);
      for (int i = 0; i < t.rows; ++i) merge_row(total, i, part, i, p.softmax.row_sum, em);
    }
    std::vector<double> lse(std::size_t(t.rows));
    finish_tile(prep, p, t, total, o.data() + std::size_t(h) * s.len_q * s.head_dim_v, lse.data());
  }
  return o;
}

TEST(SplitMergeVsGolden, UnevenSegmentsReproduceAttention) {
  const AttentionInput in = simtest::random_input({1, 2, 1, 24, 100, 64, 32}, true, 21);
  const std::vector<double> g = golden_attention_ref(in);
  Pipeline p;
  p.tile.block_q = 24;
  p.tile.block_kv = 7;  // 15 blocks, the last of 2 keys
  p.softmax.row_sum = RowSum::kSingle;
  const std::vector<int> cuts{0, 2, 6, 7, 11, 15};  // one segment of a single block
  Pipeline d = p;
  d.softmax.state = StateType::kFp64;
  d.qk.dot = d.pv.dot = DotModel{DotModel::kFp64};
  d.p.enc = Encoding::kFp64;
  d.exp.fn = ExpFn::kExact;
  d.out.enc = Encoding::kFp64;
  const double e64 = error_metrics(split_and_merge<double>(in, d, cuts), g).rel_fro;
  const double e32 = error_metrics(split_and_merge<float>(in, p, cuts), g).rel_fro;
  std::printf("[ split-merge ] fp64 %.3e  fp32 %.3e\n", e64, e32);
  EXPECT_LT(e64, 1e-14);
  EXPECT_LT(e32, 1e-6);
  EXPECT_GT(e32, 1e-9);
}

}  // namespace
}  // namespace attnsim
