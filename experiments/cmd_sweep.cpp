// `attnsim sweep` and `attnsim methods`: run methods over inputs and seeds, measure each against
// FP64 golden attention, print a table and write a columnar HDF5 results file.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "experiments/build_info.hpp"
#include "experiments/commands.hpp"
#include "experiments/dump.hpp"
#include "experiments/error.hpp"
#include "experiments/hdf5_io.hpp"
#include "experiments/methods.hpp"
#include "experiments/sweep_metrics.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {

struct SweepOptions {
  std::string config;
  std::vector<std::string> methods, inputs, synthetic;
  int seeds = 1;
  std::string output;
  bool quiet = false, allow_nonfinite = false;
};

struct InputCase {
  std::string name;  // file[:group] or synthetic:SPEC
  std::string kind;  // dump | synthetic
  std::string file, prefix, spec;
  std::uint64_t seed = 0;
};

std::string command_line_text;

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
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
    } else if (key == "seeds") {
      if (!given("--seeds")) {
        if (it.inputs.size() != 1) throw UsageError("config '" + opt.config + "': seeds takes one integer");
        try {
          opt.seeds = std::stoi(it.inputs[0]);
        } catch (const std::exception&) {
          throw UsageError("config '" + opt.config + "': seeds = '" + it.inputs[0] + "' is not an integer");
        }
      }
    } else if (key == "output") {
      if (!given("--output") && it.inputs.size() == 1) opt.output = it.inputs[0];
    } else if (key == "allow_nonfinite" || key == "allow-nonfinite") {
      if (!it.inputs.empty()) opt.allow_nonfinite = opt.allow_nonfinite || it.inputs[0] == "true";
    } else {
      throw UsageError("config '" + opt.config + "': unknown key '" + key +
                       "' (allowed: methods, input, synthetic, seeds, output, allow_nonfinite)");
    }
  }
}

void run_sweep(const SweepOptions& opt) {
  if (opt.methods.empty()) throw UsageError("sweep needs --methods");
  if (opt.inputs.empty() && opt.synthetic.empty()) throw UsageError("sweep needs --input or --synthetic");
  if (opt.seeds < 1) throw UsageError("--seeds must be >= 1");
  std::vector<MethodConfig> methods;
  for (const auto& list : opt.methods) {
    for (const auto& m : split_method_list(list)) methods.push_back(parse_method(m));
  }
  // Inputs: every layer group of every dump; every synthetic spec at seeds base..base+N-1.
  std::vector<InputCase> cases;
  for (const auto& path : opt.inputs) {
    for (const auto& prefix : dump_prefixes(path)) {
      InputCase c{path + (prefix.empty() ? "" : ":" + prefix.substr(0, prefix.size() - 1)), "dump", path, prefix, "", 0};
      cases.push_back(c);
    }
  }
  for (const auto& spec : opt.synthetic) {
    const std::uint64_t base = synthetic_seed(spec);  // also validates the spec
    for (int s = 0; s < opt.seeds; ++s) {
      InputCase c{"synthetic:" + spec, "synthetic", "", "", spec, base + std::uint64_t(s)};
      cases.push_back(c);
    }
  }
  // Make sure the output path is writable before computing anything.
  std::unique_ptr<H5Writer> writer;
  if (!opt.output.empty()) writer = std::make_unique<H5Writer>(opt.output);

  ResultTable table;
  const std::size_t total = cases.size() * methods.size();
  std::size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& c : cases) {
    AttentionInput in = c.kind == "dump" ? read_attention_dump(c.file, c.prefix, opt.allow_nonfinite)
                                         : make_synthetic(c.spec, c.seed);
    const std::vector<double> golden = golden_attention_ref(in);
    for (const auto& m : methods) {
      const MethodOutput out = m.run(in);
      table.add(m.canonical(), m.short_name(), c.name, std::int64_t(c.seed), in, out, golden);
      ++done;
      if (!opt.quiet && isatty(2)) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\r[%zu/%zu] %.1fs elapsed, ETA %.1fs   ", done, total, el,
                     el / double(done) * double(total - done));
      }
    }
  }
  if (!opt.quiet && isatty(2)) std::fprintf(stderr, "\n");
  table.print(stdout);
  if (writer) {
    table.write(*writer);
    writer->attr_string("/", "attnsim_version", build::kVersion);
    writer->attr_string("/", "git_commit", build::kGitCommit);
    writer->attr_string("/", "command_line", command_line_text);
    writer->attr_string("/", "date", now_utc());
    writer->attr_i64("/", "seeds", opt.seeds);
    writer->commit();
    std::printf("wrote %s (%zu rows)\n", opt.output.c_str(), table.rows());
  }
}

}  // namespace

void set_command_line(int argc, char** argv) {
  command_line_text.clear();
  for (int i = 0; i < argc; ++i) command_line_text += (i ? " " : "") + std::string(argv[i]);
}

void add_sweep_command(CLI::App& app) {
  auto opt = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Run methods over inputs and seeds against FP64 golden attention; table + HDF5 results");
  cmd->add_option("--config", opt->config,
                  "TOML file with the option names as keys (methods, input, synthetic, seeds, output); "
                  "options given on the command line take precedence (experiments/configs/)");
  cmd->add_option("--methods", opt->methods, "method configurations, comma-separated (see `attnsim methods`)")
      ->delimiter(';');
  cmd->add_option("--input", opt->inputs, "HDF5 dump(s) with q, k, v (or layer_NN/ groups of them)");
  cmd->add_option("--synthetic", opt->synthetic, "synthetic input spec(s), see `attnsim synth --help`");
  cmd->add_option("--seeds", opt->seeds, "seeds 0..N-1 for each synthetic spec")->capture_default_str();
  cmd->add_option("--output", opt->output, "results .h5 (written atomically)");
  cmd->add_flag("--quiet", opt->quiet, "no progress bar");
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite, "accept NaN/Inf in inputs");
  cmd->callback([opt, cmd]() {
    apply_config(*opt, *cmd);
    run_sweep(*opt);
  });

  CLI::App* list = app.add_subcommand("methods", "List attention methods, their options and defaults");
  list->callback([]() {
    for (const auto& m : method_registry()) {
      std::printf("%s: %s\n", m.name.c_str(), m.help.c_str());
      for (const auto& p : m.params) {
        std::string choices;
        for (const auto& c : p.choices) choices += (choices.empty() ? "" : "|") + c;
        std::printf("  %-6s %-34s default %-6s %s\n", p.key.c_str(),
                    p.choices.empty() ? "positive integer" : choices.c_str(), p.default_value.c_str(),
                    p.help.c_str());
      }
    }
  });
}

}  // namespace attnsim
