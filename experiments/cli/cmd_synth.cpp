// `attnsim synth`: write a seeded synthetic attention dump (the HDF5 layout of
// experiments/README.md).
#include <memory>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/methods/memory_estimate.hpp"

namespace attnsim {

void add_synth_command(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a seeded synthetic q/k/v dump to an HDF5 file");
  cmd->add_option("--synthetic", *spec,
                  "DIST[:key=value,...], e.g. kbias:nq=512,d=128,seed=3 (defaults below)")
      ->required();
  cmd->add_option("--out,--output", *out,
                  "output .h5 (written atomically; not a directory or a special file)")
      ->required()
      ->check(output_name());
  add_max_memory_option(cmd);
  cmd->footer(
      "DIST: normal (N(0, sigma^2)), uniform (U[lo, hi]), kbias (K and V with a per-channel mean "
      "of scale `bias`), outlier (a fraction `frac` of channels scaled by `mag`), peaked (each "
      "query = sharp x a key + noise).\n"
      "Keys and defaults: b=1 (batch), hq=1, hkv=hq, nq=256, nkv=nq, d=64, dv=d, causal=0 "
      "(0 or 1), seed=0, sigma=1, lo=-1, hi=1, bias=4, frac=0.05, mag=20, sharp=4. A key given "
      "twice, a value out of range, or q, k, v, o together beyond 400M elements are refused.");
  cmd->callback([spec, out]() {
    check_output_path(*out);
    const AttentionShape s = synthetic_shape(*spec);  // validates the spec
    // The tensors, their compressed chunks on the way out, and the HDF5 library.
    check_memory(1.5 * input_bytes(s) + 64.0 * (1 << 20), "synth of '" + *spec + "'");
    write_attention_dump(*out, make_synthetic(*spec), "synthetic:" + *spec);
  });
}

}  // namespace attnsim
