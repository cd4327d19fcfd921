// Registration of the LeanAttention methods (sim/lean): `lean` (ONNX Runtime's stream-K
// partition and reduction) and `splitkv:style=flashdecoding|flashinfer|flashmla` (fixed splits,
// the peers' merges). The option strings are a contract (issue 14).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
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

AttentionInput launch_batch(const AttentionInput& in, LeanOptions* o, const std::string& method,
                            bool with_data);

// The CTAs of each output row under the method's partition (verify's concentration table); inside
// a launch, the partition of the whole launch, the input's rows first.
std::vector<std::vector<int>> row_ctas(const AttentionInput& in, LeanOptions o,
                                       const std::string& method) {
  const AttentionInput b = in.launch ? launch_batch(in, &o, method, false) : in;
  try {
    std::vector<std::vector<int>> r = plan_row_ctas(lean_run_plan(b, o), b.shape);
    const std::size_t rows = std::size_t(in.shape.batch) * in.shape.heads_q * in.shape.len_q;
    const std::size_t at = in.launch ? std::size_t(in.launch->target_index) * rows /
                                           std::size_t(in.shape.batch)
                                     : 0;
    return std::vector<std::vector<int>>(r.begin() + std::ptrdiff_t(at),
                                         r.begin() + std::ptrdiff_t(at + rows));
  } catch (const std::invalid_argument& e) {
    throw UsageError(method_message(method, e.what()));
  }
}

// The launch an input runs in (AttentionInput::launch) as the batch the partition sees: the
// input's sequences first, the others zero-valued (each (batch, head) block is its own problem:
// no neighbour value reaches the input's rows, only the neighbours' tile counts move the
// partition), each with its own context length (ragged: o->len_kv_per_batch). Without data
// (`with_data` false) the shape alone, for the plan.
AttentionInput launch_batch(const AttentionInput& in, LeanOptions* o, const std::string& method,
                            bool with_data) {
  const Launch& l = *in.launch;
  usage_errors([&] { check_launch_target(in.shape, l); });
  if (o->sms != l.sms)
    throw UsageError(method + ": sms=" + std::to_string(o->sms) + " and the launch's SM count " +
                     std::to_string(l.sms) + " differ (give one: --sms, or sms=)");
  for (const LaunchSeq& q : l.seqs)
    if (q.len_q != in.shape.len_q)
      throw UsageError(method + ": the launch " + l.describe() +
                       " mixes query counts; the kernel takes one len_q per launch");
  AttentionInput b;
  const AttentionShape s = in.shape;
  b.shape = s;
  b.shape.batch = l.num_seqs();
  b.shape.len_kv = l.max_len_kv();
  b.causal = in.causal;
  b.sm_scale = in.sm_scale;
  b.dtype = in.dtype;
  b.window = in.window;
  b.softcap = in.softcap;
  o->len_kv_per_batch.clear();
  if (!l.dense())
    for (const LaunchSeq& q : l.seqs) o->len_kv_per_batch.push_back(q.len_kv);
  if (!with_data) return b;
  b.q.assign(b.shape.q_size(), 0.0f);
  b.k.assign(b.shape.k_size(), 0.0f);
  b.v.assign(b.shape.v_size(), 0.0f);
  const std::size_t t0 = std::size_t(l.target_index);
  std::copy(in.q.begin(), in.q.end(),
            b.q.begin() + std::ptrdiff_t(t0 * s.heads_q * s.len_q * s.head_dim));
  const std::size_t d = std::size_t(s.head_dim), dv = std::size_t(s.head_dim_v);
  for (int bi = 0; bi < s.batch; ++bi)
    for (int h = 0; h < s.heads_kv; ++h) {
      const std::size_t src = (std::size_t(bi) * s.heads_kv + h) * s.len_kv;
      const std::size_t dst = ((t0 + std::size_t(bi)) * s.heads_kv + h) * b.shape.len_kv;
      std::copy_n(in.k.begin() + std::ptrdiff_t(src * d), std::size_t(s.len_kv) * d,
                  b.k.begin() + std::ptrdiff_t(dst * d));
      std::copy_n(in.v.begin() + std::ptrdiff_t(src * dv), std::size_t(s.len_kv) * dv,
                  b.v.begin() + std::ptrdiff_t(dst * dv));
    }
  return b;
}

MethodOutput run_lean(const AttentionInput& in_given, LeanOptions o, const Pipeline& p,
                      const MethodValues& v, const std::string& method) {
  const AttentionInput batch =
      in_given.launch ? launch_batch(in_given, &o, method, true) : AttentionInput{};
  const AttentionInput& in = in_given.launch ? batch : in_given;
  LeanResult r;
  try {
    r = lean_attention(in, o, p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(method_message(method, e.what()));
  }
  // Inside a launch: the input's own sequences, from the target's place in the batch on.
  if (in_given.launch) {
    const std::size_t per = in_given.shape.o_size() / std::size_t(in_given.shape.batch);
    const std::size_t at = std::size_t(in_given.launch->target_index) * per;
    r.o = std::vector<double>(r.o.begin() + std::ptrdiff_t(at),
                              r.o.begin() + std::ptrdiff_t(at + in_given.shape.o_size()));
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

// The partition for the launch an input runs in (its own batch without one), for `attnsim
// schedule`: the CTAs, the tiles each takes, and how many splits the target's blocks get.
KernelSchedule lean_schedule(const AttentionInput& in, LeanOptions o, const std::string& method) {
  const AttentionInput b = in.launch ? launch_batch(in, &o, method, false) : in;
  LeanPlan plan;
  try {
    plan = lean_run_plan(b, o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(method_message(method, e.what()));
  }
  const int tb = in.launch ? in.launch->target_index : 0;
  int target_splits = 0, target_ctas_lo = 1 << 30, target_ctas_hi = -1;
  std::string cuts;
  for (const LeanSegment& g : plan.segments) {
    if (g.batch != tb) continue;
    target_splits = std::max(target_splits, g.split + 1);
    target_ctas_lo = std::min(target_ctas_lo, g.cta);
    target_ctas_hi = std::max(target_ctas_hi, g.cta);
  }
  // Where the target's first block (head 0, m-block 0) is cut: the n-tile ranges of its splits.
  std::vector<std::pair<int, std::string>> first;
  for (const LeanSegment& g : plan.segments)
    if (g.batch == tb && g.head == 0 && g.m_block == 0)
      first.push_back({g.split, std::to_string(g.n_begin) + "-" + std::to_string(g.n_end - 1)});
  std::sort(first.begin(), first.end());
  for (const auto& [split, range] : first) cuts += (cuts.empty() ? "" : ",") + range;
  KernelSchedule k;
  k.family = method;
  k.kernel = o.style == SplitStyle::kLean ? "lean_fwd_kernel (stream-K)" : "split-KV + combine";
  k.items.push_back({"batch", std::to_string(b.shape.batch), false,
                     "the launch's sequences (ragged context lengths: len_kv_per_batch)"});
  k.items.push_back({"tiles", std::to_string(plan.total_tiles) + " on " +
                                  std::to_string(plan.grid) + " CTAs",
                     false, o.style == SplitStyle::kLean
                                ? "stream-K: every CTA takes an equal share of all n-tiles"
                                : "one CTA per non-empty split"});
  k.items.push_back({"tile", std::to_string(plan.block_m) + "x" + std::to_string(plan.block_n),
                     true, "block_m x block_n of the kernel"});
  k.items.push_back({"target_splits", std::to_string(target_splits), false,
                     "the most splits any of the target's blocks is cut into"});
  k.items.push_back({"target_cuts", cuts, false,
                     "the n-tile ranges of the target's first block (head 0, m-block 0), by "
                     "split: where its partial results are cut and merged"});
  // Every block of the target: its (head, m-block, split, n-tile range), hashed (FNV-1a): equal
  // hashes, the same cuts in every block, the same arithmetic.
  std::vector<std::array<int, 5>> all;
  for (const LeanSegment& g : plan.segments)
    if (g.batch == tb) all.push_back({g.head, g.m_block, g.split, g.n_begin, g.n_end});
  std::sort(all.begin(), all.end());
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& a : all)
    for (int x : a) {
      h ^= std::uint64_t(std::uint32_t(x));
      h *= 1099511628211ull;
    }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  k.items.push_back({"target_partition", std::string(buf) + " (" + std::to_string(all.size()) +
                                             " segments)",
                     true, "every cut of every block of the target, hashed"});
  return k;
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
  lean.schedule = [](const MethodValues& v, const AttentionInput& in) {
    return lean_schedule(in, lean_options(v, in.dtype, SplitStyle::kLean), "lean");
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
  split.schedule = [style_of](const MethodValues& v, const AttentionInput& in) {
    return lean_schedule(in, lean_options(v, in.dtype, style_of(v)), "splitkv");
  };
  r.push_back(std::move(split));
}

}  // namespace attnsim
