// Registration of the golden reference and of FlashAttention-2, the method whose options are the
// pipeline's whole vocabulary (so any composition of stage models is a `flash:...` string).
#include "experiments/methods/methods.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

void register_golden_methods(std::vector<MethodSpec>& r) {
  MethodSpec m;
  m.name = "golden";
  m.help = "FP64 attention (the reference; its own error is bounded in sim/golden/README.md)";
  m.run = [](const AttentionInput& in, const MethodValues&) {
    GoldenResult g = golden_attention(in);
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
