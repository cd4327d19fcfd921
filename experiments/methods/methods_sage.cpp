// Registration of the SageAttention methods (sim/sage): `sage1` (the Triton kernel of
// SageAttention 1) and `sage2` (the CUDA kernels of SageAttention2/2++ per arch, and the paper).
// The option strings are a contract (issue 11): arch, pv_accum, qk, qk_gran, smooth_k, smooth_q,
// smooth_v, pv, smooth, in, target.
#include <stdexcept>

#include "experiments/common/error.hpp"
#include "experiments/methods/methods_sage.hpp"
#include "sim/sage/sage.hpp"

namespace attnsim {

namespace {

SageOptions sage_options(const MethodValues& v, bool sage1) {
  SageOptions o;
  auto get = [&](const char* k) -> std::string {
    auto it = v.find(k);
    return it == v.end() ? std::string() : it->second;
  };
  if (sage1) {
    o.arch = SageArch::kSage1;
  } else {
    const std::string a = get("arch");
    o.arch = a == "sm80"    ? SageArch::kSm80
             : a == "sm89"  ? SageArch::kSm89
             : a == "paper" ? SageArch::kPaper
                            : SageArch::kSm90;
    const std::string pa = get("pv_accum");
    o.pv_accum = pa == "fp32"        ? SagePvAccum::kFp32
                 : pa == "fp16+fp32" ? SagePvAccum::kFp16PlusFp32
                 : pa == "fp16"      ? SagePvAccum::kFp16
                 : pa == "fp32+fp32" ? SagePvAccum::kFp32PlusFp32
                 : pa == "fp32+fp16" ? SagePvAccum::kFp32PlusFp16
                                     : SagePvAccum::kDefault;
    o.target = get("target") == "h100" ? SageTarget::kH100 : SageTarget::kAda;
  }
  const std::string qk = get("qk");
  o.qk = qk == "int4" ? Encoding::kS4 : qk == "int8" ? Encoding::kS8 : Encoding::kFp32;
  o.qk_gran = get("qk_gran") == "default" ? std::string() : get("qk_gran");
  o.smooth_k = get("smooth_k") == "1";
  o.smooth_q = get("smooth_q") == "default" ? -1 : get("smooth_q") == "1" ? 1 : 0;
  o.smooth_v = get("smooth_v") == "1";
  const std::string pv = get("pv");
  o.pv = pv == "fp16"   ? Encoding::kFp16
         : pv == "e4m3" ? Encoding::kE4m3fn
         : pv == "e5m2" ? Encoding::kE5m2
         : pv == "int8" || pv == "int8_static" ? Encoding::kS8
                        : Encoding::kFp32;
  o.pv_int_static = pv == "int8_static";
  const std::string sm = get("smooth");
  o.smooth = sm == "smoothattn" ? SageSmooth::kSmoothAttn
             : sm == "hadamard" ? SageSmooth::kHadamard
                                : SageSmooth::kNone;
  o.in = get("in") == "fp16" ? Encoding::kFp16 : Encoding::kBf16;
  return o;
}

std::vector<MethodParam> shared_params(const std::string& gran_help) {
  return {
      {"qk", {"default", "int8", "int4"}, "default",
       "Q/K integer format (default: int8; int4 for arch=paper, which no public kernel has)"},
      {"qk_gran",
       {"default", "per_thread", "per_warp", "per_block", "per_token", "per_tensor"},
       "default",
       gran_help},
      {"smooth_k", {"0", "1"}, "1", "subtract K's per-channel mean (the entry points' default)"},
      {"smooth_q", {"default", "0", "1"}, "default",
       "the paper's smooth Q: Q minus its block mean, S += ΔS (default: on for arch=paper only)"},
      {"smooth_v", {"0", "1"}, "0",
       "smooth V (sm80 pv_accum=fp16, sm89 pv_accum=fp32, paper)"},
      {"pv", {"default", "fp16", "e4m3", "e5m2", "int8", "int8_static"}, "default",
       "P and V format (default: fp16 for sage1/sm80, e4m3 for sm89/sm90/paper; others: paper; "
       "int8: P per row and KV block, int8_static: P x 127 like e4m3's x 448)"},
      {"smooth", {"none", "smoothattn", "hadamard"}, "none",
       "the paper's outlier baselines on Q, K (SmoothQuant alpha 0.5; random Hadamard)"},
      {"in", {"bf16", "fp16"}, "bf16",
       "16-bit format a non-16-bit input is rounded to (RNE); fp16/bf16 dumps are used as they are"},
  };
}

MethodOutput run_sage(const AttentionInput& in, const MethodValues& v, const Pipeline& p,
                      bool sage1) {
  try {
    SageResult r = sage_attention(in, sage_options(v, sage1), p);
    return pipeline_output(std::move(r.r), r.pipeline);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// Combinations that cannot run whatever the input (checked at parse time on a d=128 shape, and
// again with the real shape when run).
void check_sage(const MethodValues& v, bool sage1) {
  const SageOptions o = sage_options(v, sage1);
  for (int d : {64, 128}) {
    AttentionShape s{1, 1, 1, 128, 128, d, d};
    try {
      (void)sage_pipeline(o, s);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
}

Pipeline sage_method_pipeline(const MethodValues& v, const AttentionInput& in, bool sage1) {
  SageOptions o = sage_options(v, sage1);
  o.in = sage_input_encoding(in, o);
  try {
    return sage_pipeline(o, in.shape.valid() ? in.shape : AttentionShape{1, 1, 1, 128, 128, 128, 128});
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

std::vector<std::string> sage_outside(const MethodValues& v) {
  const std::string sm = v.at("smooth");
  if (sm == "none") return {};
  return {"smooth=" + sm + ": " +
          (sm == "hadamard" ? std::string("a random Hadamard rotation of Q and K")
                            : std::string("SmoothQuant's migration of Q's outliers into K")) +
          " before the kernel (SageAttention2 Table 4's baseline, no kernel stage)"};
}

std::vector<MethodParam> sage2_params() {
  std::vector<MethodParam> p{
      {"arch", {"sm80", "sm89", "sm90", "paper"}, "sm90",
       "sm80: sageattn_qk_int8_pv_fp16_cuda; sm89: sageattn_qk_int8_pv_fp8_cuda (UNVERIFIED with "
       "target=ada: no Ada GPU); sm90: sageattn_qk_int8_pv_fp8_cuda_sm90; paper: SageAttention2 "
       "as written (UNVERIFIED with target=ada)"},
      {"pv_accum", {"default", "fp32", "fp16+fp32", "fp16", "fp32+fp32", "fp32+fp16"}, "default",
       "P*V accumulation (default: sm80 fp32, sm89 fp32+fp16 (SageAttention2++), sm90 and paper "
       "fp32+fp32)"},
      {"target", {"ada", "h100"}, "ada",
       "the GPU an sm89/paper FP8 mma.sync runs on: ada (sm_89 models, UNVERIFIED) or h100 "
       "(emulated by fp16 HMMAs, recorded)"},
  };
  for (MethodParam& x : shared_params("Q/K scale groups (default per_thread: the mma fragment "
                                      "layout, WARPQ/WARPK of the arch)"))
    p.push_back(x);
  return p;
}

}  // namespace

SageOptions sage_options_of(const MethodConfig& m) {
  if (m.spec->name != "sage1" && m.spec->name != "sage2")
    throw std::invalid_argument("sage_options_of: '" + m.spec->name + "' is not a SageAttention method");
  return sage_options(m.values, m.spec->name == "sage1");
}

void register_sage_methods(std::vector<MethodSpec>& r) {
  for (bool sage1 : {true, false}) {
    MethodSpec m;
    m.name = sage1 ? "sage1" : "sage2";
    m.check = [sage1](const MethodValues& v) { check_sage(v, sage1); };
    m.preset = [sage1](const MethodValues& v, const AttentionInput& in) {
      return sage_method_pipeline(v, in, sage1);
    };
    m.run_with = [sage1](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
      return run_sage(in, v, p, sage1);
    };
    m.outside = [](const MethodValues& v, const AttentionInput&) { return sage_outside(v); };
    if (sage1) {
      m.help =
          "SageAttention 1: sageattn_qk_int8_pv_fp16_triton as the H100 runs it (per-block INT8 "
          "Q/K with Q prescaled by sm_scale*log2e, smooth K, fp16 P*V; sim/sage); recorded on the "
          "H100";
      m.params = shared_params("Q/K scale groups (default per_block: BLKQ 128, BLKK 64)");
      r.push_back(std::move(m));
      continue;
    }
    m.help =
        "SageAttention2/2++: the public CUDA kernels as the H100 runs them, and the paper's "
        "algorithm (sim/sage)";
    m.params = sage2_params();
    r.push_back(std::move(m));
  }
}


}  // namespace attnsim
