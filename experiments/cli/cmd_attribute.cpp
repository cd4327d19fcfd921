// `attnsim attribute`: where a method's error comes from, stage by stage (experiments/analysis/
// attribute.hpp): per stage, the error of the method, of the method with only that stage exact,
// and of everything exact but that stage, each against FP64 golden.
#include <omp.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experiments/analysis/attribute.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/progress.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/methods/memory_estimate.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/repro/repro.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim {

namespace {

struct AttributeOptions {
  std::string method, input, synthetic, group, out;
  bool allow_nonfinite = false, quiet = false, counters = false;
};

// --counters: per input, the silent-failure counters of the method's own run (the `all` row's
// (a)), StageCounters::column_values() order.
ReproTable attribution_table(const std::vector<AttributionRow>& rows,
                             const std::map<std::string, std::vector<std::int64_t>>& counted) {
  ReproTable t;
  t.title =
      "Per-stage error attribution against FP64 golden: (a) the method, (b) the method with only "
      "this stage exact, (c) everything exact except this stage";
  t.columns = {{"input", 's', "input (dump[:group] or synthetic:SPEC)"},
               {"stage", 's', "pipeline stage (sim/pipeline/stages.hpp); all = every stage"},
               {"method", 's', "the method's choice for the stage"},
               {"exact", 's', "the stage's exact choice"},
               {"differs", 'i', "1 when the method's choice is not the exact one"},
               {"rel_fro", 'f', "(a) method: relative Frobenius error"},
               {"cosine", 'f', "(a) method: cosine similarity"},
               {"max_abs", 'f', "(a) method: max absolute error"},
               {"exact_only_rel_fro", 'f', "(b) only this stage exact: relative Frobenius error"},
               {"exact_only_cosine", 'f', "(b) only this stage exact: cosine similarity"},
               {"exact_only_max_abs", 'f', "(b) only this stage exact: max absolute error"},
               {"this_only_rel_fro", 'f', "(c) only this stage inexact: relative Frobenius error"},
               {"this_only_cosine", 'f', "(c) only this stage inexact: cosine similarity"},
               {"this_only_max_abs", 'f', "(c) only this stage inexact: max absolute error"},
               {"note", 's', "coupled stages switched along in (b) or (c), and why"}};
  const std::vector<std::string> names = StageCounters::column_names();
  if (!counted.empty())
    for (const std::string& n : names)
      t.columns.push_back({n, 'i',
                           "--counters: the method's own run's silent-failure count (row `all`; "
                           "-1 on the stage rows)"});
  for (const AttributionRow& r : rows) {
    std::vector<ReproTable::Cell> row{{r.input},
                                      {r.stage},
                                      {r.method_choice},
                                      {r.exact_choice},
                                      {"", double(r.differs)},
                                      {"", r.full.rel_fro},
                                      {"", r.full.cosine},
                                      {"", r.full.max_abs},
                                      {"", r.only_exact.rel_fro},
                                      {"", r.only_exact.cosine},
                                      {"", r.only_exact.max_abs},
                                      {"", r.only_this.rel_fro},
                                      {"", r.only_this.cosine},
                                      {"", r.only_this.max_abs},
                                      {r.note}};
    if (!counted.empty()) {
      const auto it = counted.find(r.input);
      const bool all = r.stage == "all" && it != counted.end();
      for (std::size_t c = 0; c < names.size(); ++c)
        row.push_back({"", all ? double(it->second[c]) : -1.0});
    }
    t.add_row(std::move(row));
  }
  return t;
}

void print_rows(const std::vector<AttributionRow>& rows) {
  const AttributionRow& all = rows.front();
  std::printf("%s\n  method      rel_fro %.3e  cosine %.9f  max_abs %.3e\n", all.input.c_str(),
              all.full.rel_fro, all.full.cosine, all.full.max_abs);
  std::printf("  all exact   rel_fro %.3e  cosine %.9f  max_abs %.3e\n", all.only_exact.rel_fro,
              all.only_exact.cosine, all.only_exact.max_abs);
  std::printf("  %-10s %-44s %12s %12s %12s %12s  %s\n", "stage", "method's choice", "(b) rel_fro",
              "(b) cosine", "(c) rel_fro", "(c) cosine", "note");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const AttributionRow& r = rows[i];
    std::string choice = r.method_choice + (r.differs ? "" : " (exact)");
    std::printf("  %-10s %-44s %12.3e %12.9f %12.3e %12.9f  %s\n", r.stage.c_str(), choice.c_str(),
                r.only_exact.rel_fro, r.only_exact.cosine, r.only_this.rel_fro, r.only_this.cosine,
                r.note.c_str());
  }
}

void run_attribute(const AttributeOptions& opt) {
  if (opt.input.empty() == opt.synthetic.empty())
    throw UsageError("attribute needs exactly one of --input and --synthetic");
  if (!opt.group.empty() && opt.input.empty())
    throw UsageError("--group applies to --input dumps only");
  const MethodConfig method = parse_method(opt.method);
  if (!method.is_pipeline())
    throw UsageError("method '" + method.spec->name +
                     "' is not a pipeline: it has no stages to attribute");
  std::vector<std::string> prefixes{""};
  if (!opt.input.empty()) {
    prefixes = select_dump_prefixes(opt.input, opt.group);
  }
  if (!opt.out.empty()) {
    const std::string& o = opt.out;
    auto ends = [&](const std::string& e) {
      return o.size() >= e.size() && o.compare(o.size() - e.size(), e.size(), e) == 0;
    };
    if (!ends(".csv") && !ends(".h5") && !ends(".hdf5"))
      throw UsageError("--out '" + o + "': expected a .csv, .h5 or .hdf5 file name");
    check_output_path(o, {opt.input});
  }
  // The pipeline runs once per variant, one after the other: a run's memory.
  check_points_memory(method, opt.input, prefixes, opt.synthetic, omp_get_max_threads(),
                      "attribute");
  // The data of every group before the first is computed and printed.
  if (prefixes.size() > 1) check_attention_dumps(opt.input, prefixes, opt.allow_nonfinite);
  std::vector<AttributionRow> all_rows;
  std::map<std::string, std::vector<std::int64_t>> counted;
  for (const std::string& prefix : prefixes) {
    const AttentionInput in = opt.input.empty()
                                  ? make_synthetic(opt.synthetic)
                                  : read_attention_dump(opt.input, prefix, opt.allow_nonfinite);
    const std::string name =
        opt.input.empty()
            ? "synthetic:" + opt.synthetic
            : dump_input_name(opt.input, prefix);
    std::mutex mu;
    std::string now = "golden";
    ProgressLine line(progress_wanted(opt.quiet), "attribute", [&] {
      const std::lock_guard<std::mutex> lock(mu);
      return (prefixes.size() > 1 ? name + ": " : std::string()) + now;
    });
    const std::vector<AttributionRow> rows = attribute_stages(
        in, name, method, golden_attention_ref(method.problem(in), method.causal_align(in)),
        [&](int done, int total, const std::string& what) {
          const std::lock_guard<std::mutex> lock(mu);
          now = "run " + std::to_string(std::min(done + 1, total)) + "/" + std::to_string(total) +
                " " + what;
        });
    line.stop();
    // --counters: the method run once more under a counter scope (the stage references; the
    // same bits as attribute_stages' own run of the method).
    StageCounters c;
    if (opt.counters) {
      const CounterScope scope(&c);
      (void)method.run(in);
      counted[name] = c.column_values();
    }
    // The method line once the first input has been read and attributed: a bad input is an
    // error line, not a report that stops after its title.
    // The short label (the canonical string, hundreds of characters, is in --out's `method`).
    if (!opt.quiet && all_rows.empty()) std::printf("method %s\n", method.short_name().c_str());
    if (!opt.quiet) print_rows(rows);
    if (!opt.quiet && opt.counters)
      std::printf("  counters of the method's run:\n%s",
                  c.total() ? c.describe().c_str() : "  none\n");
    all_rows.insert(all_rows.end(), rows.begin(), rows.end());
  }
  if (!opt.out.empty()) {
    attribution_table(all_rows, counted)
        .write_table(opt.out, {{"method", method.canonical()}, {"command", "attribute"}});
    if (!opt.quiet) std::printf("wrote %s\n", opt.out.c_str());
  }
}

}  // namespace

void add_attribute_command(CLI::App& app) {
  auto opt = std::make_shared<AttributeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "attribute",
      "Per-stage error attribution of a method against FP64 golden: per stage, (a) the method, "
      "(b) only that stage exact, (c) everything exact but that stage");
  cmd->add_option("--method", opt->method, "method configuration (see `attnsim methods`)")
      ->required();
  cmd->add_option("--input", opt->input,
                  "HDF5 dump with q, k, v (every layer_NN group unless --group)");
  cmd->add_option("--group", opt->group, "one layer group of the dump, e.g. layer_03")
      ->check(non_empty());
  cmd->add_option("--synthetic", opt->synthetic, "synthetic input spec instead of a dump");
  cmd->add_option("--out,--output", opt->out,
                  "also write the rows to FILE.csv or FILE.h5 (atomically)")
      ->check(output_name());
  cmd->add_flag("--counters", opt->counters,
                "the silent-failure counters of the method's own run, printed after each input's "
                "rows and written as cnt_<stage>_<event> columns of its `all` row (-1 elsewhere)");
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite, "accept NaN/Inf in inputs");
  cmd->add_flag("--quiet", opt->quiet, "print nothing on success");
  add_max_memory_option(cmd);
  cmd->callback([opt]() { run_attribute(*opt); });
}

}  // namespace attnsim
