// Registration of `flex`: FlexAttention (torch.nn.attention.flex_attention under torch.compile,
// torch 2.11 / Triton 3.6) as the H100 runs its prefill template (sim/flex).
#include <cmath>
#include <stdexcept>
#include <string>

#include "experiments/common/error.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/flex/flex.hpp"

namespace attnsim {

namespace {

// The shape a preset is asked about before any input (parse-time checks).
const AttentionShape kNoInputShape{1, 1, 1, 128, 128, 128, 128};

FlexOptions flex_options(const MethodValues& v, const std::string& dump_dtype) {
  FlexOptions o;
  o.dtype = dtype_option(v.at("dtype"), dump_dtype);
  return o;
}

MethodSpec flex_spec() {
  MethodSpec m;
  m.name = "flex";
  m.help =
      "FlexAttention (torch.nn.attention.flex_attention under torch.compile, torch 2.11, Triton "
      "3.6) as the H100 runs it: the prefill template (fp16/bf16, GQA, no mask or causal "
      "top-left, sliding window, softcap) and the decode template (short queries, no mask), "
      "its natural-log LSE; recorded bit for bit (sim/flex)";
  m.params = {
      {"dtype",
       {"auto", "fp16", "bf16"},
       "auto",
       "the tensors' dtype (auto: a 16-bit dump's own, else bf16; FP32 inputs rounded RNE)"},
      {"window",
       {},
       "0",
       "a sliding window on the causal mask, mask_mod (q >= kv) & (q - kv < W): every query sees "
       "its W latest keys (0: none; needs a causal input)",
       0},
      {"softcap",
       {},
       "0",
       "score_mod C·tanh(s / C) on the scaled score (Gemma 2's 50, Grok's 30; 0: none), with "
       "libdevice's tanhf as Triton inlines it",
       0,
       true},
  };
  m.check = [](const MethodValues& v) {
    (void)flex_options(v, "float32");
    const double c = std::stod(v.at("softcap"));
    if (!(c >= 0) || std::isinf(c))
      throw UsageError("flex: softcap must be a finite number >= 0 (0: none), got " +
                       v.at("softcap"));
  };
  m.problem = [](const MethodValues& v, AttentionInput& in) {
    in.window = std::stoi(v.at("window"));
    in.softcap = std::stod(v.at("softcap"));
  };
  m.preset = [](const MethodValues& v, const AttentionInput& in) {
    return usage_errors([&] {
      return flex_pipeline(flex_options(v, in.dtype), launch_shape_or(in, kNoInputShape, "flex"),
                           in.causal, launch_sms(in.launch.get()));
    });
  };
  m.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    (void)v;
    return usage_errors([&] { return pipeline_output(run_pipeline(in, p), p); });
  };
  m.notes = [](const MethodValues& v, const AttentionInput& in) {
    return flex_unverified(flex_options(v, in.dtype), shape_or(in, kNoInputShape), in.causal);
  };
  m.schedule = [](const MethodValues& v, const AttentionInput& in) {
    return usage_errors([&] {
      return flex_schedule(flex_options(v, in.dtype), shape_or(in, kNoInputShape), in.causal,
                           in.launch.get());
    });
  };
  return m;
}

}  // namespace

void register_flex_methods(std::vector<MethodSpec>& r) { r.push_back(flex_spec()); }

}  // namespace attnsim
