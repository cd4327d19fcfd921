// Registration of the LeanAttention methods (sim/lean): `lean` (ONNX Runtime's stream-K
// partition and reduction) and `splitkv:style=flashdecoding|flashinfer|flashmla` (fixed splits,
// the peers' merges). The option strings are a contract (issue 14).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "experiments/common/error.hpp"
#include "experiments/common/warning.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/lean/lean.hpp"

namespace attnsim {

namespace {

LeanOptions lean_options(const MethodValues& v, const std::string& dtype, SplitStyle style) {
  LeanOptions o;
  o.style = style;
  if (v.count("splits")) o.splits = std::stoi(v.at("splits"));
  o.sms = std::stoi(v.at("sms"));
  o.block_n = std::stoi(v.at("block_n"));
  const std::string d = v.at("dtype");
  o.dtype = d == "bf16" ? Encoding::kBf16
            : d == "fp16" ? Encoding::kFp16
            : dtype == "bfloat16" ? Encoding::kBf16
                                  : Encoding::kFp16;
  o.exp = v.at("exp") == "exact" ? LeanExp::kExact : LeanExp::kApprox;
  if (v.count("mblocks"))
    o.m_blocks = v.at("mblocks") == "all" ? LeanMBlocks::kAll : LeanMBlocks::kOrt;
  if (v.count("reduce")) o.reduce = v.at("reduce") == "paper" ? LeanReduce::kPaper : LeanReduce::kKernel;
  o.rowsum_fma = v.at("rowsum") == "fma";
  const std::string pr = v.at("product");
  if (pr == "mma") {
    o.product = DotModel{DotModel::kMma, MmaInstr::kHmmaF16F32, 0};
  } else if (!parse_dot_model(pr, &o.product)) {
    throw UsageError("unknown product '" + pr + "'");
  }
  return o;
}

// sim/lean's messages speak `attnsim lean plan`'s flags ("lean: --head-dim 200 ..."); a method
// gets them in its own name and the input's terms.
std::string method_message(const std::string& method, std::string m) {
  if (m.rfind("lean: ", 0) == 0 || m.rfind("splitkv: ", 0) == 0) m = m.substr(m.find(' ') + 1);
  static const std::pair<const char*, const char*> kTerms[] = {
      {"--head-dim", "the input's head_dim"},
      {"--heads-q", "the input's query heads"},
      {"--heads-kv", "the input's key/value heads"},
      {"--len-q", "the input's len_q"},
      {"--len-kv", "the input's len_kv"},
      {"--batch", "the input's batch"},
      {"--sms", "sms"}};
  for (const auto& [flag, term] : kTerms) {
    for (auto at = m.find(flag); at != std::string::npos; at = m.find(flag, at))
      m.replace(at, std::string(flag).size(), term);
  }
  return method + ": " + m;
}

// The CTAs of each output row under the method's partition (verify's concentration table).
std::vector<std::vector<int>> row_ctas(const AttentionInput& in, const LeanOptions& o,
                                       const std::string& method) {
  try {
    return plan_row_ctas(lean_run_plan(in, o), in.shape);
  } catch (const std::invalid_argument& e) {
    throw UsageError(method_message(method, e.what()));
  }
}

MethodOutput run_lean(const AttentionInput& in, const LeanOptions& o, const Pipeline& p,
                      const MethodValues& v, const std::string& method) {
  LeanResult r;
  try {
    r = lean_attention(in, o, p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(method_message(method, e.what()));
  }
  MethodOutput out{std::move(r.o), encoding_name(p.out.enc), {}, {}};
  // What "auto" and the caps resolved to: the splits the blocks ran with (the most any block
  // has), the n-tile and the format.
  int most = 0;
  for (const LeanSegment& g : r.plan.segments) most = std::max(most, g.split + 1);
  out.resolved["splits"] = std::to_string(most);
  out.resolved["block_n"] = std::to_string(r.plan.block_n);
  out.resolved["dtype"] = encoding_name(o.dtype);
  if (o.style != SplitStyle::kLean) {
    const int asked = std::stoi(v.at("splits"));
    if (most == 1 && asked != 1)
      warn(method + ": every block ran as one split (" +
           (r.plan.num_n_blocks <= 1 ? std::string("a block has a single key tile")
                                     : "splits=0 resolved to 1 by FA2's num_splits_heuristic: the "
                                       "blocks already fill the SMs") +
           "), so the merge under study never ran; pass splits=N on an input with more key tiles");
    else if (asked > most)
      warn(method + ": splits=" + std::to_string(asked) + " ran as at most " +
           std::to_string(most) +
           " splits per block (a block of n key tiles is cut into ranges "
           "of ceil(n / splits) tiles); the results' `resolved` column has the count");
  }
  return out;
}

std::vector<MethodParam> common_params() {
  return {
      {"dtype", {"auto", "fp16", "bf16"}, "auto",
       "Q/K/V, P and output format (auto: a bf16 dump's bf16, else fp16; FP32 inputs rounded RNE)"},
      {"sms", {}, "132", "streaming multiprocessors the partition assumes (H100 SXM: 132)", 1},
      {"block_n", {}, "0", "keys per n-tile (0: the kernel's, 256 for d <= 64, 128 for d <= 128)",
       0},
      {"exp", {"approx", "exact"}, "approx",
       "approx: exp2/log/exp as the kernel's build compiles them (H100 models); exact: correctly "
       "rounded"},
      {"product", {"mma", "fp32", "fp64", "exact"}, "mma",
       "QK^T and P*V: mma = HMMA m16n8k16 with FP32 accumulation (the kernel's SM80 atom, H100 "
       "model); fp32/fp64 CUDA-core loops; exact (rounded once)"},
      {"rowsum", {"fma", "rounded"}, "fma",
       "the running sum's rescale: fma = fused into each quad lane's first add, as nvcc compiles "
       "FA2's softmax for ORT and FA2; rounded = l*alpha rounded first (our cuda_check kernels)"},
  };
}

}  // namespace

void register_lean_methods(std::vector<MethodSpec>& r) {
  std::vector<MethodParam> lp = common_params();
  lp.push_back({"reduce", {"kernel", "paper"}, "kernel",
                "kernel: ORT's per-split normalization + natural-log LSE reduction, host first; "
                "paper: Appendix E Algorithm 2's pairwise merge of unnormalized (O, m, l)"});
  lp.push_back({"mblocks", {"ort", "all"}, "ort",
                "ort: ONNX Runtime's partition as written (MHA decode, GQA decode with <= 64 query "
                "heads per KV head, causal prefill with len_q = len_kv; other shapes are refused); "
                "all: the corrected partition (every m-block and head; cuda_check/lean's kernel)"});
  const auto outside = [](const MethodValues&, const AttentionInput&) {
    return std::vector<std::string>{
        "the split schedule: each split's normalization and the merge of their LSEs (the "
        "technique's reduction, in FP32 with the build's special functions)"};
  };
  MethodSpec lean;
  lean.name = "lean";
  lean.help =
      "LeanAttention (Sanovar et al.) as ONNX Runtime runs it: the stream-K partition (attnsim "
      "lean plan), each CTA's n-tiles descending, per-split normalization, the host CTA's LSE "
      "reduction (sim/lean)";
  lean.params = lp;
  lean.check = [](const MethodValues& v) { (void)lean_options(v, "float32", SplitStyle::kLean); };
  lean.preset = [](const MethodValues& v, const AttentionInput& in) {
    return lean_pipeline(lean_options(v, in.dtype, SplitStyle::kLean), in.shape.head_dim);
  };
  lean.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    return run_lean(in, lean_options(v, in.dtype, SplitStyle::kLean), p, v, "lean");
  };
  lean.outside = outside;
  lean.row_ctas = [](const MethodValues& v, const AttentionInput& in) {
    return row_ctas(in, lean_options(v, in.dtype, SplitStyle::kLean), "lean");
  };
  r.push_back(std::move(lean));
  std::vector<MethodParam> sp = common_params();
  sp.insert(sp.begin(),
            {"style", {"flashdecoding", "flashinfer", "flashmla"}, "flashdecoding",
             "the merge: flashdecoding = FA2 combine_attn_seqk_parallel (natural-log LSE); "
             "flashinfer = sequential base-2 state merge (state.cuh); flashmla = base-2 combine"});
  sp.insert(sp.begin() + 1,
            {"splits", {}, "0", "splits per (batch, head, m-block) (0: FA2's num_splits_heuristic)",
             0});
  const auto style_of = [](const MethodValues& v) {
    const std::string s = v.at("style");
    return s == "flashinfer" ? SplitStyle::kFlashInfer
           : s == "flashmla" ? SplitStyle::kFlashMla
                             : SplitStyle::kFlashDecoding;
  };
  MethodSpec split;
  split.name = "splitkv";
  split.help =
      "Fixed split-KV decoding: every block cut into `splits` contiguous n-tile ranges, the same "
      "FA2 tile loop, the peer's merge (sim/lean)";
  split.params = sp;
  split.check = [](const MethodValues& v) {
    (void)lean_options(v, "float32", SplitStyle::kFlashDecoding);
  };
  split.preset = [style_of](const MethodValues& v, const AttentionInput& in) {
    return lean_pipeline(lean_options(v, in.dtype, style_of(v)), in.shape.head_dim);
  };
  split.run_with = [style_of](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    return run_lean(in, lean_options(v, in.dtype, style_of(v)), p, v, "splitkv");
  };
  split.outside = outside;
  split.row_ctas = [style_of](const MethodValues& v, const AttentionInput& in) {
    return row_ctas(in, lean_options(v, in.dtype, style_of(v)), "splitkv");
  };
  r.push_back(std::move(split));
}

}  // namespace attnsim
