// Per-stage error attribution of a pipeline method (`attnsim attribute`): for each stage, the
// error against FP64 golden of (a) the method, (b) the method with only that stage made exact,
// (c) everything exact except that stage (sim/pipeline/stages.hpp defines the stages and their
// exact choices).
#pragma once

#include <string>
#include <vector>

#include "numerics/metrics.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

struct AttributionRow {
  std::string input;
  std::string stage;          // a pipeline_stages() name, or "all" (every stage at once)
  std::string method_choice;  // the method's choice for the stage
  std::string exact_choice;   // the exact choice
  bool differs = false;       // whether the method's choice is not already the exact one
  ErrorMetrics full;          // (a) the method
  ErrorMetrics only_exact;    // (b) the method with only this stage exact ("all": every stage)
  ErrorMetrics only_this;     // (c) everything exact but this stage ("all": the method)
  std::string note;           // coupled stages switched along (stages.hpp Counterfactual)
};

// The rows of one input: "all" first, then one per stage in pipeline_stages() order. `golden` is
// the FP64 golden output of `in`. Runs 2 x stages + 2 pipelines.
std::vector<AttributionRow> attribute_stages(const AttentionInput& in, const std::string& input,
                                             const Pipeline& method,
                                             const std::vector<double>& golden);

}  // namespace attnsim
