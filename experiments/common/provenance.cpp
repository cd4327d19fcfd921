// Provenance of output files: the command line and the UTC date (see provenance.hpp).
#include "experiments/common/provenance.hpp"

#include <ctime>
#include <vector>

#include "experiments/common/build_info.hpp"
#include "experiments/common/git_commit.hpp"
#include "experiments/io/hdf5_io.hpp"

namespace attnsim {

namespace {
std::string command_line_text;
std::vector<std::string> args;  // argv as given
}  // namespace

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

const std::string& command_line() { return command_line_text; }

void set_command_line(int argc, char** argv) {
  command_line_text.clear();
  args.assign(argv, argv + argc);
  for (int i = 0; i < argc; ++i) {
    if (i) command_line_text += ' ';
    command_line_text += argv[i];
  }
}

bool command_line_has_option(const std::string& option) {
  for (const std::string& arg : args) {
    if (arg == option || arg.rfind(option + "=", 0) == 0) return true;
  }
  return false;
}

void write_provenance(H5Writer& w, const std::string& command) {
  w.attr_string("/", "attnsim_version", build::kVersion);
  w.attr_string("/", "git_commit", build::git_commit());
  w.attr_string("/", "command_line", command);
  w.attr_string("/", "date", now_utc());
}

}  // namespace attnsim
