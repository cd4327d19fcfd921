// LeanAttention and split-KV decoding on the pipeline (sim/lean/lean.hpp): partitions that imply
// the same operation order give the same bits; any partition stays within the reassociation bound
// of the unpartitioned run (Appendix D's associativity, by experiment), on random, adversarial and
// real-model inputs; the bound is not vacuous (a broken merge leaves it).
#include "sim/lean/lean.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <omp.h>

#include "experiments/io/dump.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

using simtest::random_input;

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// A random partition of every block of `frame` (its blocks and n-tile counts) into contiguous
// splits: cut points drawn with probability `p_cut` after each n-tile.
LeanPlan random_partition(const LeanPlan& frame, std::mt19937& rng, double p_cut) {
  LeanPlan p = frame;
  p.segments.clear();
  std::bernoulli_distribution cut(p_cut);
  int cta = 0;
  std::map<long long, bool> seen;
  for (const LeanSegment& g : frame.segments) {
    const long long key = ((long long)g.batch * frame.heads + g.head) * frame.num_m_blocks + g.m_block;
    if (seen[key]) continue;
    seen[key] = true;
    const int n = frame.tiles_of(g.batch, g.m_block);
    int begin = 0, split = 0;
    for (int t = 1; t <= n; ++t) {
      if (t == n || cut(rng)) {
        LeanSegment s = g;
        s.cta = cta++;
        s.n_begin = begin;
        s.n_end = t;
        s.host = begin == 0;
        s.finisher = t == n;
        s.split = split++;
        p.segments.push_back(s);
        begin = t;
      }
    }
  }
  p.grid = cta;
  return p;
}

LeanPlan unsplit(const LeanPlan& frame) {
  std::mt19937 rng(0);
  return random_partition(frame, rng, 0.0);
}

TEST(Lean, OneSplitIsThePipelineBitForBit) {
  for (const bool causal : {false, true}) {
    AttentionShape s{2, 8, 2, causal ? 150 : 1, 700, 128, 128};
    const AttentionInput in = random_input(s, causal, 5);
    for (const int fast : {0, 1}) {
      LeanOptions o;
      o.style = SplitStyle::kFlashDecoding;
      o.splits = 1;
      o.fast_math = fast;
      const LeanResult r = lean_attention(in, o);
      const PipelineResult ref = run_pipeline(in, lean_pipeline(o, s.head_dim));
      EXPECT_TRUE(same_bits(r.o, ref.o)) << "causal " << causal << " fast " << fast;
    }
  }
}

TEST(Lean, PartitionsWithOneOrderGiveOneResult) {
  AttentionShape s{3, 16, 4, 1, 1500, 128, 128};
  const AttentionInput in = random_input(s, false, 6);
  LeanOptions o;
  const LeanResult a = lean_attention(in, o, true);
  ASSERT_GT(a.partials.size(), 0u);
  // A ragged batch whose lengths are all len_kv is the same problem.
  LeanOptions rag = o;
  rag.len_kv_per_batch = {1500, 1500, 1500};
  EXPECT_TRUE(same_bits(a.o, lean_attention(in, rag).o));
  // The same plan merged as FlashDecoding's combine in the same build: the same formulas.
  LeanOptions fd = o;
  fd.style = SplitStyle::kFlashDecoding;
  fd.fast_math = 0;
  EXPECT_TRUE(same_bits(a.o, run_partition(in, fd, a.plan).o));
  // Renumbering the CTAs changes nothing.
  LeanPlan renum = a.plan;
  for (auto& g : renum.segments) g.cta = renum.grid - 1 - g.cta;
  EXPECT_TRUE(same_bits(a.o, run_partition(in, o, renum).o));
  // A different SM count with the same cut points (total tiles <= 4·SMs: the grid rule does not
  // read the SM count).
  LeanOptions o2 = o;
  o2.sms = 100;
  const LeanResult b = lean_attention(in, o2);
  ASSERT_EQ(b.plan.grid, a.plan.grid);
  EXPECT_TRUE(same_bits(a.o, b.o));
}

struct Case {
  std::string name;
  AttentionInput in;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"normal decode gqa", random_input({2, 16, 4, 1, 2000, 128, 128}, false, 7)});
  c.push_back({"normal prefill causal", random_input({1, 2, 2, 130, 700, 64, 64}, true, 8)});
  // Adversarial: one key per head with a huge score (the max jumps between splits), a large-V
  // channel, and scores spread widely (sigma 4).
  AttentionInput adv = random_input({1, 8, 8, 1, 2500, 128, 128}, false, 9, 4.0);
  for (int h = 0; h < 8; ++h) {
    const std::size_t key = std::size_t(h) * 2500 + 1777 + h * 31;
    for (int d = 0; d < 128; ++d) adv.k[key * 128 + d] = adv.q[std::size_t(h) * 128 + d] * 3.0f;
  }
  for (std::size_t j = 0; j < adv.v.size(); j += 128) adv.v[j] *= 1000.0f;
  c.push_back({"adversarial", adv});
  // Real: SmolLM2 layer 15 (d = 64, GQA 9:3), decode of its last token over all 1,024 keys.
  const AttentionInput full = read_attention_dump(
      std::string(ATTNSIM_SOURCE_DIR) + "/data/real/smollm2_gpl3.h5", "layer_15/", false);
  AttentionInput real = full;
  real.shape.len_q = 1;
  real.causal = false;
  real.q.clear();
  const int lq = full.shape.len_q, d = full.shape.head_dim;
  for (int h = 0; h < full.shape.heads_q; ++h)
    real.q.insert(real.q.end(), full.q.begin() + (std::ptrdiff_t(h) * lq + lq - 1) * d,
                  full.q.begin() + (std::ptrdiff_t(h) * lq + lq) * d);
  c.push_back({"smollm2 layer 15 decode", real});
  return c;
}

TEST(Lean, AnyPartitionStaysWithinTheReassociationBound) {
  std::mt19937 rng(14);
  double worst = 0;
  long long checked = 0;
  for (const Case& c : cases()) {
    // The kernel's configuration, then the exact functions and Algorithm 2's merge on CUDA-core
    // FP32 products (the HMMA model is the slow part; the reduction is what is under test).
    struct Config {
      LeanExp e;
      LeanReduce red;
      DotModel::Kind product;
    };
    for (const Config& cf : {Config{LeanExp::kApprox, LeanReduce::kKernel, DotModel::kMma},
                             Config{LeanExp::kExact, LeanReduce::kKernel, DotModel::kFp32},
                             Config{LeanExp::kApprox, LeanReduce::kPaper, DotModel::kFp32}}) {
      {
        LeanOptions o;
        o.exp = cf.e;
        o.reduce = cf.red;
        o.product.kind = cf.product;
        o.out_fp32 = true;
        o.m_blocks = LeanMBlocks::kAll;  // the causal prefill case has len_q != len_kv
        const LeanShape ls = lean_shape(c.in, o);
        const LeanPlan frame = lean_plan(ls);
        const LeanPlan whole = unsplit(frame);
        const LeanResult ref = run_partition(c.in, o, whole);
        const std::vector<double> b_ref = reassociation_bound(c.in, o, whole);
        std::vector<LeanPlan> plans{frame};
        for (double pc : {0.1, 1.0}) plans.push_back(random_partition(frame, rng, pc));
        for (const LeanPlan& pl : plans) {
          const LeanResult r = run_partition(c.in, o, pl);
          const std::vector<double> b = reassociation_bound(c.in, o, pl);
          for (std::size_t i = 0; i < r.o.size(); ++i) {
            const double diff = std::fabs(r.o[i] - ref.o[i]), lim = b[i] + b_ref[i];
            ASSERT_LE(diff, lim) << c.name << " element " << i << " " << r.o[i] << " vs "
                                 << ref.o[i];
            if (lim > 0) worst = std::max(worst, diff / lim);
            ++checked;
          }
        }
      }
    }
  }
  // The bound is a bound, not a tautology: the largest difference uses a visible part of it.
  std::printf("reassociation: %lld elements, max |diff| / bound = %.3g\n", checked, worst);
  EXPECT_GT(worst, 1e-3);
}

TEST(Lean, ABrokenMergeLeavesTheBound) {
  // The merge that forgets the LSE normalization (O = Σ e^(lse_i − lse_max)·O_i, no division by
  // the sum: a bug a port can make) leaves the bound on most outputs: the check can fail.
  AttentionInput in = random_input({1, 8, 8, 1, 2000, 128, 128}, false, 10);
  LeanOptions o;
  o.out_fp32 = true;
  o.exp = LeanExp::kExact;
  const LeanPlan frame = lean_plan(lean_shape(in, o));
  const LeanResult a = run_partition(in, o, frame, true);
  const LeanResult ref = run_partition(in, o, unsplit(frame));
  const std::vector<double> b1 = reassociation_bound(in, o, frame),
                            b2 = reassociation_bound(in, o, unsplit(frame));
  ASSERT_FALSE(a.partials.empty());
  std::vector<double> broken(a.o.size(), 0.0), lse_max(8, -1e300);
  for (const LeanPartial& p : a.partials) lse_max[std::size_t(p.head)] = std::max(lse_max[std::size_t(p.head)], double(p.lse[0]));
  for (const LeanPartial& p : a.partials)
    for (int c = 0; c < 128; ++c)
      broken[std::size_t(p.head) * 128 + c] +=
          std::exp(double(p.lse[0]) - lse_max[std::size_t(p.head)]) * double(p.o[std::size_t(c)]);
  int outside = 0, inside_ok = 0;
  for (std::size_t i = 0; i < broken.size(); ++i) {
    if (std::fabs(broken[i] - ref.o[i]) > b1[i] + b2[i]) ++outside;
    if (std::fabs(a.o[i] - ref.o[i]) <= b1[i] + b2[i]) ++inside_ok;
  }
  EXPECT_EQ(inside_ok, int(broken.size()));
  EXPECT_GT(outside, int(broken.size()) * 9 / 10);
}

TEST(Lean, ResultsDoNotDependOnTheThreadCount) {
  const AttentionInput in = random_input({2, 16, 4, 1, 1500, 64, 64}, false, 11);
  for (const SplitStyle st : {SplitStyle::kLean, SplitStyle::kFlashInfer}) {
    LeanOptions o;
    o.style = st;
    o.splits = st == SplitStyle::kLean ? 0 : 5;
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    const LeanResult one = lean_attention(in, o, true);
    omp_set_num_threads(std::max(2, before));
    const LeanResult many = lean_attention(in, o, true);
    omp_set_num_threads(before);
    EXPECT_TRUE(same_bits(one.o, many.o));
    ASSERT_EQ(one.partials.size(), many.partials.size());
    for (std::size_t i = 0; i < one.partials.size(); ++i)
      EXPECT_EQ(std::memcmp(one.partials[i].o.data(), many.partials[i].o.data(),
                            one.partials[i].o.size() * sizeof(float)),
                0);
  }
}

TEST(Lean, BadOptionsAreOneLineErrors) {
  AttentionInput in = random_input({1, 4, 4, 1, 100, 96, 96}, false, 1);
  LeanOptions o;
  EXPECT_THROW(lean_attention(in, o), std::invalid_argument);  // head dim 96
  in = random_input({1, 4, 4, 1, 100, 128, 128}, false, 1);
  o.dtype = Encoding::kE4m3fn;
  EXPECT_THROW(lean_attention(in, o), std::invalid_argument);
  o.dtype = Encoding::kFp16;
  o.style = SplitStyle::kFlashInfer;
  o.reduce = LeanReduce::kPaper;
  EXPECT_THROW(lean_attention(in, o), std::invalid_argument);
  LeanPlan bad = lean_plan(lean_shape(in, LeanOptions{}));
  bad.segments.pop_back();
  EXPECT_THROW(run_partition(in, LeanOptions{}, bad), std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
