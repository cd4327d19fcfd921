// experiments/analysis/attribute: every registered pipeline method is attributed on a synthetic
// and a real-data input with the invariant that makes the table mean something (the pipeline
// reported reproduces the method's own output bit for bit, its counterfactuals run through the
// method's own schedule); `methods --describe`'s canonical string runs bit-identically for every
// method; and a preset takes any stage key.
#include "experiments/analysis/attribute.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/io/dump.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {
namespace {

// The methods attributed: every registered pipeline method and each arch / accumulation /
// variant / style a user would name.
const std::vector<std::string> kMethods{
    "flash", "flash:qkv=bf16,p=bf16,out=bf16", "sage1", "sage2:arch=sm80,pv_accum=fp32",
    "sage2:arch=sm80,pv_accum=fp16+fp32", "sage2:arch=sm80,pv_accum=fp16",
    "sage2:arch=sm89,target=h100", "sage2:arch=sm89,pv_accum=fp32,target=h100",
    "sage2:arch=sm89,pv_accum=fp32+fp32,target=h100", "sage2:arch=sm90",
    "sage2:arch=sm90,pv_accum=fp32", "sage2:arch=paper", "sage2:arch=paper,smooth=hadamard",
    "amla:variant=base", "amla:variant=paper", "amla:variant=cann", "amla:target=h100",
    "turbo:mode=prefill", "turbo", "lean:mblocks=all", "splitkv:style=flashdecoding,splits=3",
    "splitkv:style=flashinfer,splits=2", "splitkv:style=flashmla,splits=2", "kivi",
    "vllm_triton", "vllm_triton:kv=e4m3,k_scale=0.05,v_scale=0.02,window=48,softcap=20"};

// A synthetic causal input (MHA, lengths no tile divides) and a slice of real data: SmolLM2 layer
// 15's first three query heads (GQA on one KV head) and 160 tokens, causal.
std::vector<std::pair<std::string, AttentionInput>> inputs() {
  std::vector<std::pair<std::string, AttentionInput>> r;
  r.emplace_back("synthetic", make_synthetic("normal:hq=2,hkv=2,nq=130,nkv=130,d=64,causal=1,seed=3"));
  const AttentionInput full = read_attention_dump(
      std::string(ATTNSIM_SOURCE_DIR) + "/data/real/smollm2_gpl3.h5", "layer_15/", false);
  AttentionInput s;
  const int n = 160, d = full.shape.head_dim;
  s.shape = {1, 3, 1, n, n, d, d};
  s.causal = true;
  s.sm_scale = full.sm_scale;
  s.dtype = full.dtype;
  for (int h = 0; h < 3; ++h)
    s.q.insert(s.q.end(), full.q.begin() + std::ptrdiff_t(h) * full.shape.len_q * d,
               full.q.begin() + std::ptrdiff_t(h) * full.shape.len_q * d + std::ptrdiff_t(n) * d);
  s.k.assign(full.k.begin(), full.k.begin() + std::ptrdiff_t(n) * d);
  s.v.assign(full.v.begin(), full.v.begin() + std::ptrdiff_t(n) * d);
  r.emplace_back("smollm2_l15_slice", std::move(s));
  return r;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(Attribute, EveryPipelineMethodIsAttributedWithTheInvariant) {
  for (const auto& [name, in] : inputs()) {
    const std::vector<double> golden = golden_attention_ref(in);
    for (const std::string& text : kMethods) {
      SCOPED_TRACE(text + " on " + name);
      const MethodConfig m = parse_method(text);
      std::vector<AttributionRow> rows;
      ASSERT_NO_THROW(rows = attribute_stages(in, name, m, golden));
      ASSERT_GE(rows.size(), 12u);
      const AttributionRow& all = rows.front();
      // (a) is the method's own output's error, measured again here.
      EXPECT_EQ(all.full.rel_fro, error_metrics(m.run(in).o, golden).rel_fro);
      const bool outside = rows.back().stage == "outside";
      EXPECT_EQ(outside, !m.outside(in).empty());
      // Every stage exact through the method's schedule: golden to FP64 accuracy, unless the
      // technique has steps outside its pipeline (then that is the error they leave).
      if (!outside) {
        EXPECT_LT(all.only_exact.rel_fro, 1e-13);
      }
      for (std::size_t i = 1; i < rows.size(); ++i) {
        const AttributionRow& r = rows[i];
        EXPECT_TRUE(std::isfinite(r.only_exact.rel_fro) && std::isfinite(r.only_this.rel_fro))
            << r.stage;
        // A stage that already is exact: making it exact changes nothing.
        if (!r.differs && r.stage != "outside") {
          EXPECT_EQ(r.only_exact.rel_fro, r.full.rel_fro) << r.stage;
        }
      }
      std::printf("[ attribute ] %-44s %-18s method %.3e all-exact %.3e%s\n", text.c_str(),
                  name.c_str(), all.full.rel_fro, all.only_exact.rel_fro,
                  outside ? " (steps outside)" : "");
    }
  }
}

TEST(Attribute, DescribedPipelineRunsBitIdentically) {
  // methods --describe's first line pasted back as --method gives the method's output bit for bit.
  for (const auto& [name, in] : inputs()) {
    for (const std::string& text : kMethods) {
      SCOPED_TRACE(text + " on " + name);
      const MethodConfig m = parse_method(text);
      const MethodDescription d = describe_method(m, in);
      const MethodConfig back = parse_method(d.method);
      EXPECT_TRUE(same_bits(back.run(in).o, m.run(in).o)) << d.method;
      EXPECT_EQ(back.pipeline(in), m.pipeline(in)) << d.method;
      EXPECT_EQ(d.outside.empty(), d.method.rfind("flash:", 0) == 0);
    }
  }
}

TEST(Attribute, PresetsTakeEveryStageKey) {
  const AttentionInput in = make_synthetic("normal:hq=2,nq=64,nkv=96,d=64,seed=4");
  const MethodConfig base = parse_method("sage2:arch=sm90");
  const MethodConfig exact_exp = parse_method("sage2:arch=sm90,exp=exp2.exact");
  EXPECT_EQ(exact_exp.pipeline(in).exp.fn, ExpFn::kExact);
  // (The bf16 output hides most of an exp's ulps: compare the FP32 output.)
  EXPECT_FALSE(same_bits(parse_method("sage2:arch=sm90,out=fp32").run(in).o,
                         parse_method("sage2:arch=sm90,out=fp32,exp=exp2.exact").run(in).o));
  // Everything else is the preset's.
  Pipeline p = exact_exp.pipeline(in);
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  EXPECT_EQ(p, base.pipeline(in));
  // amla with a stage key, a technique's own key shadowing a stage key (turbo's exp), and the
  // vocabulary's other choices on it.
  EXPECT_EQ(parse_method("amla:variant=cann,pv_dot=fp32").pipeline(in).pv.dot,
            (DotModel{DotModel::kFp32}));
  EXPECT_EQ(parse_method("turbo:mode=prefill,exp=exact").pipeline(in).exp.fn, ExpFn::kExact);
  EXPECT_EQ(parse_method("turbo:mode=prefill,exp=exp.exact").pipeline(in).exp.fn, ExpFn::kExact);
  EXPECT_EQ(parse_method("lean:rowsum=single").pipeline(in).softmax.row_sum, RowSum::kSingle);
  // Composing techniques: Sage's row sum with AMLA's integer-add step.
  const Pipeline c = parse_method("amla:variant=cann,rowsum=sage_lanes,bk=64").pipeline(in);
  EXPECT_EQ(c.softmax.row_sum, RowSum::kSageLanes);
  EXPECT_EQ(c.rescale.kind, Rescale::kHook);
  // Renamed and impossible combinations say why in one line.
  try {
    (void)parse_method("amla:pv_acc=block16");
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("pv_sum"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)parse_method("sage2:arch=sm90,exp=exp.exact"), UsageError);  // fold needs exp2
  // The canonical string of a preset keeps its spelling; overrides are appended.
  EXPECT_EQ(parse_method("amla").canonical(),
            "amla:variant=cann,in=auto,block=512,bq=128,qk_sum=default,pv_sum=default,"
            "comp=default,target=ascend,out=default");
  EXPECT_EQ(exact_exp.canonical(), base.canonical() + ",exp=exp2.exact");
}

}  // namespace
}  // namespace attnsim
