// experiments/analysis/invariance.hpp: situations, the launch heuristics' thresholds (derived
// here from the host code's rules by hand, not from the functions under test), the target run
// inside a launch against the same sequence run inside a real dense batch, and the computed
// answer agreeing with the schedules' prediction.
#include "experiments/analysis/invariance.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/io/synthetic.hpp"
#include "experiments/methods/methods.hpp"

namespace attnsim {
namespace {

std::string item(const KernelSchedule& k, const std::string& key) {
  const ScheduleItem* i = k.find(key);
  return i ? i->value : "-";
}

TEST(Invariance, ParsesSituations) {
  const std::vector<LaunchSeq> s = parse_situation("1:500 + 1:300x3+9:9");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], (LaunchSeq{1, 500}));
  EXPECT_EQ(s[3], (LaunchSeq{1, 300}));
  EXPECT_EQ(s[4], (LaunchSeq{9, 9}));
  EXPECT_EQ(parse_situation("1:4096x16").size(), 16u);
  EXPECT_EQ(parse_situation("1:500+1:300x0").size(), 1u);  // x0: no neighbours
  Launch l;
  l.seqs = s;
  EXPECT_EQ(l.describe(), "1:500+1:300x3+9:9");
  for (const char* bad : {"", "1", "1:", ":4", "a:4", "5:4", "1:4x0", "1:4+", "1:4x-1", "1:4xx2",
                          "1:99999999999", "1:4x2000000", "0:4"})
    EXPECT_THROW(parse_situation(bad), UsageError) << bad;
  // '*' marks the target where it is not the first.
  const Launch mid = parse_launch("1:300x2+*1:4096+1:10");
  EXPECT_EQ(mid.target_index, 2);
  EXPECT_EQ(mid.target(), (LaunchSeq{1, 4096}));
  EXPECT_EQ(mid.describe(), "1:300x2+*1:4096+1:10");
  EXPECT_EQ(parse_launch("1:4096x3").target_index, 0);
  EXPECT_THROW(parse_launch("*1:4+*1:5"), UsageError);
  EXPECT_THROW(parse_launch("1:4+*1:5x0"), UsageError);
  EXPECT_EQ(substitute_n("1:4096x{n}+{n}:{n}", 7), "1:4096x7+7:7");
  EXPECT_EQ(parse_range("3..6"), (std::vector<int>{3, 4, 5, 6}));
  EXPECT_EQ(parse_range("1,8, 64"), (std::vector<int>{1, 8, 64}));
  for (const char* bad : {"", "6..3", "a..b", "1,,2", "-1..3"})
    EXPECT_THROW(parse_range(bad), UsageError) << bad;
}

// FA2 (PyTorch's flash backend), GQA 32/8, d 128, one 4,096-key decode query per sequence:
// mha_fwd swaps the 4 query heads of a group into rows (1 m block per KV head), so the heuristic
// counts batch x 8 blocks against 2 x 132 SMs and stops splitting once 8·B >= 0.8 x 264 = 211.2,
// i.e. from B = 27; below it the split kernel runs with 64 x 128 tiles.
TEST(Invariance, Fa2StopsSplittingADecodeAtTheHeuristicsThreshold) {
  const MethodConfig m = parse_method("sdpa:backend=flash,dtype=bf16");
  const InvarianceProblem p = invariance_problem(32, 8, 128);
  for (int b = 1; b <= 64; ++b) {
    const KernelSchedule k = method_schedule(m, p, parse_launch("1:4096x" + std::to_string(b)));
    const int splits = std::stoi(item(k, "splits"));
    if (b >= 27) {
      EXPECT_EQ(splits, 1) << b;
      EXPECT_EQ(item(k, "tile"), "128x64") << b;
    } else {
      EXPECT_GT(splits, 1) << b;
      EXPECT_EQ(item(k, "tile"), "64x128") << b;
    }
  }
  // Batch 1: 8 blocks, 32 n blocks of 128 keys: 32 splits fill 256 of 264 slots (efficiency
  // 0.97, the first k within 85% of the best).
  EXPECT_EQ(item(method_schedule(m, p, parse_launch("1:4096")), "splits"), "32");
  // A GPU with fewer SMs splits less: 8 blocks >= 0.8 x 2 x 4.
  InvarianceProblem small = p;
  small.sms = 4;
  EXPECT_EQ(item(method_schedule(m, small, parse_launch("1:4096")), "splits"), "1");
  // SDPA takes one dense shape.
  EXPECT_THROW(method_schedule(m, p, parse_launch("1:4096+1:100")), UsageError);
}

// vLLM's launcher: the 3D kernel while max_seqlen_q <= 1 and num_seqs <= 128 // heads_kv (64
// for 2 KV heads), the 2D kernel otherwise and always under VLLM_BATCH_INVARIANT.
TEST(Invariance, VllmTakesThe2dKernelAboveTheThresholdOrWithAPrefillNeighbour) {
  const MethodConfig m = parse_method("vllm_triton:dtype=bf16");
  const InvarianceProblem p = invariance_problem(8, 2, 128, true);
  auto path = [&](const std::string& s) { return item(method_schedule(m, p, parse_launch(s)), "path"); };
  EXPECT_EQ(path("1:500"), "3d");
  EXPECT_EQ(path("1:500+1:300x63"), "3d");
  EXPECT_EQ(path("1:500+1:300x64"), "2d");
  EXPECT_EQ(path("1:500+1:300x3+1:1"), "3d");
  EXPECT_EQ(path("1:500+1:300x3+2:2"), "2d");
  EXPECT_EQ(path("500:500"), "2d");
  const MethodConfig bi = parse_method("vllm_triton:dtype=bf16,batch_invariant=1");
  EXPECT_EQ(item(method_schedule(bi, p, parse_launch("1:500")), "path"), "2d");
  // 3D: 16 segments of cdiv(500, 16 x 16) = 2 tiles of 16 keys.
  EXPECT_EQ(item(method_schedule(m, p, parse_launch("1:500")), "segments"), "16 of 2 tiles");
}

// FlexAttention's decode template: SPLIT_KV = max(2 x (132 // (B x heads_kv)), 1) CTAs, but
// without a block mask split 0 holds every key: the same arithmetic for every batch.
TEST(Invariance, FlexDecodeHasOneArithmeticForEveryBatch) {
  const MethodConfig m = parse_method("flex:dtype=bf16");
  const InvarianceProblem p = invariance_problem(8, 8, 128);
  const KernelSchedule k1 = method_schedule(m, p, parse_launch("1:1000"));
  EXPECT_EQ(item(k1, "split_kv_ctas"), "32");  // 2 x (132 // 8)
  EXPECT_EQ(item(method_schedule(m, p, parse_launch("1:1000x9")), "split_kv_ctas"), "2");
  EXPECT_EQ(item(method_schedule(m, p, parse_launch("1:1000x17")), "split_kv_ctas"), "1");
  const InvarianceReport r = invariance(m, p, "1:1000", "1:1000x64", nullptr);
  EXPECT_TRUE(r.predicted_identical);
  EXPECT_EQ(r.rows, 8);
}

// The target run inside a launch of B sequences (AttentionInput::launch) equals the same
// sequence run as element 0 of a real dense batch of B sequences: the launch only moves the
// schedule, and the dense batch path takes it from its own shape (LeanAttention's stream-K
// partition and FA2-style split-KV included: their launch path runs a zero-valued batch).
TEST(Invariance, TargetInALaunchEqualsTheSameSequenceInADenseBatch) {
  for (const char* method : {"sdpa:backend=flash,dtype=bf16", "flex:dtype=fp16",
                             "lean:mblocks=all,dtype=bf16", "splitkv:dtype=fp16"}) {
    const MethodConfig m = parse_method(method);
    for (int b : {1, 3, 30}) {
      const AttentionInput batch = make_synthetic(
          "normal:b=" + std::to_string(b) + ",hq=8,hkv=2,nq=1,nkv=700,d=64,seed=11");
      const MethodOutput dense = m.run(batch);
      AttentionInput t = batch;
      t.shape.batch = 1;
      t.q.resize(t.shape.q_size());
      t.k.resize(t.shape.k_size());
      t.v.resize(t.shape.v_size());
      auto l = std::make_shared<Launch>();
      l->seqs.assign(std::size_t(b), LaunchSeq{1, 700});
      t.launch = l;
      const MethodOutput one = m.run(t);
      ASSERT_EQ(one.o.size(), std::size_t(8 * 64));
      for (std::size_t i = 0; i < one.o.size(); ++i)
        ASSERT_EQ(one.o[i], dense.o[i]) << method << " b " << b << " at " << i;
    }
  }
}

// Computed answers: the same arithmetic schedule gives bit-identical rows; a different split
// count gives different rows somewhere. The rows compared are those seeing the same keys.
TEST(Invariance, ComputedRowsFollowTheSchedule) {
  const MethodConfig m = parse_method("sdpa:backend=flash,dtype=bf16");
  const InvarianceProblem p = invariance_problem(32, 8, 128);
  TargetData d{make_synthetic("normal:hq=32,hkv=8,nq=4096,nkv=4096,d=128,seed=5")};
  const InvarianceReport same = invariance(m, p, "1:4096x27", "1:4096x64", &d);
  EXPECT_TRUE(same.predicted_identical);
  EXPECT_EQ(same.identical_rows, same.rows);
  EXPECT_EQ(same.rows, 32);
  EXPECT_EQ(same.first_position, 4095);
  const InvarianceReport split = invariance(m, p, "1:4096", "1:4096x27", &d);
  EXPECT_FALSE(split.predicted_identical);
  EXPECT_LT(split.identical_rows, split.rows);
  EXPECT_GE(split.first_diverging_position, 0);
  EXPECT_GT(split.max_err_a, 0.0);
  // Causal prefill vs a chunk of it (vLLM, 2D both): rows 200..399 see the same keys.
  const MethodConfig v = parse_method("vllm_triton:dtype=bf16");
  TargetData dv{make_synthetic("normal:hq=8,hkv=2,nq=500,nkv=500,d=128,seed=6")};
  const InvarianceReport chunk = invariance(v, invariance_problem(8, 2, 128, true), "500:500", "200:400", &dv);
  EXPECT_TRUE(chunk.predicted_identical);
  EXPECT_EQ(chunk.first_position, 200);
  EXPECT_EQ(chunk.positions, 200);
  EXPECT_EQ(chunk.identical_rows, chunk.rows);
}

// LeanAttention's stream-K partition deals the launch's n-tiles to the CTAs: a 4,096-key decode
// (8 KV heads x 32 tiles) keeps its cuts while the launch holds <= 2 tiles per CTA and is cut
// otherwise from 3 sequences like it on.
TEST(Invariance, LeanPartitionMovesWithTheLaunchsTiles) {
  const MethodConfig m = parse_method("lean:mblocks=all");
  const InvarianceProblem p = invariance_problem(32, 8, 128);
  const std::vector<int> ns{1, 2, 3, 8};
  const std::vector<InvarianceReport> t = invariance_table(m, p, "1:4096", "1:4096x{n}", ns, nullptr);
  EXPECT_TRUE(t[0].predicted_identical);
  EXPECT_TRUE(t[1].predicted_identical);
  EXPECT_FALSE(t[2].predicted_identical);
  EXPECT_FALSE(t[3].predicted_identical);
  // A ragged launch: a long neighbour moves the target's cuts, a short one does not.
  EXPECT_TRUE(invariance(m, p, "1:4096", "1:4096+1:1000", nullptr).predicted_identical);
  EXPECT_FALSE(invariance(m, p, "1:4096", "1:4096+1:16384", nullptr).predicted_identical);
  // Stream-K deals the tiles in launch order: the same launch with the target elsewhere cuts it
  // elsewhere, and computing it there equals the dense batch's element at that place.
  EXPECT_FALSE(invariance(m, p, "1:4096x3", "1:4096+*1:4096+1:4096", nullptr).predicted_identical);
  {
    const MethodConfig l = parse_method("lean:mblocks=all,dtype=bf16");
    const AttentionInput batch =
        make_synthetic("normal:b=3,hq=8,hkv=2,nq=1,nkv=4096,d=64,seed=12");
    const MethodOutput dense = l.run(batch);
    AttentionInput t = batch;
    t.shape.batch = 1;
    const std::size_t nq = t.shape.q_size(), nk = t.shape.k_size();
    t.q.assign(batch.q.begin() + std::ptrdiff_t(nq), batch.q.begin() + std::ptrdiff_t(2 * nq));
    t.k.assign(batch.k.begin() + std::ptrdiff_t(nk), batch.k.begin() + std::ptrdiff_t(2 * nk));
    t.v.assign(batch.v.begin() + std::ptrdiff_t(nk), batch.v.begin() + std::ptrdiff_t(2 * nk));
    auto launch = std::make_shared<Launch>(parse_launch("1:4096+*1:4096+1:4096"));
    t.launch = launch;
    const MethodOutput mid = l.run(t);
    const std::size_t no = std::size_t(8 * 64);
    for (std::size_t i = 0; i < no; ++i) ASSERT_EQ(mid.o[i], dense.o[no + i]) << i;
  }
  // The launch's SM count and lean's own sms option must agree.
  InvarianceProblem other = p;
  other.sms = 114;
  EXPECT_THROW(invariance(m, other, "1:4096", "1:4096x2", nullptr), UsageError);
}

TEST(Invariance, RefusesWhatCannotBeCompared) {
  const MethodConfig m = parse_method("sdpa:backend=flash,dtype=bf16");
  // Non-causal rows of different caches see different keys.
  EXPECT_THROW(invariance(m, invariance_problem(8, 8, 64), "1:100", "1:200", nullptr), UsageError);
  // A top-left causal kernel's non-square target.
  EXPECT_THROW(invariance(parse_method("sdpa:backend=efficient,dtype=bf16"),
                          invariance_problem(8, 8, 64, true), "16:100", "16:100x2", nullptr),
               UsageError);
  // A method without a schedule model.
  EXPECT_THROW(invariance(parse_method("flash"), invariance_problem(8, 8, 64), "1:100", "1:100x2", nullptr),
               UsageError);
  // Data too short for a situation.
  TargetData d{make_synthetic("normal:hq=8,hkv=8,nq=100,nkv=100,d=64,seed=1")};
  EXPECT_THROW(invariance(m, invariance_problem(8, 8, 64), "1:200", "1:200x2", &d), UsageError);
}

}  // namespace
}  // namespace attnsim
