// Registration of the AMLA methods (sim/amla): `amla` with variant=base|paper|cann. The option
// strings are a contract (issue 13: variant, block; the accumulation options are qk_sum/pv_sum
// since the pipeline's stage keys became every preset's, where pv_acc is P·V's c|chunk).
#include <stdexcept>

#include "experiments/common/error.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/amla/amla.hpp"

namespace attnsim {

namespace {

AmlaAcc acc_of(const std::string& s) {
  return s == "exact"      ? AmlaAcc::kExact
         : s == "fp32_seq" ? AmlaAcc::kFp32Seq
         : s == "block16"  ? AmlaAcc::kBlock16
                           : AmlaAcc::kDefault;
}

// The options for an input: `in=auto` takes a 16-bit dump's own dtype, else bf16 (the paper's).
AmlaOptions amla_options(const MethodValues& v, const std::string& dtype) {
  AmlaOptions o;
  const std::string var = v.at("variant");
  o.variant = var == "base" ? AmlaVariant::kBase : var == "paper" ? AmlaVariant::kPaper : AmlaVariant::kCann;
  const std::string in = v.at("in");
  o.in = in == "fp16"                         ? Encoding::kFp16
         : in == "bf16"                       ? Encoding::kBf16
         : dtype == "float16"                 ? Encoding::kFp16
                                              : Encoding::kBf16;
  o.block = std::stoi(v.at("block"));
  o.block_q = std::stoi(v.at("bq"));
  o.qk_sum = acc_of(v.at("qk_sum"));
  o.pv_sum = acc_of(v.at("pv_sum"));
  const std::string c = v.at("comp");
  o.comp = c == "none"       ? AmlaComp::kNone
           : c == "alg2"     ? AmlaComp::kAlg2
           : c == "appendix" ? AmlaComp::kAppendix
           : c == "cann"     ? AmlaComp::kCann
                             : AmlaComp::kDefault;
  o.target = v.at("target") == "h100" ? AmlaTarget::kH100 : AmlaTarget::kAscend;
  const std::string out = v.at("out");
  if (out == "bf16") o.out = Encoding::kBf16;
  if (out == "fp16") o.out = Encoding::kFp16;
  if (out == "fp32") o.out = Encoding::kFp32;
  return o;
}

Pipeline amla_method_pipeline(const MethodValues& v, const std::string& dtype) {
  try {
    return amla_pipeline(amla_options(v, dtype));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

void register_amla_methods(std::vector<MethodSpec>& r) {
  const std::vector<std::string> acc{"default", "exact", "fp32_seq", "block16"};
  std::vector<MethodParam> p{
      {"variant", {"base", "paper", "cann"}, "cann",
       "base: Algorithm 1 (FP32 rescale by multiplication); paper: Algorithm 2 as written, with "
       "Appendix A's compensation direction (comp=alg2: line 11 as printed); cann: the public CANN "
       "kernel (hicann/ops-transformer fia_block_vec_nonquant_mla.h)"},
      {"in", {"auto", "bf16", "fp16"}, "auto",
       "Q/K/V and P format (auto: a 16-bit dump's own, else bf16; FP32 inputs are rounded RNE)"},
      {"block", {}, "512", "KV block (the paper fixes 512)", 1},
      {"bq", {}, "128", "query rows per tile (G = 128 heads of MLA decode in one tile)", 1},
      {"qk_sum", acc, "default",
       "QK^T accumulation: exact (exact sum rounded once to FP32), fp32_seq, block16 (H100 HMMA "
       "model); default: exact for target=ascend, block16 for target=h100"},
      {"pv_sum", acc, "default", "P*V accumulation (the Cube unit's is not public): as qk_sum"},
      {"comp", {"default", "none", "alg2", "appendix", "cann"}, "default",
       "BF16 compensation of the integer add (paper, cann): default = the variant's own (paper: "
       "appendix, Appendix A's direction; cann: cof(i-1)/cof(i)); alg2: Algorithm 2 line 11 as "
       "printed (the reciprocal ratio); none: no compensation"},
      {"target", {"ascend", "h100"}, "ascend",
       "ascend: natural-log domain, Exp assumed correctly rounded; h100: the GPU analogue of "
       "cuda_check/amla (log2 domain, ex2.approx.ftz)"},
      {"out", {"default", "bf16", "fp16", "fp32"}, "default", "output format (default: the input's)"},
  };
  MethodSpec m;
  m.name = "amla";
  m.help =
      "AMLA (Liao et al.): FlashAttention rescaled by INT32 addition on O's FP32 bits, with BF16 "
      "error compensation (sim/amla), a preset of the attention pipeline";
  m.params = p;
  m.check = [](const MethodValues& v) { (void)amla_method_pipeline(v, "float32"); };
  m.preset = [](const MethodValues& v, const AttentionInput& in) {
    return amla_method_pipeline(v, in.dtype);
  };
  m.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& pl) {
    try {
      MethodOutput out = pipeline_output(run_pipeline(in, pl), pl);
      out.resolved["in"] = encoding_name(amla_options(v, in.dtype).in);  // in=auto's format
      return out;
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  };
  r.push_back(std::move(m));
}

}  // namespace attnsim
