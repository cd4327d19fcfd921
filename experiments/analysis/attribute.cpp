// Per-stage error attribution (see attribute.hpp).
#include "experiments/analysis/attribute.hpp"

#include "sim/pipeline/stages.hpp"

namespace attnsim {

std::vector<AttributionRow> attribute_stages(const AttentionInput& in, const std::string& input,
                                             const Pipeline& method,
                                             const std::vector<double>& golden) {
  auto err = [&](const Pipeline& p) { return error_metrics(run_pipeline(in, p).o, golden); };
  const Pipeline exact = exact_pipeline(method);
  const ErrorMetrics full = err(method);
  std::vector<AttributionRow> rows;
  AttributionRow all;
  all.input = input;
  all.stage = "all";
  all.method_choice = describe(method);
  all.exact_choice = describe(exact);
  all.differs = true;
  all.full = full;
  all.only_exact = err(exact);
  all.only_this = full;
  rows.push_back(all);
  for (const StageInfo& s : pipeline_stages()) {
    AttributionRow r;
    r.input = input;
    r.stage = s.name;
    r.method_choice = stage_choice(method, s.stage);
    r.exact_choice = stage_choice(exact, s.stage);
    r.differs = stage_differs(method, exact, s.stage);
    r.full = full;
    const Counterfactual b = only_stage_exact(method, s.stage);
    const Counterfactual c = only_stage_inexact(method, s.stage);
    r.only_exact = err(b.pipeline);
    r.only_this = err(c.pipeline);
    if (!b.note.empty()) r.note = "(b) " + b.note;
    if (!c.note.empty()) r.note += (r.note.empty() ? "" : "; ") + ("(c) " + c.note);
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace attnsim
