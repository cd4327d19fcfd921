// Provenance every output file records: the command line as typed and the UTC date.
#pragma once

#include <string>

namespace attnsim {

// The command line set by set_command_line() (commands.hpp) at startup.
const std::string& command_line();
// "2025-01-31T12:00:00Z"
std::string now_utc();

}  // namespace attnsim
