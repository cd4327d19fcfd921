// The flex preset (sim/flex: FlexAttention's prefill template, torch 2.11 / Triton 3.6) against the
// H100 recordings (data/hw/h100/serving/flex_h100.h5, cuda_check/serving/record_serving_triton.py):
// every recorded prefill case the preset runs, bit for bit on every output element and LSE value;
// negative controls (each of the preset's FlexAttention-specific stage choices swapped for its
// nearest neighbour breaks exactness: the recordings tell them apart); the refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "sim/flex/flex.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim {
namespace {

const std::string kFlexFile = ATTNSIM_DATA_DIR "/hw/h100/serving/flex_h100.h5";

// cuda_check/serving/serving_cases.py FLEX_CASES (lattice inputs: tensors 0, 1, 2 are Q, K, V;
// the window mask is causal; `uniform`: q = 0, the inputs stored in the file). Queries shorter
// than 128 run the decode template.
struct FlexCase {
  const char* name;
  const char* dtype;
  int b, hq, hkv, lq, lk, d;
  bool causal;
  double scale;  // 0: 1/sqrt(d)
  int seed;
  int window = 0;
  double softcap = 0.0;
  bool stored = false;  // the inputs are in the file (designed probe)
};
const std::vector<FlexCase>& prefill_cases() {
  static const std::vector<FlexCase> c{
      {"pre512_causal_bf16_d128", "bf16", 1, 4, 4, 512, 512, 128, true, 0.0, 101},
      {"pre300_gqa_fp16_d64", "fp16", 1, 8, 2, 300, 300, 64, false, 0.0, 103},
      {"pre200_causal_scale0.1_fp16_d128", "fp16", 2, 2, 2, 200, 200, 128, true, 0.1, 108},
      {"pre777_causal_bf16_d64", "bf16", 1, 4, 4, 777, 777, 64, true, 0.0, 111},
      {"pre1000_window128_bf16_d128", "bf16", 1, 2, 2, 1000, 1000, 128, true, 0.0, 105, 128},
      {"pre333_causal_softcap30_bf16_d128", "bf16", 1, 2, 2, 333, 333, 128, true, 0.0, 106, 0,
       30.0},
      {"dec1000_bf16_d128", "bf16", 2, 8, 8, 1, 1000, 128, false, 0.0, 102},
      {"dec4097_gqa_fp16_d128", "fp16", 1, 32, 8, 1, 4097, 128, false, 0.0, 104},
      {"dec777_gqa_softcap30_bf16_d128", "bf16", 1, 8, 2, 1, 777, 128, false, 0.0, 107, 0, 30.0},
      {"short16_gqa_bf16_d128", "bf16", 1, 8, 2, 16, 600, 128, false, 0.0, 109},
      {"uniform64x1000_bf16_d128", "bf16", 1, 2, 2, 64, 1000, 128, false, 0.0, 110, 0, 0.0, true},
      {"dec1000_fp16_d64", "fp16", 1, 4, 4, 1, 1000, 64, false, 0.0, 112},
      // The same sequence in batches of 1 and 16 (SPLIT_KV 32 and 2): batch-invariant bits.
      {"bi_dec1000_b1_bf16_d128", "bf16", 1, 8, 8, 1, 1000, 128, false, 0.0, 102},
      {"bi_dec1000_b16_bf16_d128", "bf16", 16, 8, 8, 1, 1000, 128, false, 0.0, 102},
      // 4 queries under the causal block mask: the decode template with SPLIT_KV 32, every
      // visible key in split 0.
      {"dec4x1000_causal_bf16_d128", "bf16", 1, 8, 8, 4, 1000, 128, true, 0.0, 113},
  };
  return c;
}

Encoding enc_of(const std::string& dt);

AttentionInput case_input(const H5Reader& r, const FlexCase& c) {
  AttentionInput in;
  in.shape = {c.b, c.hq, c.hkv, c.lq, c.lk, c.d, c.d};
  in.causal = c.causal;
  in.sm_scale = c.scale;
  in.window = c.window;
  in.softcap = c.softcap;
  hwtest::fill_lattice(in, c.seed, 0);
  if (c.stored) {
    auto read = [&](const char* n, std::vector<float>& x) {
      const std::vector<double> bits = r.read_f64(std::string(c.name) + "/" + n);
      if (bits.size() != x.size()) throw std::runtime_error(std::string(c.name) + ": " + n);
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = float(decode_float_bits(enc_of(c.dtype), std::uint32_t(bits[i])));
    };
    read("q", in.q);
    read("k", in.k);
    read("v", in.v);
  }
  return in;
}

Encoding enc_of(const std::string& dt) { return dt == "bf16" ? Encoding::kBf16 : Encoding::kFp16; }

struct Match {
  std::int64_t elems = 0, elems_same = 0, lse = 0, lse_same = 0;
  bool exact() const { return elems_same == elems && lse_same == lse; }
  std::string text() const {
    return std::to_string(elems_same) + "/" + std::to_string(elems) + " elements, " +
           std::to_string(lse_same) + "/" + std::to_string(lse) + " LSE";
  }
};

// The preset's pipeline for a case, changed by `tweak` (negative controls), against the recording.
Match check(const H5Reader& r, const FlexCase& c,
            const std::function<void(Pipeline&)>& tweak = nullptr) {
  FlexOptions o;
  o.dtype = enc_of(c.dtype);
  const AttentionInput in = case_input(r, c);
  Pipeline p = flex_pipeline(o, in.shape, in.causal);
  if (tweak) tweak(p);
  const PipelineResult res = run_pipeline(in, p);
  const std::vector<double> o_hw = r.read_f64(std::string(c.name) + "/o");
  const std::vector<double> lse_hw = r.read_f64(std::string(c.name) + "/lse");
  if (o_hw.size() != res.o.size() || lse_hw.size() != res.lse.size())
    throw std::runtime_error(std::string(c.name) + ": the recording's shape differs from the case");
  Match m;
  for (std::size_t i = 0; i < o_hw.size(); ++i) {
    const std::uint32_t sim = encode_float_bits(o.dtype, float(res.o[i]), kCudaRn);
    ++m.elems;
    m.elems_same += sim == std::uint32_t(o_hw[i]);
  }
  for (std::size_t i = 0; i < lse_hw.size(); ++i) {
    const float a = float(res.lse[i]), b = float(lse_hw[i]);
    ++m.lse;
    m.lse_same += std::memcmp(&a, &b, sizeof a) == 0;
  }
  return m;
}

TEST(FlexH100, EveryRecordedCaseBitForBit) {
  const H5Reader r(kFlexFile);
  for (const FlexCase& c : prefill_cases()) {
    ASSERT_TRUE(r.exists(std::string(c.name) + "/o")) << c.name;
    const Match m = check(r, c);
    EXPECT_GT(m.elems, 0);
    EXPECT_TRUE(m.exact()) << c.name << ": " << m.text();
  }
}

// Each FlexAttention-specific choice matters on the recordings: with the nearest other choice some
// recorded case loses exactness (so the exact result above is evidence for the choice, not an
// accident of the inputs).
bool some_case_differs(const H5Reader& r, const std::function<void(Pipeline&)>& tweak) {
  for (const FlexCase& c : prefill_cases())
    if (!check(r, c, tweak).exact()) return true;
  return false;
}

TEST(FlexH100, EachChoiceIsNeededNegativeControls) {
  const H5Reader r(kFlexFile);
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.fma_blocks = FmaBlocks::kAll; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.fma = false; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.tile.kv_order = KvOrder::kAscending; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.scale_log2 = ScaleLog2::kHostDouble; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.row_sum = RowSum::kQuad; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.lse = LseModel::kLog2Libdevice; }));
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) { p.softmax.softcap = SoftcapFn::kExact; }));
  // The decode template's row sum over 2 column warps, not one warp's tree.
  EXPECT_TRUE(some_case_differs(r, [](Pipeline& p) {
    if (p.softmax.row_sum == RowSum::kTritonWarps) p.softmax.row_sum = RowSum::kTritonTree;
  }));
}

TEST(FlexH100, MaskedDecodeAndOtherShapesAreRefusedInOneLine) {
  FlexOptions o;
  // Short queries under a block mask: up to 64 every visible key is in split 0 (modelled); 65 to
  // 127 take a real two-split merge: refused in one line, unless SPLIT_KV is 1 (batch x KV heads
  // above 132).
  for (int lq : {1, 16, 64}) {
    EXPECT_NO_THROW((void)flex_pipeline(o, AttentionShape{1, 8, 8, lq, 1000, 128, 128}, false));
    EXPECT_NO_THROW((void)flex_pipeline(o, AttentionShape{1, 8, 8, lq, 1000, 128, 128}, true));
  }
  for (int lq : {65, 100, 127}) {
    EXPECT_NO_THROW((void)flex_pipeline(o, AttentionShape{1, 8, 8, lq, 1000, 128, 128}, false));
    EXPECT_NO_THROW((void)flex_pipeline(o, AttentionShape{20, 8, 8, lq, 1000, 128, 128}, true));
    try {
      (void)flex_pipeline(o, AttentionShape{1, 8, 8, lq, 1000, 128, 128}, true);
      ADD_FAILURE() << "len_q " << lq << " causal was not refused";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("decode template"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW((void)flex_pipeline(o, AttentionShape{1, 2, 2, 256, 256, 128, 64}, false),
               std::invalid_argument);
  o.dtype = Encoding::kE4m3fn;
  EXPECT_THROW((void)flex_pipeline(o, AttentionShape{1, 2, 2, 256, 256, 128, 128}, false),
               std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
