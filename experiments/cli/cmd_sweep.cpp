// `attnsim sweep` and `attnsim methods`: run methods over inputs and seeds, measure each against
// FP64 golden attention, print a table and write a columnar HDF5 results file.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/names.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/common/progress.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/io/toml_reader.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "experiments/sweep/sweep_engine.hpp"
#include "experiments/sweep/sweep_metrics.hpp"
#include "sim/golden/golden.hpp"
#include "sim/hooks.hpp"
#include "sim/pipeline/counters.hpp"
#include "sim/pipeline/options.hpp"

namespace attnsim {

namespace {

struct SweepOptions {
  std::string config;
  std::vector<std::string> methods, inputs, synthetic, grid;
  int seeds = 1;
  std::string output;
  bool quiet = false, allow_nonfinite = false, resume = false, report_time = false;
  bool skip_unsupported = false, counters = false;
  std::string summary;  // "" the row table; else a method x input table of this metric
  std::int64_t max_points = -1;
};

// sweep --counters: one line per counted point with events, "label input seed: stage event n, ...".
void print_counters(std::FILE* f, const ResultTable& table) {
  const std::vector<std::string> names = StageCounters::column_names();
  std::fprintf(f, "silent-failure counters (nonzero, cnt_<stage>_<event>):\n");
  for (const auto& r : table.rows()) {
    if (r.counters.empty()) continue;
    std::string line;
    for (std::size_t c = 0; c < r.counters.size() && c < names.size(); ++c)
      if (r.counters[c] != 0)
        line +=
            (line.empty() ? " " : ", ") + names[c].substr(4) + " " + std::to_string(r.counters[c]);
    std::fprintf(f, "  %s %s %lld:%s\n", r.label.c_str(), r.input.c_str(), (long long)r.seed,
                 line.empty() ? " none" : line.c_str());
  }
}

std::string toml_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

// A path a config file gives, resolved against the file's directory (as a build file's paths
// are): a config works from any current directory. Absolute paths stay as they are; the result is
// lexically normal ("experiments/configs/../../data/x.h5" -> "data/x.h5"), so results name the
// input as the command line would.
std::string config_relative(const std::string& config, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute()) return path;
  const std::filesystem::path dir = std::filesystem::path(config).parent_path();
  const std::string out = (dir / p).lexically_normal().string();
  return out.empty() ? "." : out;
}

// Reads a sweep TOML file (toml++, experiments/io/toml_reader.hpp) into the options not set on the
// command line: keys at the top or in a [sweep] table. Syntax errors, unknown keys, wrong types and
// a key given twice are errors naming FILE:LINE:COLUMN, even for options the command line sets.
// The paths of `input` and `output` are relative to the config file's directory.
void apply_config(SweepOptions& opt, const CLI::App& cmd) {
  if (opt.config.empty()) return;
  static const std::vector<std::string> kKeys{
      "methods",         "input",           "synthetic",        "grid",    "seeds",   "output",
      "allow_nonfinite", "allow-nonfinite", "skip_unsupported", "summary", "counters"};
  const TomlTable root = TomlTable::parse_file(opt.config);
  std::vector<std::string> top = kKeys;
  top.push_back("sweep");
  root.check_keys(top, "the config");
  std::vector<TomlTable> tables{root};
  if (root.contains("sweep")) {
    tables.push_back(root.table("sweep"));
    tables.back().check_keys(kKeys, "[sweep]");
  }
  auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  std::vector<std::string> seen;
  for (const TomlTable& t : tables) {
    for (const std::string& key : t.keys()) {
      if (key == "sweep") continue;
      const std::string name = key == "allow-nonfinite" ? "allow_nonfinite" : key;
      if (std::find(seen.begin(), seen.end(), name) != seen.end())
        t.fail(key, name + " is given twice (at the top and in [sweep], or in both spellings)");
      seen.push_back(name);
      // The string-array keys and the command-line options that take precedence over them.
      const struct {
        const char* key;
        const char* option;
        std::vector<std::string>* field;
      } lists[] = {{"methods", "--methods", &opt.methods},
                   {"input", "--input", &opt.inputs},
                   {"synthetic", "--synthetic", &opt.synthetic},
                   {"grid", "--grid", &opt.grid}};
      const auto list = std::find_if(std::begin(lists), std::end(lists),
                                     [&](const auto& l) { return name == l.key; });
      if (list != std::end(lists)) {
        auto v = t.strings(key);  // type-checked even when the option overrides it
        if (name == "input")
          for (auto& path : v) path = config_relative(opt.config, path);
        if (!given(list->option)) *list->field = std::move(v);
      } else if (name == "seeds") {
        const std::int64_t n = t.integer(key);
        if (n < 1 || n > std::numeric_limits<int>::max())
          t.fail(key, "seeds must be a positive integer (at most 2^31 - 1)");
        if (!given("--seeds")) opt.seeds = int(n);
      } else if (name == "output") {
        std::string v = t.string(key);
        if (v.empty()) t.fail(key, "output must not be empty");
        if (!given("--output")) opt.output = config_relative(opt.config, v);
      } else if (name == "skip_unsupported") {
        opt.skip_unsupported = t.boolean(key) || opt.skip_unsupported;
      } else if (name == "counters") {
        opt.counters = t.boolean(key) || opt.counters;
      } else if (name == "summary") {
        std::string v = t.string(key);
        const auto& ok = summary_metrics();
        if (std::find(ok.begin(), ok.end(), v) == ok.end())
          t.fail(key, "summary must be one of " + join_choices(ok));
        if (!given("--summary")) opt.summary = std::move(v);
      } else {
        opt.allow_nonfinite = t.boolean(key) || opt.allow_nonfinite;
      }
    }
  }
}

void run_sweep(const SweepOptions& opt) {
  const int rank = mpi_rank();
  // The output path first: refused before the plan opens any input (not a directory, not a
  // special file, not one of the inputs or the config, in an existing directory).
  if (rank == 0) {
    std::vector<std::string> inputs;
    for (const std::string& in : opt.inputs) {
      // FILE:GROUP names FILE (a missing file is the plan's error, below).
      const auto colon = in.rfind(':');
      std::error_code ec;
      inputs.push_back(!std::filesystem::exists(in, ec) && colon != std::string::npos
                           ? in.substr(0, colon)
                           : in);
    }
    inputs.push_back(opt.config);
    check_output_path(opt.output, inputs);
  }
  // Validates every method, grid value, dump and spec, and the memory estimate.
  const SweepPlan plan = make_plan(opt.methods, opt.grid, opt.inputs, opt.synthetic, opt.seeds);
  if (opt.resume && opt.output.empty())
    throw UsageError("--resume needs --output (checkpoints sit beside it)");
  if (opt.max_points >= 0 && opt.output.empty())
    throw UsageError("--max-points needs --output (to resume from)");
  // The data of every dump before the first point: run_plan reads a dump when its chunk of
  // cases comes up, so a bad layer group would otherwise be found after the points before it
  // were computed and checkpointed.
  if (rank == 0 && plan.cases.size() > 1) {
    for (const SweepCase& c : plan.cases) {
      if (c.kind == "dump") check_attention_dumps(c.file, {c.prefix}, opt.allow_nonfinite);
    }
  }

  SweepRunOptions ro;
  ro.allow_nonfinite = opt.allow_nonfinite;
  ro.progress = progress_wanted(opt.quiet);
  ro.skip_unsupported = opt.skip_unsupported;
  ro.checkpoint_base = opt.output;
  ro.resume = opt.resume;
  ro.max_points = opt.max_points;
  ro.counters = opt.counters;
  SweepOutcome res = run_plan(plan, ro);
  if (opt.report_time && rank == 0) {
    std::fprintf(stderr, "sweep_seconds=%.6f points=%lld ranks=%d threads=%d\n", res.seconds,
                 (long long)plan.points(), mpi_size(), omp_get_max_threads());
  }
  if (!res.complete) {
    if (rank != 0) return;
    throw UsageError("sweep stopped by --max-points before its " + std::to_string(plan.points()) +
                         (plan.points() == 1 ? " point was" : " points were") +
                         " done; completed points are in " + opt.output +
                         ".ckpt.*; rerun with --resume to finish",
                     3);
  }
  if (rank != 0) return;
  if (!opt.quiet) {
    if (opt.summary.empty())
      res.table.print(stdout);
    else
      res.table.print_summary(stdout, opt.summary);
    if (opt.counters) print_counters(stdout, res.table);
  }
  if (!opt.output.empty()) {
    H5Writer writer(opt.output);
    res.table.write(writer);
    write_provenance(writer, command_line());
    writer.attr_i64("/", "seeds", opt.seeds);
    writer.attr_i64("/", "skip_unsupported", opt.skip_unsupported ? 1 : 0);
    writer.attr_i64("/", "counters", opt.counters ? 1 : 0);
    writer.attr_string(
        "/", "config",
        "methods = " + toml_list(opt.methods) + "\ninput = " + toml_list(opt.inputs) +
            "\nsynthetic = " + toml_list(opt.synthetic) + "\ngrid = " + toml_list(opt.grid) +
            "\nseeds = " + std::to_string(opt.seeds) + "\n");
    writer.commit();
    remove_checkpoints(opt.output);
    const std::size_t n = res.table.rows().size();
    std::printf("wrote %s (%zu point%s, %lld computed, %lld from checkpoints)\n",
                opt.output.c_str(), n, n == 1 ? "" : "s", (long long)res.computed,
                (long long)res.restored);
  }
}

struct MethodsOptions {
  bool stages = false;
  std::string describe, input, group, synthetic;
};

void print_param(const MethodParam& p, const std::string& def) {
  std::string choices;
  for (const auto& c : p.choices) choices += (choices.empty() ? "" : "|") + c;
  if (p.choices.empty())
    choices = p.text     ? "text (see above)"
              : p.number ? "a number"
              : p.min_int > 0 ? "positive integer"
                              : "integer >= 0";
  std::printf("  %-14s default %-14s %s\n      choices: %s\n", p.key.c_str(), def.c_str(),
              p.help.c_str(), choices.c_str());
}

void print_stage_keys(const std::vector<MethodParam>& params) {
  std::vector<std::string> groups;
  const std::vector<OptionKey> keys = pipeline_keys(technique_hooks());
  auto group_of = [&](const std::string& k) {
    for (const OptionKey& o : keys)
      if (o.key == k) return o.group;
    return std::string();
  };
  for (const auto& p : params) {
    const std::string g = group_of(p.key);
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  for (const std::string& g : groups) {
    std::printf(" [%s]\n", g.c_str());
    for (const auto& p : params)
      if (group_of(p.key) == g) print_param(p, p.default_value);
  }
}

void run_methods(const MethodsOptions& o) {
  if (!o.describe.empty()) {
    if (!o.input.empty() && !o.synthetic.empty())
      throw UsageError("--describe takes at most one of --input and --synthetic");
    if (!o.group.empty() && o.input.empty()) throw UsageError("--group applies to --input dumps only");
    const MethodConfig m = parse_method(o.describe);
    if (!m.is_pipeline())
      throw UsageError("method '" + m.spec->name + "' is not a pipeline: nothing to describe");
    AttentionInput in;
    if (!o.input.empty()) {
      const std::vector<std::string> prefixes = select_dump_prefixes(o.input, o.group);
      in = read_attention_dump(o.input, prefixes.front(), true);
    } else {
      in = make_synthetic(o.synthetic.empty() ? "normal:hq=2,nq=128,nkv=128,d=128" : o.synthetic);
    }
    const MethodDescription d = describe_method(m, in);
    std::printf("%s\n", d.method.c_str());
    std::printf("# the pipeline of %s on %s [%d, %d, %d, %d] %s; differences from flash:\n",
                m.canonical().c_str(), o.input.empty() ? "a synthetic input" : o.input.c_str(),
                in.shape.batch, in.shape.heads_q, in.shape.len_q, in.shape.head_dim,
                in.dtype.c_str());
    for (const std::string& x : d.differences) std::printf("#   %s\n", x.c_str());
    for (const std::string& x : d.outside) std::printf("# outside the pipeline: %s\n", x.c_str());
    for (const std::string& x : d.notes) std::printf("# note: %s\n", x.c_str());
    return;
  }
  if (o.stages) {
    std::printf("Pipeline stage keys: every pipeline method takes them on top of its preset "
                "(sim/pipeline/README.md); defaults are FlashAttention-2's\n");
    for (const auto& m : method_registry())
      if (m.name == "flash") print_stage_keys(m.params);
    return;
  }
  for (const auto& m : method_registry()) {
    std::printf("%s: %s\n", m.name.c_str(), m.help.c_str());
    if (m.name == "flash") {
      print_stage_keys(m.params);
      continue;
    }
    for (const auto& p : m.params)
      if (!p.stage || p.shadows) print_param(p, p.default_value);
    if (m.preset)
      std::printf("  + every pipeline stage key (attnsim methods --stages) as an override of the "
                  "preset\n");
  }
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto opt = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep",
      "Run methods over inputs and seeds against FP64 golden attention; table + HDF5 results");
  cmd->add_option(
      "--config", opt->config,
      "TOML file with the option names as keys (methods, input, synthetic, grid, seeds, output, "
      "skip_unsupported, summary; input and output paths relative to the file's directory); "
      "options given on the command line take precedence (experiments/configs/)");
  cmd->add_option("--methods", opt->methods,
                  "method configurations, comma-separated (see `attnsim methods`)")
      ->delimiter(';');
  cmd->add_option("--input", opt->inputs,
                  "HDF5 dump(s) with q, k, v (every group of it that holds them), or FILE:GROUP "
                  "for one group");
  cmd->add_option("--synthetic", opt->synthetic,
                  "synthetic input spec(s), see `attnsim synth --help`");
  cmd->add_option("--seeds", opt->seeds, "seeds 0..N-1 for each synthetic spec")
      ->check(integer_in(1))
      ->capture_default_str();
  cmd->add_option("--grid", opt->grid,
                  "KEY=V1,V2,... (repeatable): run every method that has option KEY at each value "
                  "(cartesian product over the --grid options)");
  cmd->add_option(
         "--out,--output", opt->output,
         "results .h5 (written atomically); completed points go to OUTPUT.ckpt.<rank> meanwhile")
      ->check(output_name());
  cmd->add_flag("--resume", opt->resume,
                "reuse the points completed by an interrupted run with the same --output");
  cmd->add_option("--max-points", opt->max_points,
                  "stop after this many points per rank (exit 3; finish later with --resume)")
      ->check(integer_in(1, std::numeric_limits<std::int64_t>::max()));
  cmd->add_flag("--quiet", opt->quiet, "no progress line and no table");
  cmd->add_flag("--skip-unsupported", opt->skip_unsupported,
                "a method that refuses an input (a shape or head_dim its kernel does not take) "
                "gets a row marked `skipped` with the reason, instead of ending the sweep");
  cmd->add_flag("--counters", opt->counters,
                "count each point's silent failures per stage (saturations, overflows, NaNs, "
                "vanished P, ...): columns cnt_<stage>_<event> in the results, nonzero counts "
                "printed under the table; runs the stage references (reference speed)");
  cmd->add_option("--summary", opt->summary,
                  "print a method x input table of this metric instead of one row per point")
      ->check(CLI::IsMember(summary_metrics()));
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite, "accept NaN/Inf in inputs");
  add_max_memory_option(cmd);
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
      std::fprintf(stderr, "attnsim: error: %s (rank %d)\n", one_line(e.what()).c_str(),
                   mpi_rank());
      remove_registered_temp_files();  // MPI_Abort runs no destructors
      mpi_abort(e.code());
    } catch (const std::exception& e) {
      if (mpi_size() <= 1) throw;
      std::fprintf(stderr, "attnsim: error: %s (rank %d)\n",
                   one_line(describe_exception(e)).c_str(), mpi_rank());
      remove_registered_temp_files();
      mpi_abort(2);
    }
  });

  auto mopt = std::make_shared<MethodsOptions>();
  CLI::App* list = app.add_subcommand(
      "methods", "List attention methods, their options and defaults; --stages lists the pipeline "
                 "stage keys every pipeline method takes; --describe prints a method's pipeline");
  list->add_flag("--stages", mopt->stages, "list the pipeline's stage keys, grouped by stage");
  list->add_option("--describe", mopt->describe,
                   "print the canonical method string of the pipeline METHOD runs (paste it back "
                   "into --method: bit-identical output), then its differences from flash");
  list->add_option("--input", mopt->input, "the dump the pipeline is built for (shape, dtype)");
  list->add_option("--group", mopt->group, "one layer group of the dump");
  list->add_option("--synthetic", mopt->synthetic,
                   "the synthetic input the pipeline is built for (default "
                   "normal:hq=2,nq=128,nkv=128,d=128)");
  list->callback([mopt]() { run_methods(*mopt); });
}

}  // namespace attnsim
