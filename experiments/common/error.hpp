// The one error type of the command line: a one-line message for the user, and an exit code.
#pragma once

#include <new>
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

// `what` on one line: control characters (a newline in a file name, a method string or a TOML
// value the user gave) are written as escapes, so that an error stays the one line scripts read.
inline std::string one_line(const std::string& what) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : what) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 && c != '\t') {
      out += std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

// The one line for an exception that is not a UsageError (a worker's, a library's): no `std::`
// type names reach the user.
inline std::string describe_exception(const std::exception& e) {
  if (dynamic_cast<const UsageError*>(&e)) return e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of memory: an allocation failed (lower the sizes; the memory estimate missed "
           "this case)";
  if (dynamic_cast<const std::length_error*>(&e))
    return "a size is too large to allocate on this machine";
  return std::string("internal error: ") + e.what();
}

}  // namespace attnsim
