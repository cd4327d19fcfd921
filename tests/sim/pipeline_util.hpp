// Test helper: a pipeline from method-string options ("qkv=bf16,p=bf16") on top of a base (FA2's
// by default), through the pipeline's own vocabulary (sim/pipeline/options.hpp).
#pragma once

#include <string>

#include "numerics/isa.hpp"
#include "sim/hooks.hpp"
#include "sim/pipeline/options.hpp"

namespace attnsim::simtest {

inline Pipeline with_options(const std::string& text, Pipeline base = Pipeline{}) {
  OptionMap m;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t eq = item.find('=');
    if (!item.empty()) m[item.substr(0, eq)] = item.substr(eq + 1);
    pos = comma + 1;
  }
  apply_options(base, m, technique_hooks());
  validate(base);
  return base;
}

// Caps the fast kernels' instruction set for a scope (Isa::kScalar: the stage references alone).
struct IsaScope {
  explicit IsaScope(Isa isa) : saved(active_isa()) { set_isa(isa); }
  ~IsaScope() { set_isa(saved); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  Isa saved;
};

// O of a pipeline as FP32 values (the output format's values), and its LSE.
inline std::vector<float> run_o(const AttentionInput& in, const Pipeline& p) {
  const PipelineResult r = run_pipeline(in, p);
  return std::vector<float>(r.o.begin(), r.o.end());
}

}  // namespace attnsim::simtest
