// The one error type of the command line: a one-line message for the user, and an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace attnsim {

// Thrown for bad input (unknown format, unreadable file, NaN where not allowed, ...). main()
// prints "attnsim: error: <what>" on one line and exits with `code` (2 unless a command says
// otherwise; `attnsim gate` reserves 1 for "regression found").
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what, int code = 2)
      : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace attnsim
