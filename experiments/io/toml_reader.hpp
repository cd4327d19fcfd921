// Strict reading of the TOML files attnsim takes (sweep configs, gate rules) through toml++:
// syntax errors, unknown keys and wrong types are one-line UsageErrors "FILE:LINE:COLUMN: ...".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnsim {

// One table of a parsed TOML document (the root, or a [section]). Copies share the document.
// Every error names the file, line and column of the offending key or value (toml++'s source
// positions: lines from 1, columns counted in code points from 1).
class TomlTable {
 public:
  // Parses FILE (TOML 1.0). Unreadable files and syntax errors (duplicate keys included) are
  // UsageErrors; toml++'s message is kept, on one line.
  static TomlTable parse_file(const std::string& path);

  // Keys in the order the file gives them.
  std::vector<std::string> keys() const;
  // A UsageError at the first key (in file order) that is not in `allowed`, listing the allowed
  // ones; `what` names the table in the message ("config", "[rel_fro]").
  void check_keys(const std::vector<std::string>& allowed, const std::string& what) const;
  bool contains(const std::string& key) const;
  bool is_table(const std::string& key) const;

  // Typed values; a missing key or another type is a UsageError.
  TomlTable table(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;  // an array of strings
  std::int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;  // an integer or a float
  bool boolean(const std::string& key) const;

  // A UsageError at `key`'s value (the table itself when `key` is absent).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // "FILE:LINE:COLUMN" of `key`'s value (of the table when `key` is absent or empty).
  std::string where(const std::string& key = "") const;
  const std::string& path() const;

 private:
  struct Doc;
  TomlTable(std::shared_ptr<const Doc> doc, std::size_t index)
      : doc_(std::move(doc)), index_(index) {}
  std::shared_ptr<const Doc> doc_;
  std::size_t index_ = 0;  // which of doc_->tables
};

}  // namespace attnsim
