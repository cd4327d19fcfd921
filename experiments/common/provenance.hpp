// Provenance every output file records: the command line as typed and the UTC date.
#pragma once

#include <string>

namespace attnsim {

// The command line as typed, set once at startup (main.cpp).
void set_command_line(int argc, char** argv);
// The command line set by set_command_line().
const std::string& command_line();
// Whether the command line as typed holds `option` (as "--name" or "--name=value").
bool command_line_has_option(const std::string& option);
// "2025-01-31T12:00:00Z"
std::string now_utc();

class H5Writer;
// The root attributes every attnsim output carries: attnsim_version, git_commit, command_line
// (the given one, by default the process's) and date.
void write_provenance(H5Writer& w, const std::string& command = command_line());

}  // namespace attnsim
