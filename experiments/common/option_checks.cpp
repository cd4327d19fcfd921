// Checks of option values (see option_checks.hpp).
#include "experiments/common/option_checks.hpp"

#include "experiments/common/memory_limit.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attnsim {

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string range =
      hi == std::numeric_limits<std::int64_t>::max()
          ? "an integer >= " + std::to_string(lo)
          : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        std::size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
        bool digits = i < s.size();
        for (std::size_t j = i; j < s.size(); ++j) digits = digits && s[j] >= '0' && s[j] <= '9';
        if (!digits) return "'" + s + "' is not " + range;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), nullptr, 10);
        // strtoll saturates (ERANGE) beyond 64 bits: out of range too.
        if (errno == ERANGE || v > hi)
          return s + " is out of range (at most " + std::to_string(hi) + ")";
        if (v < lo) return s + " is out of range (" + range + " expected)";
        return "";
      },
      "");
}

CLI::Validator finite_at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
          return "'" + s + "' is not a finite number";
        if (v < lo) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%g", lo);
          return s + " is out of range (a number >= " + buf + " expected)";
        }
        return "";
      },
      "");
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& s) -> std::string { return s.empty() ? "must not be empty" : ""; }, "");
}

CLI::Validator output_name() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty()) return "must not be empty";
        if (s[0] == '-') {
          return "'" + s + "' is an option, not a file name (is the value missing? a file of " +
                 "that name is ./" + s + ")";
        }
        return "";
      },
      "");
}

void add_max_memory_option(CLI::App* cmd) {
  // CLI11 reads the environment variable into this option of every subcommand, the ones not
  // invoked included, and runs their callbacks: only the invoked command's value may set the one
  // process-wide limit (else another command's ATTNSIM_MAX_MEMORY overrides `--max-memory`).
  cmd->add_option_function<std::string>(
         "--max-memory",
         [cmd](const std::string& s) {
           if (cmd->parsed()) set_memory_limit(parse_memory_size(s));
         },
         "refuse, before allocating, work whose memory estimate exceeds SIZE (512M, 8G, ...); "
         "default: this machine's memory (" +
             format_bytes(double(machine_memory_bytes())) + ")")
      ->envname("ATTNSIM_MAX_MEMORY")
      ->type_name("SIZE");
}

}  // namespace attnsim
