// The one error type of the command line: a one-line message for the user, and an exit code.
#pragma once

#include <charconv>
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

// A user's text (a method string, a spec, a value) as an error message echoes it: whole when it is
// short, else its first and last characters around a count of what was left out, so that a
// 10,000-character method string does not become a 10,000-character error line.
inline std::string abbreviate(const std::string& text, std::size_t max = 160) {
  if (text.size() <= max) return text;
  const std::size_t keep = max / 2;
  return text.substr(0, keep) + "...(" + std::to_string(text.size() - 2 * keep) +
         " more characters)..." + text.substr(text.size() - keep);
}

// A number a message echoes, in the shortest form that reads back as the same double
// ("-1e-09", "0.125", "inf", "nan"): never std::to_string's "%f", which prints -1e-9 as
// "-0.000000".
inline std::string format_number(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
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
