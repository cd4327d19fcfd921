// Registration of every `attnsim` subcommand on the CLI11 app (one function per command file).
#pragma once

#include <CLI/CLI.hpp>

namespace attnsim {

void add_convert_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_bench_command(CLI::App& app);

}  // namespace attnsim
