// Checks of numeric and text option values, run by CLI11 on the text before it converts it.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>

namespace attnsim {

// A decimal integer in [lo, hi]. CLI11 alone reads "" as 0, "0x10" as 16 and answers a value beyond
// the option's type with "Could not convert"; this names the option, the value and the range
// ("--m: 3000000000 is out of range (at most 2147483647)").
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi = std::numeric_limits<int>::max());
// A finite number >= lo: "", NaN and Inf (which CLI11 parses) are refused.
CLI::Validator finite_at_least(double lo);
// A value that is not empty: for options where "" would silently mean "not given" (--group "").
CLI::Validator non_empty();
// An output file name: not empty, and not starting with '-'. CLI11 gives a single-value option the
// next argument whatever it is, so `--out --quiet` (a forgotten value) would write a file named
// "--quiet"; a file of such a name is still reachable as ./-name.
CLI::Validator output_name();

// Adds --max-memory SIZE (environment: ATTNSIM_MAX_MEMORY) to a command; it sets the limit while
// the command line is parsed, before the command's callback runs.
void add_max_memory_option(CLI::App* cmd);

}  // namespace attnsim
