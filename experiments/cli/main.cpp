// The `attnsim` executable: subcommands registered from experiments/cli/cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "numerics/isa.hpp"

namespace {

void print_error(int code, const std::string& what) {
  // Exit 1 (compare/gate found differences) and 3 (sweep stopped by --max-points) are outcomes,
  // not errors.
  std::fprintf(stderr, code == 2 ? "attnsim: error: %s\n" : "attnsim: %s\n",
               attnsim::one_line(what).c_str());
}

// An exception that escapes a worker thread or a noexcept region ends here instead of in
// abort(): one line, temp files removed, exit 2 (or the UsageError's code).
[[noreturn]] void on_terminate() {
  attnsim::remove_registered_temp_files();
  int code = 2;
  std::string what = "internal error: terminated";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const attnsim::UsageError& u) {
      code = u.code();
      what = u.what();
    } catch (const std::exception& x) {
      what = attnsim::describe_exception(x);
    } catch (...) {
    }
  }
  std::fflush(stdout);
  print_error(code, what);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  attnsim::install_cleanup_handlers();
  attnsim::MpiEnvironment mpi(&argc, &argv);
  // After MPI_Init, which may install its own SIGSEGV/SIGBUS/SIGFPE handlers under a launcher.
  attnsim::install_hdf5_crash_handlers();
  // The exit codes in the description: CLI11 repeats an app's footer under every subcommand's
  // help, which ends with its own (add_exit_code_footers).
  CLI::App app{
      "attnsim: bit-exact CPU reference simulator for quantized and approximate attention.\n"
      "Exit codes: 0 success; 1 `compare` found differences or `gate` found regressions; 2 usage "
      "or input error (one line `attnsim: error: ...` on stderr, no output written); 3 `sweep` "
      "stopped by --max-points (finish with --resume); `verify`: 1 within the band, 3 outside it; `invariance`: 1 the target's bits differ. `attnsim COMMAND --help` for each "
      "command's options, defaults and exit codes."};
  app.require_subcommand(1);
  // The instruction set of the fast stage kernels (numerics/isa.hpp), for every command: results
  // never depend on it (each fast kernel equals its reference bit for bit).
  std::string isa;
  app.add_option("--isa", isa,
                 "cap the fast kernels' instruction set: scalar (the references only), neon "
                 "(AArch64), avx2, avx512, amx (x86-64) (default: the best this CPU has; env "
                 "ATTNSIM_ISA)")
      ->check(CLI::IsMember({"scalar", "neon", "avx2", "avx512", "amx"}));
  app.fallthrough();
  app.parse_complete_callback([&isa]() {
    // An ATTNSIM_ISA the process could not apply is refused (--isa, when given, replaces it).
    if (isa.empty()) {
      const std::string rejected = attnsim::isa_env_rejected();
      if (!rejected.empty()) throw attnsim::UsageError(rejected);
    }
    attnsim::Isa level;
    if (!isa.empty() && attnsim::parse_isa(isa, &level)) {
      try {
        attnsim::set_isa(level);
      } catch (const std::invalid_argument& e) {
        throw attnsim::UsageError(e.what());
      }
    }
  });
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
  attnsim::add_lean_command(app);
  attnsim::add_verify_command(app);
  attnsim::add_schedule_command(app);
  attnsim::add_invariance_command(app);
  attnsim::add_exit_code_footers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError with exit code 0; real parse errors print one line.
    if (e.get_exit_code() == 0) return app.exit(e);
    // CLI11 names an option by its first name ("--out: ..." for "--out,--output"): name it as
    // the command line spells it.
    std::string what = e.what();
    if (what.rfind("--out: ", 0) == 0 && attnsim::command_line_has_option("--output") &&
        !attnsim::command_line_has_option("--out"))
      what.replace(0, 5, "--output");
    print_error(2, what);
    return 2;
  } catch (const attnsim::UsageError& e) {
    std::fflush(stdout);
    print_error(e.code(), e.what());
    return e.code();
  } catch (const std::exception& e) {
    print_error(2, attnsim::describe_exception(e));
    return 2;
  }
  return 0;
}
