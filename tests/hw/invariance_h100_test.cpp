// Batch invariance against what the H100 recorded. The sweeps of data/hw/h100/schedule/
// (cuda_check/schedule/record_invariance.py): one target sequence in launches of 1 to 72
// sequences and in prefill and decode form, through PyTorch SDPA's flash, efficient and cuDNN
// backends, FlexAttention and vLLM's Triton unified attention; and the pairs of
// data/hw/h100/serving/ in which one sequence ran in two launches. vLLM's unified attention: a 500-key decode first in
// a batch of 4 (the 3D kernel) and of 70 (2D), and a 200-token sequence's prefill against the
// decode step of its last token; FlexAttention's decode template: the first of 1 and of 16
// sequences. Each target is computed inside its situation (run_in_situation: the method on the
// target alone with the launch's schedule) and must equal the recorded rows bit for bit; the
// identical-row count `attnsim invariance` computes must equal the recorded one, and a
// schedule-only "identical" must never meet different recorded bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "formats/encoding.hpp"
#include "tests/hw/invariance_sweeps.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim {
namespace {

const std::string kServing = ATTNSIM_DATA_DIR "/hw/h100/serving/";

// A token-major lattice tensor [tokens, heads, d] (cuda_check/serving/serving_cases.py) as the
// head-major [heads, first .. first + n, d] the target's data holds.
std::vector<float> head_major(int seed, int tensor, int heads, int d, int first, int n) {
  std::vector<float> r(std::size_t(heads) * n * d);
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < d; ++j)
        r[(std::size_t(h) * n + t) * d + j] = hwtest::lattice_value(
            std::uint64_t(seed), std::uint64_t(tensor),
            (std::uint64_t(first + t) * heads + h) * d + j);
  return r;
}

struct Side {
  std::string situation, file, group;
  int token0 = 0;        // the target's first row in the recorded o
  bool token_major = true;  // o [tokens, heads, d] (vLLM) or [batch, heads, tokens, d] (flex)
};

struct Pair {
  std::string method;
  int hq, hkv, d;
  bool causal;
  TargetData data;
  Side a, b;
};

// The recorded rows of a side: [heads][len_q][d] as 16-bit patterns.
std::vector<std::uint32_t> recorded(const Side& s, int hq, int lq, int d) {
  const H5Reader r(kServing + s.file);
  const std::vector<double> o = r.read_f64(s.group + "/o");
  std::vector<std::uint32_t> out(std::size_t(hq) * lq * d);
  for (int h = 0; h < hq; ++h)
    for (int i = 0; i < lq; ++i)
      for (int j = 0; j < d; ++j) {
        const std::size_t src = s.token_major
                                    ? (std::size_t(s.token0 + i) * hq + h) * d + j
                                    : (std::size_t(h) * lq + i) * d + j;  // batch 0
        out[(std::size_t(h) * lq + i) * d + j] = std::uint32_t(o[src]);
      }
  return out;
}

// The recorded launch's first sequence as a target: its len_q queries (the first rows of the
// query lattice) over its len_kv keys, from the token-major lattices of `seed`.
TargetData token_major_target(int seed, int hq, int hkv, int d, int len_q, int len_kv) {
  TargetData t;
  AttentionInput& in = t.data;
  in.shape = AttentionShape{1, hq, hkv, len_q, len_kv, d, d};
  in.q = head_major(seed, 0, hq, d, 0, len_q);
  in.k = head_major(seed, 1, hkv, d, 0, len_kv);
  in.v = head_major(seed, 2, hkv, d, 0, len_kv);
  return t;
}

std::vector<Pair> pairs() {
  std::vector<Pair> r;
  {
    // bi_decode_batch4 / batch70 (seed 220): sequence 0 has 500 keys, its one query first.
    Pair p{"vllm_triton:dtype=bf16", 8, 2, 128, true, {}, {}, {}};
    p.data = token_major_target(220, 8, 2, 128, 1, 500);
    std::string b4 = "1:500", b70 = "1:500";
    for (int i = 0; i < 69; ++i) {
      const std::string n = "+1:" + std::to_string(100 + 13 * i);
      if (i < 3) b4 += n;
      b70 += n;
    }
    p.a = {b4, "vllm_triton_h100.h5", "bi_decode_batch4_bf16_d128", 0};
    p.b = {b70, "vllm_triton_h100.h5", "bi_decode_batch70_bf16_d128", 0};
    r.push_back(p);
  }
  {
    // pd_prefill200 / pd_decode200 (seed 209): one 200-token sequence; the decode step's query
    // is the prefill's last row.
    Pair p{"vllm_triton:dtype=bf16", 8, 2, 128, true, {}, {}, {}};
    p.data = token_major_target(209, 8, 2, 128, 200, 200);
    p.a = {"200:200", "vllm_triton_h100.h5", "pd_prefill200_bf16_d128", 0};
    p.b = {"1:200", "vllm_triton_h100.h5", "pd_decode200_bf16_d128", 0};
    r.push_back(p);
  }
  {
    // bi_dec1000_b1 / b16 (seed 102): [B, 8, 1 | 1000, 128] lattices, batch 0 first in each.
    Pair p{"flex:dtype=bf16", 8, 8, 128, false, {}, {}, {}};
    AttentionInput& in = p.data.data;
    in.shape = AttentionShape{1, 8, 8, 1, 1000, 128, 128};
    hwtest::fill_lattice(in, 102, 0);
    p.a = {"1:1000", "flex_h100.h5", "bi_dec1000_b1_bf16_d128", 0, false};
    p.b = {"1:1000x16", "flex_h100.h5", "bi_dec1000_b16_bf16_d128", 0, false};
    r.push_back(p);
  }
  return r;
}

TEST(InvarianceH100, RecordedPairsReproducedAndTheirIdentityComputedExactly) {
  for (const Pair& p : pairs()) {
    const MethodConfig m = parse_method(p.method);
    const InvarianceProblem prob = invariance_problem(p.hq, p.hkv, p.d, p.causal);
    std::vector<std::uint32_t> sim[2], rec[2];
    const Side* sides[2] = {&p.a, &p.b};
    for (int s = 0; s < 2; ++s) {
      const int lq = hwtest::target_len_q(sides[s]->situation);
      const MethodOutput o = run_in_situation(m, prob, sides[s]->situation, p.data);
      for (double x : o.o) sim[s].push_back(encode_float_bits(Encoding::kBf16, float(x), kCudaRn));
      rec[s] = recorded(*sides[s], p.hq, lq, p.d);
      ASSERT_EQ(sim[s].size(), rec[s].size()) << sides[s]->group;
      std::size_t same = 0;
      for (std::size_t i = 0; i < sim[s].size(); ++i) same += sim[s][i] == rec[s][i];
      EXPECT_EQ(same, sim[s].size()) << sides[s]->group << " in " << sides[s]->situation;
    }
    // Negative control: where the recorded rows differ, the other situation's schedule does not
    // reproduce them (the launch, not the data, makes the difference).
    if (rec[0].size() == rec[1].size() && rec[0] != rec[1]) {
      EXPECT_NE(sim[0], rec[1]) << p.a.group;
      EXPECT_NE(sim[1], rec[0]) << p.b.group;
    }
    // The recorded identity of the compared rows (the target's common positions).
    const InvarianceReport r = invariance(m, prob, p.a.situation, p.b.situation, &p.data);
    const int qa = hwtest::target_len_q(p.a.situation), qb = hwtest::target_len_q(p.b.situation);
    const int ka = int(p.data.data.shape.len_kv), kb = ka;
    int rec_identical = 0;
    for (int h = 0; h < p.hq; ++h)
      for (int x = r.first_position; x < r.first_position + r.positions; ++x) {
        bool same = true;
        for (int j = 0; j < p.d; ++j)
          same = same && rec[0][(std::size_t(h) * qa + (x - (ka - qa))) * p.d + j] ==
                             rec[1][(std::size_t(h) * qb + (x - (kb - qb))) * p.d + j];
        rec_identical += same;
      }
    EXPECT_EQ(r.identical_rows, rec_identical) << p.a.group << " vs " << p.b.group;
    if (r.predicted_identical) {
      EXPECT_EQ(rec_identical, r.rows) << p.a.group << " vs " << p.b.group;
    }
    std::printf("%s vs %s: %d/%d rows identical on the H100, predicted %s\n", p.a.group.c_str(),
                p.b.group.c_str(), rec_identical, r.rows,
                r.predicted_identical ? "identical" : "may differ");
  }
}

// The schedule sweeps: one decode sweep of each family that splits or switches kernels with the
// batch (FA2's num_splits, FlexAttention's decode template, vLLM's 2D/3D paths) here; every
// sweep, FA3's included, in invariance_h100_long_test.cpp.
TEST(InvarianceH100, ScheduleSweepsOfDecodeBatchesBitForBitAndTheIdentityTableExact) {
  hwtest::check_sweeps({"sdpa_flash_dec4096_fp16_d64", "flex_dec1000_bf16_d128",
                        "vllm_dec500_neighbour_bf16_d128"});
}

// Our LeanAttention decode kernel's ragged recordings (data/hw/h100/lean/lean_h100.h5: batches of
// sequences with their own context lengths, one stream-K partition over all of them): every
// sequence computed alone inside the launch of all (`--launch` with the target marked in place:
// the partition deals the tiles in launch order) equals its recorded rows bit for bit; the
// same sequence alone (its own launch) does not always, which is the batch dependence.
TEST(InvarianceH100, LeanRaggedSequencesBitForBitInsideTheirLaunch) {
  const H5Reader r(ATTNSIM_DATA_DIR "/hw/h100/lean/lean_h100.h5");
  int checked = 0, moved = 0;
  for (const std::string& c : r.members("/")) {
    if (!r.exists(c + "/lk")) continue;
    const std::vector<std::int64_t> lk = r.read_i64(c + "/lk");
    const int B = int(r.attr_f64(c, "batch")), HQ = int(r.attr_f64(c, "hq")),
              HK = int(r.attr_f64(c, "hk")), D = int(r.attr_f64(c, "d")),
              LK = int(r.attr_f64(c, "lk_max")), sms = int(r.attr_f64(c, "num_sms"));
    if (std::all_of(lk.begin(), lk.end(), [&](std::int64_t x) { return x == LK; })) continue;
    const std::string dt = r.attr_string(c, "dtype");
    const Encoding e = dt == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
    const std::vector<std::int64_t> q = r.read_i64(c + "/q"), k = r.read_i64(c + "/k"),
                                    v = r.read_i64(c + "/v"), o = r.read_i64(c + "/lean/o");
    const MethodConfig m =
        parse_method("lean:dtype=" + dt + ",mblocks=all,sms=" + std::to_string(sms));
    for (int b = 0; b < B; ++b) {
      AttentionInput in;
      in.shape = AttentionShape{1, HQ, HK, 1, int(lk[std::size_t(b)]), D, D};
      in.dtype = dt == "bf16" ? "bfloat16" : "float16";
      for (int i = 0; i < HQ * D; ++i)
        in.q.push_back(decode_float_bits(e, std::uint32_t(q[std::size_t(b) * HQ * D + i])));
      for (int h = 0; h < HK; ++h)
        for (int t = 0; t < lk[std::size_t(b)]; ++t)
          for (int j = 0; j < D; ++j) {
            const std::size_t at = ((std::size_t(b) * HK + h) * LK + t) * D + j;
            in.k.push_back(decode_float_bits(e, std::uint32_t(k[at])));
            in.v.push_back(decode_float_bits(e, std::uint32_t(v[at])));
          }
      auto l = std::make_shared<Launch>();
      for (std::int64_t x : lk) l->seqs.push_back({1, int(x)});
      l->target_index = b;
      l->sms = sms;
      AttentionInput inside = in;
      inside.launch = l;
      const MethodOutput got = m.run(inside);
      const MethodOutput alone = m.run(in);
      std::size_t same = 0, same_alone = 0;
      for (int i = 0; i < HQ * D; ++i) {
        const std::uint32_t rec = std::uint32_t(o[std::size_t(b) * HQ * D + i]);
        same += encode_float_bits(e, float(got.o[std::size_t(i)]), kCudaRn) == rec;
        same_alone += encode_float_bits(e, float(alone.o[std::size_t(i)]), kCudaRn) == rec;
      }
      EXPECT_EQ(same, std::size_t(HQ * D)) << c << " sequence " << b << " in " << l->describe();
      moved += same_alone != std::size_t(HQ * D);
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
  EXPECT_GE(moved, 1);  // some sequence's bits depend on its neighbours
  std::printf("%d ragged sequences reproduced inside their launch; %d differ when run alone\n",
              checked, moved);
}

}  // namespace
}  // namespace attnsim
