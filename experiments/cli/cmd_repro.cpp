// `attnsim repro NAME`: run one registered paper reproduction; table on stdout, rows in --out.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/names.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/repro/repro.hpp"
#include "experiments/sweep/mpi_env.hpp"

namespace attnsim {

void add_repro_command(CLI::App& app) {
  struct Options {
    std::string name, out;
    bool quick = false, list = false, quiet = false;
    int samples = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "repro",
      "Reproduce a paper's table or figure: table on stdout, the same rows in --out (.csv or .h5)");
  cmd->add_option("name", opt->name, "reproduction (see --list)");
  cmd->add_flag("--list", opt->list, "list the reproductions");
  cmd->add_flag("--quick", opt->quick, "reduced version (under a minute; what CI runs)");
  cmd->add_option("--samples", opt->samples,
                  "samples (seeds) per configuration; default depends on --quick")
      ->check(integer_in(1));
  cmd->add_option("--out,--output", opt->out,
                  "also write the rows to FILE.csv or FILE.h5 (atomically; not a directory or a "
                  "special file)")
      ->check(output_name());
  cmd->add_flag("--quiet", opt->quiet, "no progress bar");
  add_max_memory_option(cmd);
  cmd->callback([opt]() {
    const auto& reg = repro_registry();
    if (opt->list) {
      for (const auto& r : reg) {
        std::printf("%-16s %s\n%-16s   paper: %s; samples %d (--quick %d)\n", r.name.c_str(),
                    r.help.c_str(), "", r.paper.c_str(), r.default_samples, r.quick_samples);
      }
      return;
    }
    std::vector<std::string> names;
    const Reproduction* found = nullptr;
    for (const auto& r : reg) {
      names.push_back(r.name);
      if (r.name == opt->name) found = &r;
    }
    if (opt->name.empty())
      throw UsageError("repro needs a NAME (one of " + join_choices(names) + ")");
    if (!found)
      throw UsageError("unknown reproduction '" + opt->name + "' (expected " + join_choices(names) +
                       ")");
    if (opt->samples < 0) throw UsageError("--samples must be >= 1");
    ReproOptions ro;
    ro.quick = opt->quick;
    ro.samples =
        opt->samples ? opt->samples : (opt->quick ? found->quick_samples : found->default_samples);
    ro.progress = !opt->quiet && isatty(2) && std::getenv("CI") == nullptr;
    ro.out = opt->out;
    if (!opt->out.empty() && mpi_rank() == 0) {
      // Fail on a bad --out before computing anything.
      const std::string& o = opt->out;
      auto ends = [&](const char* s) {
        const std::string e(s);
        return o.size() >= e.size() && o.compare(o.size() - e.size(), e.size(), e) == 0;
      };
      if (!ends(".csv") && !ends(".h5") && !ends(".hdf5")) {
        throw UsageError("--out '" + o + "': expected a .csv, .h5 or .hdf5 file name");
      }
      check_output_path(o);
    }
    const ReproTable t = found->run(ro);
    if (mpi_rank() != 0) return;
    t.print(stdout);
    if (!opt->out.empty()) {
      t.write(opt->out, found->name, ro);
      std::printf("wrote %s (%zu rows)\n", opt->out.c_str(), t.rows.size());
    }
  });
}

}  // namespace attnsim
