// Registration of every `attnsim` subcommand on the CLI11 app (one function per command file).
#pragma once

#include <CLI/CLI.hpp>

namespace attnsim {

void add_convert_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_mma_command(CLI::App& app);
void add_special_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_gate_command(CLI::App& app);
void add_repro_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_attribute_command(CLI::App& app);
void add_lean_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_invariance_command(CLI::App& app);

// Appends to every subcommand's --help the exit codes it can return (main.cpp documents them).
void add_exit_code_footers(CLI::App& app);

}  // namespace attnsim
