// Registration of the golden reference and of FlashAttention-2, the pipeline preset that exposes
// every stage option (so any composition of stage models is a `flash:...` method string).
#include "experiments/methods/methods.hpp"
#include "experiments/methods/pipeline_options.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

void register_golden_methods(std::vector<MethodSpec>& r) {
  r.push_back({"golden",
               "FP64 attention (the reference; its own error is bounded in sim/golden/README.md)",
               {},
               [](const AttentionInput& in, const MethodValues&) {
                 GoldenResult g = golden_attention(in);
                 return MethodOutput{std::move(g.o), "fp64", std::move(g.lse)};
               },
               {},
               {}});
}

void register_flash_methods(std::vector<MethodSpec>& r) {
  // FA2's defaults (sim/flash/README.md): the table's own defaults are FA2's.
  r.push_back({"flash",
               "FlashAttention-2 forward (sim/flash), a preset of the attention pipeline "
               "(sim/pipeline): every stage option below can be changed",
               pipeline_params(), run_pipeline_method,
               [](const MethodValues& v) { (void)pipeline_from_options(v); },
               [](const MethodValues& v, const AttentionInput&) {
                 return pipeline_from_options(v);
               }});
}

}  // namespace attnsim
