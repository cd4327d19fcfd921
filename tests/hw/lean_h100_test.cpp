// sim/lean against what our CUDA decode kernels computed on an H100
// (data/hw/h100/lean/lean_h100.h5, cuda_check/lean/lean_decode.cu): the stream-K plan, every
// split's FP32 partial O and LSE, and the fp16/bf16 outputs of LeanAttention and of FlashDecoding
// (FA2 split-KV + combine) with 1, 3 and FA2's heuristic split counts, bit for bit. The kernels
// use the corrected partition (every m-block, ragged per-batch tile counts: LeanMBlocks::kAll) and
// ORT's build (no fast math: exp2f = ex2.approx.f32, __logf, libdevice expf/logf, IEEE 1/l, the
// row sum's rescale fused into its first add as nvcc compiles FA2's softmax).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "formats/float32.hpp"
#include "sim/lean/lean.hpp"

namespace attnsim {
namespace {

const std::string kFile = ATTNSIM_DATA_DIR "/hw/h100/lean/lean_h100.h5";

struct Recorded {
  std::string name;
  AttentionInput in;
  LeanOptions o;
  Encoding dtype;
  int g = 1;
};

Recorded load(const H5Reader& r, const std::string& c) {
  Recorded x;
  x.name = c;
  const int B = int(r.attr_f64(c, "batch")), HQ = int(r.attr_f64(c, "hq")),
            HK = int(r.attr_f64(c, "hk")), D = int(r.attr_f64(c, "d")),
            LK = int(r.attr_f64(c, "lk_max"));
  x.g = HQ / HK;
  x.dtype = r.attr_string(c, "dtype") == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
  x.in.shape = AttentionShape{B, HQ, HK, 1, LK, D, D};
  x.in.dtype = x.dtype == Encoding::kBf16 ? "bfloat16" : "float16";
  auto widen = [&](const std::vector<std::int64_t>& b) {
    std::vector<float> f(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) f[i] = decode_float_bits(x.dtype, std::uint32_t(b[i]));
    return f;
  };
  x.in.q = widen(r.read_i64(c + "/q"));
  x.in.k = widen(r.read_i64(c + "/k"));
  x.in.v = widen(r.read_i64(c + "/v"));
  x.o.dtype = x.dtype;
  x.o.sms = int(r.attr_f64(c, "num_sms"));
  x.o.m_blocks = LeanMBlocks::kAll;
  const std::vector<std::int64_t> lk = r.read_i64(c + "/lk");
  bool ragged = false;
  for (auto l : lk) ragged = ragged || l != LK;
  if (ragged)
    for (auto l : lk) x.o.len_kv_per_batch.push_back(int(l));
  // Rows past a ragged entry's length are NaN in the recording (never read by the kernels);
  // the simulator reads only each entry's own keys.
  return x;
}

std::uint32_t bits_of(Encoding e, double v) {
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  return encode_float_bits(e, float(v), kRne);
}

// Compares the partials of a run with a recorded [S][B][HK][g][D] / [S][B][HK][g] pair.
int partial_mismatches(const Recorded& x, const LeanResult& res, const std::vector<std::int64_t>& o,
                       const std::vector<std::int64_t>& lse, int S, bool with_o) {
  const int B = x.in.shape.batch, HK = x.in.shape.heads_kv, D = x.in.shape.head_dim, g = x.g;
  int bad = 0, checked = 0;
  for (const LeanPartial& p : res.partials) {
    if (p.split >= S) {
      ++bad;
      continue;
    }
    const int rows = int(p.lse.size());
    for (int r = 0; r < rows; ++r) {
      const int row = p.m_block * 64 + r;  // the row within the KV head's folded group
      const std::size_t li = ((std::size_t(p.split) * B + p.batch) * HK + p.head) * g + row;
      if (std::uint32_t(lse[li]) != f32_bits(p.lse[std::size_t(r)])) ++bad;
      ++checked;
      if (!with_o) continue;
      for (int c = 0; c < D; ++c)
        if (std::uint32_t(o[li * D + c]) != f32_bits(p.o[std::size_t(r) * D + c])) ++bad;
    }
  }
  EXPECT_GT(checked, 0) << x.name;
  return bad;
}

TEST(LeanH100, PlansPartialsAndOutputsBitForBit) {
  H5Reader r(kFile);
  int cases = 0;
  long long outputs = 0;
  for (const std::string& c : r.members("/")) {
    SCOPED_TRACE(c);
    const Recorded x = load(r, c);
    // 1. The plan.
    const LeanShape ls = lean_shape(x.in, x.o);
    const LeanPlan plan = lean_plan(ls);
    EXPECT_EQ(plan.grid, int(r.attr_f64(c + "/lean", "grid")));
    EXPECT_EQ(plan.total_tiles, (long long)r.attr_f64(c + "/lean", "total_tiles"));
    EXPECT_EQ(plan.max_tiles_per_tb, (long long)r.attr_f64(c + "/lean", "max_tiles_per_tb"));
    EXPECT_EQ(plan.high_load_tbs, (long long)r.attr_f64(c + "/lean", "high_load_tbs"));
    EXPECT_EQ(plan.num_splits, int(r.attr_f64(c + "/lean", "num_splits_ort")));
    const std::vector<std::int64_t> seg = r.read_i64(c + "/lean/segments");
    ASSERT_EQ(seg.size(), plan.segments.size() * 10);
    for (std::size_t i = 0; i < plan.segments.size(); ++i) {
      const LeanSegment& s = plan.segments[i];
      const std::int64_t* w = &seg[i * 10];
      EXPECT_TRUE(w[0] == s.cta && w[1] == s.batch && w[2] == s.head && w[3] == s.m_block &&
                  w[4] == s.n_begin && w[5] == s.n_end && w[6] == s.host && w[7] == s.finisher &&
                  w[8] == s.split)
          << "segment " << i;
    }
    // ORT's own partition (LeanMBlocks::kOrt) is the same wherever it computes every output
    // (uniform lengths, at most 64 query heads per KV head).
    if (x.o.len_kv_per_batch.empty() && x.g <= 64) {
      LeanShape ort = ls;
      ort.m_blocks = LeanMBlocks::kOrt;
      const LeanPlan po = lean_plan(ort);
      EXPECT_TRUE(po.coverage.empty());
      ASSERT_EQ(po.segments.size(), plan.segments.size());
      for (std::size_t i = 0; i < po.segments.size(); ++i)
        EXPECT_TRUE(po.segments[i].n_begin == plan.segments[i].n_begin &&
                    po.segments[i].n_end == plan.segments[i].n_end &&
                    po.segments[i].cta == plan.segments[i].cta &&
                    po.segments[i].head == plan.segments[i].head)
            << "ort segment " << i;
    }
    // 2. LeanAttention: partials and output.
    const LeanResult lean = lean_attention(x.in, x.o, true);
    const std::vector<std::int64_t> lo = r.read_i64(c + "/lean/o");
    ASSERT_EQ(lo.size(), lean.o.size());
    int bad = 0;
    for (std::size_t i = 0; i < lo.size(); ++i) bad += std::uint32_t(lo[i]) != bits_of(x.dtype, lean.o[i]);
    EXPECT_EQ(bad, 0) << "lean outputs differ";
    const int S = int(r.attr_f64(c + "/lean", "num_splits"));
    if (!lean.partials.empty()) {  // braces: EXPECT_EQ is an if/else (-Wdangling-else)
      EXPECT_EQ(partial_mismatches(x, lean, r.read_i64(c + "/lean/o_partial"),
                                   r.read_i64(c + "/lean/lse_partial"), S, true),
                0)
          << "lean partials differ";
    }
    outputs += long(lo.size());
    // 3. FlashDecoding with each recorded split count (our kernel: ORT's build, no fast math).
    for (const std::string& grp : r.members(c)) {
      if (grp.rfind("fd_s", 0) != 0) continue;
      LeanOptions fd = x.o;
      fd.style = SplitStyle::kFlashDecoding;
      fd.fast_math = 0;
      fd.splits = int(r.attr_f64(c + "/" + grp, "num_splits"));
      if (r.attr_f64(c + "/" + grp, "heuristic") != 0) {
        LeanOptions h = fd;
        h.splits = 0;
        EXPECT_EQ(splitkv_plan(lean_shape(x.in, h), 0).num_splits, fd.splits) << grp;
      }
      const LeanResult res = lean_attention(x.in, fd, true);
      const std::vector<std::int64_t> fo = r.read_i64(c + "/" + grp + "/o");
      int fbad = 0;
      for (std::size_t i = 0; i < fo.size(); ++i) fbad += std::uint32_t(fo[i]) != bits_of(x.dtype, res.o[i]);
      EXPECT_EQ(fbad, 0) << grp << " outputs differ";
      if (r.exists(c + "/" + grp + "/lse_partial") && !res.partials.empty()) {
        const bool with_o = r.exists(c + "/" + grp + "/o_partial");
        EXPECT_EQ(partial_mismatches(x, res, with_o ? r.read_i64(c + "/" + grp + "/o_partial")
                                                    : std::vector<std::int64_t>{},
                                     r.read_i64(c + "/" + grp + "/lse_partial"), fd.splits, with_o),
                  0)
            << grp << " partials differ";
      }
      outputs += long(fo.size());
    }
    ++cases;
  }
  EXPECT_EQ(cases, 14);
  std::printf("lean H100: %d cases, %lld outputs compared\n", cases, outputs);
}

// The recording tells the modelling choices apart: each wrong one misses outputs or partials.
TEST(LeanH100, TheRecordingSeparatesTheAlternatives) {
  H5Reader r(kFile);
  struct Alt {
    const char* name;
    void (*apply)(LeanOptions&);
  };
  const Alt alts[] = {
      {"exact exp/log", [](LeanOptions& o) { o.exp = LeanExp::kExact; }},
      {"fast math", [](LeanOptions& o) { o.fast_math = 1; }},
      {"Algorithm 2's merge", [](LeanOptions& o) { o.reduce = LeanReduce::kPaper; }},
      {"fp32 CUDA-core products", [](LeanOptions& o) { o.product.kind = DotModel::kFp32; }},
      {"l·alpha rounded before the row sum's adds", [](LeanOptions& o) { o.rowsum_fma = false; }},
  };
  for (const Alt& a : alts) {
    long long missed = 0;
    for (const std::string& c : {std::string("spike_b1_g4_lk1600"), std::string("n_b3_g8_ragged"),
                                 std::string("wide_b1_g8_lk1024")}) {
      const Recorded x = load(r, c);
      LeanOptions o = x.o;
      a.apply(o);
      const LeanResult res = lean_attention(x.in, o, true);
      const std::vector<std::int64_t> lo = r.read_i64(c + "/lean/o");
      for (std::size_t i = 0; i < lo.size(); ++i) missed += std::uint32_t(lo[i]) != bits_of(x.dtype, res.o[i]);
      if (!res.partials.empty() && o.reduce == LeanReduce::kKernel)
        missed += partial_mismatches(x, res, r.read_i64(c + "/lean/o_partial"),
                                     r.read_i64(c + "/lean/lse_partial"),
                                     int(r.attr_f64(c + "/lean", "num_splits")), true);
    }
    std::printf("%s: %lld outputs and partial values differ from the H100\n", a.name, missed);
    EXPECT_GT(missed, 0) << a.name;
  }
}

}  // namespace
}  // namespace attnsim
