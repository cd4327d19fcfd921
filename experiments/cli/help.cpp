// What every subcommand's --help ends with: the exit codes it can return.
#include <string>

#include "experiments/cli/commands.hpp"

namespace attnsim {

void add_exit_code_footers(CLI::App& app) {
  for (CLI::App* c : app.get_subcommands({})) {
    const std::string n = c->get_name();
    std::string codes = "Exit codes: 0 success";
    if (n == "verify")
      codes = "Exit codes: 0 the kernel's output is bit-identical to the method's; 1 it differs but "
              "within the band; 3 outside the band (a likely bug; the report names the worst rows)";
    if (n == "invariance")
      codes += "; 1 some compared row of the target differs between the situations (predicted "
               "from the schedules, or computed with --ulp)";
    if (n == "compare") codes += "; 1 the files differ (the report is on stdout)";
    if (n == "gate") codes += "; 1 a regression against the baseline (the report is on stdout)";
    codes +=
        "; 2 usage or input error (one line `attnsim: error: ...` on stderr, no output written, "
        "no temp file left)";
    if (n == "sweep") {
      codes +=
          "; 3 stopped by --max-points (completed points stay in OUTPUT.ckpt.*; finish with "
          "--resume)";
    }
    codes += ". On SIGINT/SIGTERM temp files are removed and the process ends by the signal.";
    const std::string footer = c->get_footer();
    c->footer(footer.empty() ? codes : footer + "\n\n" + codes);
  }
}

}  // namespace attnsim
