// `attnsim synth`: write a seeded synthetic attention dump (the HDF5 layout of
// experiments/README.md).
#include <memory>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/io/dump.hpp"

namespace attnsim {

void add_synth_command(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a seeded synthetic q/k/v dump to an HDF5 file");
  cmd->add_option(
         "--synthetic", *spec,
         "DIST[:key=value,...]; DIST normal|uniform|kbias|outlier|peaked; keys b hq hkv nq nkv "
         "d dv causal seed sigma lo hi bias frac mag sharp")
      ->required();
  cmd->add_option("--out", *out, "output .h5 (written atomically)")->required();
  cmd->callback(
      [spec, out]() { write_attention_dump(*out, make_synthetic(*spec), "synthetic:" + *spec); });
}

}  // namespace attnsim
