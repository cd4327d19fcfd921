// Registration of the golden reference and of FlashAttention-2, the method whose options are the
// pipeline's whole vocabulary (so any composition of stage models is a `flash:...` string).
#include "experiments/methods/methods.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

CausalAlign golden_causal_align(const MethodValues& v) {
  const auto it = v.find("causal");
  return it != v.end() && it->second == "top_left" ? CausalAlign::kTopLeft
                                                   : CausalAlign::kBottomRight;
}

void register_golden_methods(std::vector<MethodSpec>& r) {
  MethodSpec m;
  m.name = "golden";
  m.help = "FP64 attention (the reference; its own error is bounded in sim/golden/README.md)";
  // The causal mask's alignment on causal inputs with len_q != len_kv (sim/problem.hpp): every
  // kernel is measured against golden with its own, this option computes either.
  m.params.push_back({"causal", {"bottom_right", "top_left"}, "bottom_right",
                      "which keys a causal mask hides when len_q != len_kv: bottom-right aligned "
                      "(FlashAttention-2, the default) or top-left (key j > query i: PyTorch SDPA, "
                      "SageAttention)",
                      1, false, true});
  m.run = [](const AttentionInput& in, const MethodValues& v) {
    GoldenResult g = golden_attention(in, golden_causal_align(v));
    return MethodOutput{std::move(g.o), "fp64", std::move(g.lse), {}};
  };
  r.push_back(std::move(m));
}

void register_flash_methods(std::vector<MethodSpec>& r) {
  // FA2's defaults are Pipeline{}'s (sim/flash/README.md); the registry adds every stage key with
  // them as defaults.
  MethodSpec m;
  m.name = "flash";
  m.help =
      "FlashAttention-2 forward (sim/flash), the attention pipeline with FA2's stages "
      "(sim/pipeline): every stage option below can be changed";
  m.preset = [](const MethodValues&, const AttentionInput&) { return Pipeline{}; };
  m.run_with = [](const AttentionInput& in, const MethodValues&, const Pipeline& p) {
    return pipeline_output(run_pipeline(in, p), p);
  };
  r.push_back(std::move(m));
}

}  // namespace attnsim
