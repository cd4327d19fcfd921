// Per-stage error attribution (see attribute.hpp).
#include "experiments/analysis/attribute.hpp"

#include <cstring>

#include "experiments/common/error.hpp"
#include "sim/pipeline/attribution.hpp"

namespace attnsim {

namespace {

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

std::string joined(const std::vector<std::string>& v) {
  std::string r;
  for (const std::string& s : v) r += (r.empty() ? "" : "; ") + s;
  return r;
}

}  // namespace

std::vector<AttributionRow> attribute_stages(const AttentionInput& in, const std::string& input,
                                             const MethodConfig& method,
                                             const std::vector<double>& golden,
                                             const ProgressFn& progress) {
  if (!method.is_pipeline())
    throw UsageError("method '" + method.spec->name +
                     "' is not a pipeline: it has no stages to attribute");
  const Pipeline p = method.pipeline(in);
  // Runs: the method, its pipeline, all exact, and two per stage.
  const int total = 3 + 2 * int(pipeline_stages().size());
  int done = 0;
  auto step = [&](const std::string& what) {
    if (progress) progress(done++, total, what);
  };
  auto err = [&](const Pipeline& x, const std::string& what) {
    step(what);
    return error_metrics(method.run_with(in, x).o, golden);
  };
  // The invariant that makes the table mean something: the pipeline reported is the one the
  // method computes with, bit for bit.
  step("the method");
  const std::vector<double> own = method.run(in).o;
  step("its pipeline");
  const std::vector<double> via = method.run_with(in, p).o;
  if (!same_bits(own, via))
    throw UsageError("attribute: the pipeline of " + method.short_name() +
                     " does not reproduce the method's own output on " + input +
                     " (not attributed)");
  const ErrorMetrics full = error_metrics(own, golden);
  const Pipeline exact = exact_pipeline(p);
  const ErrorMetrics all_exact = err(exact, "all stages exact");
  std::vector<AttributionRow> rows;
  AttributionRow all;
  all.input = input;
  all.stage = "all";
  all.method_choice = describe(p);
  all.exact_choice = describe(exact);
  all.differs = true;
  all.full = full;
  all.only_exact = all_exact;
  all.only_this = full;
  rows.push_back(all);
  for (const StageInfo& s : pipeline_stages()) {
    AttributionRow r;
    r.input = input;
    r.stage = s.name;
    r.method_choice = stage_choice(p, s.stage);
    r.exact_choice = stage_choice(exact, s.stage);
    r.differs = stage_differs(p, exact, s.stage);
    r.full = full;
    try {
      const Counterfactual b = only_stage_exact(p, s.stage);
      const Counterfactual c = only_stage_inexact(p, s.stage);
      r.only_exact = err(b.pipeline, std::string("only ") + s.name + " exact");
      r.only_this = err(c.pipeline, std::string("only ") + s.name + " as the method's");
      if (!b.note.empty()) r.note = "(b) " + b.note;
      if (!c.note.empty()) r.note += (r.note.empty() ? "" : "; ") + ("(c) " + c.note);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("attribute: stage ") + s.name + ": " + e.what());
    }
    rows.push_back(std::move(r));
  }
  const std::vector<std::string> outside = method.outside(in);
  if (!outside.empty()) {
    AttributionRow r;
    r.input = input;
    r.stage = "outside";
    r.method_choice = joined(outside);
    r.exact_choice = "(kept: no stage holds it)";
    r.differs = true;
    r.full = full;
    r.only_exact = all_exact;
    r.only_this = all_exact;
    r.note = "not attributed: (b) and (c) are the error with every stage exact, what these steps "
             "leave";
    rows.push_back(std::move(r));
  }
  if (progress) progress(total, total, "done");
  return rows;
}

}  // namespace attnsim
