// `attnsim compare` (differences between two HDF5 files) and `attnsim gate` (the CI numeric
// regression gate). Exit codes follow h5diff: 0 same / within tolerance, 1 differences /
// regression, 2 error.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/sweep/compare.hpp"

namespace attnsim {

namespace {

// The report reaches stdout only once it is complete: an input found bad halfway (a chunk that
// fails its checksum, a dataset of a type that cannot be compared) is then one error line and no
// partial report. `write` prints into the buffer and returns the command's count.
template <class Write>
int buffered_report(Write&& write) {
  struct Buffer {
    char* data = nullptr;
    std::size_t size = 0;
    std::FILE* f = nullptr;
    ~Buffer() {
      if (f) std::fclose(f);
      std::free(data);
    }
  } b;
  b.f = ::open_memstream(&b.data, &b.size);
  if (!b.f) throw UsageError("cannot allocate the report");
  const int n = write(b.f);
  std::fclose(b.f);
  b.f = nullptr;
  std::fwrite(b.data, 1, b.size, stdout);
  std::fflush(stdout);
  return n;
}

// Both commands hold one dataset of each file at a time, as stored and as FP64: 16 bytes per
// element of the largest dataset, twice.
void check_compare_memory(const std::string& a, const std::string& b, const char* what) {
  double worst = 0;
  for (const std::string& path : {a, b}) {
    const H5Reader r(path);
    for (const H5DatasetInfo& i : r.datasets()) {
      double n = 1;
      for (auto d : i.dims) n *= double(d);
      worst = std::max(worst, n);
    }
  }
  check_memory(32.0 * worst + 64.0 * (1 << 20), what);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto opt = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand("compare",
                                     "Differences between two HDF5 files, tensor by tensor and "
                                     "metric by metric (exit 0 same, 1 differ)");
  cmd->add_option("files", *files, "A.h5 B.h5")->required()->expected(2);
  cmd->add_option("--tol", opt->atol,
                  "absolute tolerance: elements differ when |A-B| > tol + rtol*|B|")
      ->check(finite_at_least(0))
      ->capture_default_str();
  cmd->add_option("--rtol", opt->rtol, "relative tolerance (relative to B)")
      ->check(finite_at_least(0))
      ->capture_default_str();
  cmd->add_option("--exclude", opt->exclude,
                  "datasets to skip (a name, or a group prefix ending in '/')");
  cmd->add_option("--max-report", opt->max_report, "detail lines per dataset")
      ->check(integer_in(0))
      ->capture_default_str();
  add_max_memory_option(cmd);
  cmd->callback([files, opt]() {
    if (opt->atol < 0 || opt->rtol < 0) throw UsageError("--tol and --rtol must be >= 0");
    check_compare_memory((*files)[0], (*files)[1], "compare");
    const int n = buffered_report(
        [&](std::FILE* out) { return compare_files((*files)[0], (*files)[1], *opt, out); });
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
  add_max_memory_option(cmd);
  cmd->callback([baseline, results, rules]() {
    const GateRules r = read_gate_rules(*rules);
    check_compare_memory(*baseline, *results, "gate");
    const int regressions = buffered_report(
        [&](std::FILE* out) { return run_gate(*baseline, *results, r, out).regressions; });
    if (regressions > 0) {
      throw UsageError("gate failed: " + std::to_string(regressions) + " regression(s) against " +
                           *baseline + " (report above)",
                       1);
    }
  });
}

}  // namespace attnsim
