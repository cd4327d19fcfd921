// Strict TOML reading through toml++ (see toml_reader.hpp). toml++ is used header-only here, the one
// translation unit that includes it; Debian's libtomlplusplus-dev ships <toml++/toml.h>, newer
// upstream releases <toml++/toml.hpp> as well.
#include "experiments/io/toml_reader.hpp"

// toml++ 3.3 (Debian 12) reaches a parser precondition on malformed table headers ("[&", "[[[1]]]";
// marzer/tomlplusplus#294, fixed upstream by #301): as an assert it aborts, as the assumption it
// becomes under NDEBUG with clang it is undefined behaviour. The parser reports a proper error
// right after the check, so the checks are made no-ops: NDEBUG undefined around the include keeps
// TOML_ASSERT_ASSUME from becoming an assumption, and TOML_ASSERT expands to nothing (found by
// tests/experiments/fuzz).
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) static_cast<void>(0)
#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif
#pragma pop_macro("NDEBUG")

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "experiments/common/error.hpp"
#include "experiments/io/file_io.hpp"

namespace attnsim {

struct TomlTable::Doc {
  std::string path;
  toml::table root;
  std::vector<const toml::table*> tables;  // [0] = root, then every nested table
};

namespace {

std::string one_line(std::string_view s) {
  std::string out(s);
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\r', ' ');
  return out;
}

std::string at(const std::string& path, const toml::source_position& p) {
  if (p.line == 0) return path;
  return path + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
}

const char* kind_of(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date/time";
  }
}

void collect_tables(const toml::table& t, std::vector<const toml::table*>& out) {
  out.push_back(&t);
  for (auto&& [k, v] : t) {
    if (const toml::table* sub = v.as_table()) collect_tables(*sub, out);
  }
}

// The keys of `t` in file order (toml++ keeps a table sorted by key).
std::vector<const toml::key*> keys_in_file_order(const toml::table& t) {
  std::vector<const toml::key*> keys;
  for (auto&& [k, v] : t) keys.push_back(&k);
  std::stable_sort(keys.begin(), keys.end(), [](const toml::key* a, const toml::key* b) {
    const auto &pa = a->source().begin, &pb = b->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return keys;
}

}  // namespace

TomlTable TomlTable::parse_file(const std::string& path) {
  // A regular file (a FIFO blocks, /dev/zero never ends) of a size a configuration can have: the
  // text is read whole, so a huge file would be read into memory before the first syntax error.
  constexpr std::uint64_t kMaxBytes = 16u << 20;
  const std::uint64_t size = check_input_file(path);
  if (size > kMaxBytes) {
    throw UsageError("'" + path + "' has " + std::to_string(size) +
                     " bytes, more than a TOML file attnsim reads (at most 16 MiB)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read '" + path + "': " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError("cannot read '" + path + "'");
  auto doc = std::make_shared<Doc>();
  doc->path = path;
  try {
    doc->root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw UsageError(at(path, e.source().begin) + ": " + one_line(e.description()));
  }
  collect_tables(doc->root, doc->tables);
  return TomlTable(std::move(doc), 0);
}

const std::string& TomlTable::path() const { return doc_->path; }

std::vector<std::string> TomlTable::keys() const {
  std::vector<std::string> out;
  for (const toml::key* k : keys_in_file_order(*doc_->tables[index_])) out.emplace_back(k->str());
  return out;
}

void TomlTable::check_keys(const std::vector<std::string>& allowed, const std::string& what) const {
  for (const toml::key* k : keys_in_file_order(*doc_->tables[index_])) {
    if (std::find(allowed.begin(), allowed.end(), k->str()) != allowed.end()) continue;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    throw UsageError(at(doc_->path, k->source().begin) + ": unknown key '" + std::string(k->str()) +
                     "' in " + what + " (allowed: " + list + ")");
  }
}

bool TomlTable::contains(const std::string& key) const {
  return doc_->tables[index_]->contains(key);
}

bool TomlTable::is_table(const std::string& key) const {
  const toml::node* n = doc_->tables[index_]->get(key);
  return n && n->is_table();
}

std::string TomlTable::where(const std::string& key) const {
  const toml::table& t = *doc_->tables[index_];
  const toml::node* n = key.empty() ? nullptr : t.get(key);
  return at(doc_->path, n ? n->source().begin : t.source().begin);
}

void TomlTable::fail(const std::string& key, const std::string& message) const {
  throw UsageError(where(key) + ": " + message);
}

namespace {

const toml::node& need(const toml::table& t, const std::string& key, const TomlTable& self) {
  const toml::node* n = t.get(key);
  if (!n) self.fail("", "missing key '" + key + "'");
  return *n;
}

}  // namespace

TomlTable TomlTable::table(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  const toml::table* t = n.as_table();
  if (!t) fail(key, key + " must be a table, not " + kind_of(n));
  const auto it = std::find(doc_->tables.begin(), doc_->tables.end(), t);
  return TomlTable(doc_, std::size_t(it - doc_->tables.begin()));
}

std::string TomlTable::string(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  if (!n.is_string()) fail(key, key + " must be a string, not " + kind_of(n));
  return n.as_string()->get();
}

std::vector<std::string> TomlTable::strings(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  const toml::array* a = n.as_array();
  if (!a)
    fail(key, key + " must be an array of strings (" + key + " = [\"...\"]), not " + kind_of(n));
  std::vector<std::string> out;
  for (const toml::node& e : *a) {
    if (!e.is_string()) {
      throw UsageError(at(doc_->path, e.source().begin) + ": " + key +
                       " must be an array of strings; this element is " + kind_of(e));
    }
    out.push_back(e.as_string()->get());
  }
  return out;
}

std::int64_t TomlTable::integer(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  if (!n.is_integer()) fail(key, key + " must be an integer, not " + kind_of(n));
  return n.as_integer()->get();
}

double TomlTable::number(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  if (n.is_integer()) return double(n.as_integer()->get());
  if (!n.is_floating_point()) fail(key, key + " must be a number, not " + kind_of(n));
  return n.as_floating_point()->get();
}

bool TomlTable::boolean(const std::string& key) const {
  const toml::node& n = need(*doc_->tables[index_], key, *this);
  if (!n.is_boolean()) fail(key, key + " must be true or false, not " + kind_of(n));
  return n.as_boolean()->get();
}

}  // namespace attnsim
