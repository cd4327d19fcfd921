// `attnsim compare` (differences between two HDF5 files) and `attnsim gate` (the CI numeric
// regression gate). Exit codes follow h5diff: 0 same / within tolerance, 1 differences /
// regression, 2 error.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/error.hpp"
#include "experiments/sweep/compare.hpp"

namespace attnsim {

void add_compare_command(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto opt = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand("compare",
                                     "Differences between two HDF5 files, tensor by tensor and "
                                     "metric by metric (exit 0 same, 1 differ)");
  cmd->add_option("files", *files, "A.h5 B.h5")->required()->expected(2);
  cmd->add_option("--tol", opt->atol,
                  "absolute tolerance: elements differ when |A-B| > tol + rtol*|B|")
      ->capture_default_str();
  cmd->add_option("--rtol", opt->rtol, "relative tolerance (relative to B)")->capture_default_str();
  cmd->add_option("--exclude", opt->exclude,
                  "datasets to skip (a name, or a group prefix ending in '/')");
  cmd->add_option("--max-report", opt->max_report, "detail lines per dataset")
      ->capture_default_str();
  cmd->callback([files, opt]() {
    if (opt->atol < 0 || opt->rtol < 0) throw UsageError("--tol and --rtol must be >= 0");
    const int n = compare_files((*files)[0], (*files)[1], *opt, stdout);
    std::fflush(stdout);
    if (n > 0) throw UsageError("files differ in " + std::to_string(n) + " dataset(s)", 1);
  });
}

void add_gate_command(CLI::App& app) {
  auto baseline = std::make_shared<std::string>();
  auto results = std::make_shared<std::string>();
  auto rules = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "gate",
      "CI numeric regression gate: results vs a baseline under per-metric tolerances "
      "(exit 0 pass, 1 regression, 2 error)");
  cmd->add_option("--baseline", *baseline, "baseline results file (data/baselines/*.h5)")
      ->required();
  cmd->add_option("--results", *results, "new results file (attnsim sweep --output)")->required();
  cmd->add_option("--rules", *rules, "tolerances per metric (TOML, experiments/configs/gate*.toml)")
      ->required();
  cmd->callback([baseline, results, rules]() {
    const GateRules r = read_gate_rules(*rules);
    const GateResult g = run_gate(*baseline, *results, r, stdout);
    std::fflush(stdout);
    if (g.regressions > 0) {
      throw UsageError("gate failed: " + std::to_string(g.regressions) + " regression(s) against " +
                           *baseline + " (report above)",
                       1);
    }
  });
}

}  // namespace attnsim
