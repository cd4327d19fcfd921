// Per-stage error attribution of a pipeline method (`attnsim attribute`): for each stage, the
// error against FP64 golden of (a) the method, (b) the method with only that stage made exact,
// (c) everything exact except that stage (sim/pipeline/attribution.hpp defines the stages and
// their exact choices). Every counterfactual pipeline runs through the method's own schedule
// (split partitions, decode over a cache, input transforms), so what is attributed is what the
// method computes; steps of the technique outside its pipeline are reported, not attributed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "numerics/metrics.hpp"

namespace attnsim {

struct AttributionRow {
  std::string input;
  std::string stage;          // a pipeline_stages() name, "all" (every stage at once), or
                              // "outside" (the technique's steps outside its pipeline)
  std::string method_choice;  // the method's choice for the stage
  std::string exact_choice;   // the exact choice
  bool differs = false;       // whether the method's choice is not already the exact one
  ErrorMetrics full;          // (a) the method
  ErrorMetrics only_exact;    // (b) the method with only this stage exact ("all", "outside":
                              // every stage exact)
  ErrorMetrics only_this;     // (c) everything exact but this stage ("all": the method;
                              // "outside": every stage exact)
  std::string note;           // coupled stages switched along (Counterfactual::note)
};

// The rows of one input: "all" first, then one per stage in pipeline_stages() order, then
// "outside" when the method has steps outside its pipeline. `golden` is the FP64 golden output of
// `in`. Runs the method 2 x stages + 3 times. Throws UsageError (one line) when the pipeline the
// method reports does not reproduce the method's own output bit for bit on this input.
// `progress` (optional): called on the caller's thread before each run of the method's pipeline
// (done, total, what), and once more with done == total at the end.
using ProgressFn = std::function<void(int done, int total, const std::string& what)>;
std::vector<AttributionRow> attribute_stages(const AttentionInput& in, const std::string& input,
                                             const MethodConfig& method,
                                             const std::vector<double>& golden,
                                             const ProgressFn& progress = {});

}  // namespace attnsim
