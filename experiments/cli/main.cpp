// The `attnsim` executable: subcommands registered from experiments/cli/cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/error.hpp"
#include "experiments/sweep/mpi_env.hpp"

int main(int argc, char** argv) {
  attnsim::MpiEnvironment mpi(&argc, &argv);
  CLI::App app{
      "attnsim: bit-exact CPU reference simulator for quantized and approximate attention"};
  app.require_subcommand(1);
  attnsim::set_command_line(argc, argv);
  attnsim::add_info_command(app);
  attnsim::add_convert_command(app);
  attnsim::add_synth_command(app);
  attnsim::add_sweep_command(app);
  attnsim::add_bench_command(app);
  attnsim::add_mma_command(app);
  attnsim::add_special_command(app);
  attnsim::add_run_command(app);
  attnsim::add_compare_command(app);
  attnsim::add_gate_command(app);
  attnsim::add_repro_command(app);
  attnsim::add_quantize_command(app);
  attnsim::add_attribute_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0; real parse errors print one line.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "attnsim: error: %s\n", e.what());
    return 2;
  } catch (const attnsim::UsageError& e) {
    std::fprintf(stderr, "attnsim: error: %s\n", e.what());
    return e.code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsim: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
