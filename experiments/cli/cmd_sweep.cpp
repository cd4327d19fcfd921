// `attnsim sweep` and `attnsim methods`: run methods over inputs and seeds, measure each against
// FP64 golden attention, print a table and write a columnar HDF5 results file.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "experiments/cli/build_info.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/error.hpp"
#include "experiments/cli/provenance.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/methods/pipeline_options.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "experiments/sweep/sweep_engine.hpp"
#include "experiments/sweep/sweep_metrics.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {

struct SweepOptions {
  std::string config;
  std::vector<std::string> methods, inputs, synthetic, grid;
  int seeds = 1;
  std::string output;
  bool quiet = false, allow_nonfinite = false, resume = false, report_time = false;
  std::int64_t max_points = -1;
};

std::string command_line_text;

std::string toml_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

// Reads a sweep TOML file (CLI11's TOML reader) into the options not set on the command line.
void apply_config(SweepOptions& opt, const CLI::App& cmd) {
  if (opt.config.empty()) return;
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(opt.config);
  } catch (const CLI::Error& e) {
    throw UsageError("cannot read config '" + opt.config + "': " + e.what());
  }
  auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  for (const auto& it : items) {
    const std::string key = it.name;
    if (!it.parents.empty() && !(it.parents.size() == 1 && it.parents[0] == "sweep")) {
      throw UsageError("config '" + opt.config + "': unknown section '" + it.parents[0] + "'");
    }
    if (key == "methods") {
      if (!given("--methods")) opt.methods = it.inputs;
    } else if (key == "input") {
      if (!given("--input")) opt.inputs = it.inputs;
    } else if (key == "synthetic") {
      if (!given("--synthetic")) opt.synthetic = it.inputs;
    } else if (key == "grid") {
      if (!given("--grid")) opt.grid = it.inputs;
    } else if (key == "seeds") {
      if (!given("--seeds")) {
        if (it.inputs.size() != 1)
          throw UsageError("config '" + opt.config + "': seeds takes one integer");
        try {
          opt.seeds = std::stoi(it.inputs[0]);
        } catch (const std::exception&) {
          throw UsageError("config '" + opt.config + "': seeds = '" + it.inputs[0] +
                           "' is not an integer");
        }
      }
    } else if (key == "output") {
      if (!given("--output") && it.inputs.size() == 1) opt.output = it.inputs[0];
    } else if (key == "allow_nonfinite" || key == "allow-nonfinite") {
      if (!it.inputs.empty()) opt.allow_nonfinite = opt.allow_nonfinite || it.inputs[0] == "true";
    } else {
      throw UsageError(
          "config '" + opt.config + "': unknown key '" + key +
          "' (allowed: methods, input, synthetic, grid, seeds, output, allow_nonfinite)");
    }
  }
}

void run_sweep(const SweepOptions& opt) {
  const SweepPlan plan = make_plan(opt.methods, opt.grid, opt.inputs, opt.synthetic, opt.seeds);
  if (opt.resume && opt.output.empty())
    throw UsageError("--resume needs --output (checkpoints sit beside it)");
  if (opt.max_points >= 0 && opt.output.empty())
    throw UsageError("--max-points needs --output (to resume from)");
  const int rank = mpi_rank();
  // Make sure the output path is writable before computing anything (the probe leaves nothing).
  if (!opt.output.empty() && rank == 0) AtomicFile probe(opt.output);

  SweepRunOptions ro;
  ro.allow_nonfinite = opt.allow_nonfinite;
  ro.progress = !opt.quiet && isatty(2) && std::getenv("CI") == nullptr;
  ro.checkpoint_base = opt.output;
  ro.resume = opt.resume;
  ro.max_points = opt.max_points;
  SweepOutcome res = run_plan(plan, ro);
  if (opt.report_time && rank == 0) {
    std::fprintf(stderr, "sweep_seconds=%.6f points=%lld ranks=%d threads=%d\n", res.seconds,
                 (long long)plan.points(), mpi_size(), omp_get_max_threads());
  }
  if (!res.complete) {
    if (rank != 0) return;
    throw UsageError("sweep stopped by --max-points before its " + std::to_string(plan.points()) +
                         " points were done; completed points are in " + opt.output +
                         ".ckpt.*; rerun with --resume to finish",
                     3);
  }
  if (rank != 0) return;
  if (!opt.quiet) res.table.print(stdout);
  if (!opt.output.empty()) {
    H5Writer writer(opt.output);
    res.table.write(writer);
    write_provenance(writer, command_line_text);
    writer.attr_i64("/", "seeds", opt.seeds);
    writer.attr_string(
        "/", "config",
        "methods = " + toml_list(opt.methods) + "\ninput = " + toml_list(opt.inputs) +
            "\nsynthetic = " + toml_list(opt.synthetic) + "\ngrid = " + toml_list(opt.grid) +
            "\nseeds = " + std::to_string(opt.seeds) + "\n");
    writer.commit();
    remove_checkpoints(opt.output);
    std::printf("wrote %s (%zu points, %lld computed, %lld from checkpoints)\n", opt.output.c_str(),
                res.table.rows().size(), (long long)res.computed, (long long)res.restored);
  }
}

}  // namespace

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

const std::string& command_line() { return command_line_text; }

void write_provenance(H5Writer& w, const std::string& command) {
  w.attr_string("/", "attnsim_version", build::kVersion);
  w.attr_string("/", "git_commit", build::kGitCommit);
  w.attr_string("/", "command_line", command);
  w.attr_string("/", "date", now_utc());
}

void set_command_line(int argc, char** argv) {
  command_line_text.clear();
  for (int i = 0; i < argc; ++i) command_line_text += (i ? " " : "") + std::string(argv[i]);
}

void add_sweep_command(CLI::App& app) {
  auto opt = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run methods over inputs and seeds against FP64 golden attention; table + HDF5 results");
  cmd->add_option(
      "--config", opt->config,
      "TOML file with the option names as keys (methods, input, synthetic, seeds, output); "
      "options given on the command line take precedence (experiments/configs/)");
  cmd->add_option("--methods", opt->methods,
                  "method configurations, comma-separated (see `attnsim methods`)")
      ->delimiter(';');
  cmd->add_option("--input", opt->inputs,
                  "HDF5 dump(s) with q, k, v (or layer_NN/ groups of them)");
  cmd->add_option("--synthetic", opt->synthetic,
                  "synthetic input spec(s), see `attnsim synth --help`");
  cmd->add_option("--seeds", opt->seeds, "seeds 0..N-1 for each synthetic spec")
      ->capture_default_str();
  cmd->add_option("--grid", opt->grid,
                  "KEY=V1,V2,... (repeatable): run every method that has option KEY at each value "
                  "(cartesian product over the --grid options)");
  cmd->add_option(
      "--output", opt->output,
      "results .h5 (written atomically); completed points go to OUTPUT.ckpt.<rank> meanwhile");
  cmd->add_flag("--resume", opt->resume,
                "reuse the points completed by an interrupted run with the same --output");
  cmd->add_option("--max-points", opt->max_points,
                  "stop after this many points per rank (exit 3; finish later with --resume)");
  cmd->add_flag("--quiet", opt->quiet, "no progress bar and no table");
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite, "accept NaN/Inf in inputs");
  cmd->add_flag("--report-time", opt->report_time,
                "print the evaluation time on stderr (attnsim bench)")
      ->group("");
  cmd->callback([opt, cmd]() {
    try {
      apply_config(*opt, *cmd);
      run_sweep(*opt);
    } catch (const UsageError& e) {
      // Under MPI a failing rank must take the others down instead of leaving them in a collective.
      if (mpi_size() <= 1 || e.code() == 3) throw;
      std::fprintf(stderr, "attnsim: error: %s (rank %d)\n", e.what(), mpi_rank());
      mpi_abort(e.code());
    } catch (const std::exception& e) {
      if (mpi_size() <= 1) throw;
      std::fprintf(stderr, "attnsim: error: %s (rank %d)\n", e.what(), mpi_rank());
      mpi_abort(2);
    }
  });

  CLI::App* list =
      app.add_subcommand("methods", "List attention methods, their options and defaults");
  list->callback([]() {
    for (const auto& m : method_registry()) {
      std::printf("%s: %s\n", m.name.c_str(), m.help.c_str());
      // Pipeline options grouped by stage (in the order the stages first appear).
      std::vector<std::string> groups;
      for (const auto& p : m.params) {
        const std::string g = pipeline_option_group(p.key);
        if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
      }
      for (const std::string& g : groups) {
        if (!g.empty()) std::printf(" [%s]\n", g.c_str());
        for (const auto& p : m.params) {
          if (pipeline_option_group(p.key) != g) continue;
          std::string choices;
          for (const auto& c : p.choices) choices += (choices.empty() ? "" : "|") + c;
          if (p.choices.empty()) choices = p.min_int > 0 ? "positive integer" : "integer >= 0";
          std::printf("  %-12s default %-12s %s\n      choices: %s\n", p.key.c_str(),
                      p.default_value.c_str(), p.help.c_str(), choices.c_str());
        }
      }
    }
  });
}

}  // namespace attnsim
