// experiments/io/toml_reader: syntax errors, unknown keys and wrong types as one line naming
// FILE:LINE:COLUMN; keys in file order; the bundled configs parse.
#include "experiments/io/toml_reader.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "experiments/common/error.hpp"

namespace attnsim {
namespace {

std::string write_toml(const std::string& name, const std::string& text) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("attnsim_toml_" + std::to_string(::getpid()) + "_" + name))
                            .string();
  std::ofstream(p) << text;
  return p;
}

// The message of the UsageError `f` throws ("" and a test failure when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

TEST(TomlReader, SyntaxErrorsNameLineAndColumn) {
  // An unclosed array: CLI11's reader used to drop the line silently.
  const std::string p =
      write_toml("syntax.toml", "methods = [\"golden\"\nsynthetic = [\"normal\"]\n");
  const std::string e = error_of([&] { TomlTable::parse_file(p); });
  EXPECT_EQ(e.rfind(p + ":2:1: ", 0), 0u) << e;
  // A key given twice is a TOML error too.
  const std::string twice = write_toml("twice.toml", "seeds = 1\nseeds = 2\n");
  EXPECT_EQ(error_of([&] { TomlTable::parse_file(twice); }).rfind(twice + ":2:", 0), 0u);
  // An unterminated string, bad table headers (the last three reach a toml++ 3.3 parser
  // precondition, tomlplusplus#294: one line here, not an abort), a missing key, two values.
  for (const char* text : {"a = \"x\n", "[rel_fro\nabs = 1\n", "[&\n", "[[[1]]]\n", "[\0274\\",
                           "= 1\n", "a = 1 2\n"}) {
    const std::string q = write_toml("bad.toml", text);
    EXPECT_EQ(error_of([&] { TomlTable::parse_file(q); }).rfind(q + ":1:", 0), 0u) << text;
    std::filesystem::remove(q);
  }
  std::filesystem::remove(p);
  std::filesystem::remove(twice);
}

TEST(TomlReader, UnreadableFiles) {
  EXPECT_NE(error_of([] { TomlTable::parse_file("/nonexistent/x.toml"); }).find("cannot read"),
            std::string::npos);
  EXPECT_NE(error_of([] { TomlTable::parse_file("/tmp"); }).find("directory"), std::string::npos);
}

TEST(TomlReader, UnknownKeysAndWrongTypes) {
  const std::string p = write_toml("types.toml",
                                   "seeds = \"two\"\n"
                                   "methods = [\"golden\", 3]\n"
                                   "output = 1\n"
                                   "flag = \"yes\"\n"
                                   "abs = [1]\n"
                                   "ok = 2.5\n"
                                   "[section]\n"
                                   "mehtod = 1\n");
  const TomlTable t = TomlTable::parse_file(p);
  EXPECT_EQ(t.keys(), (std::vector<std::string>{"seeds", "methods", "output", "flag", "abs", "ok",
                                                "section"}));
  EXPECT_EQ(error_of([&] { t.integer("seeds"); }),
            p + ":1:9: seeds must be an integer, not a string");
  EXPECT_EQ(error_of([&] { t.strings("methods"); }),
            p + ":2:22: methods must be an array of strings; this element is an integer");
  EXPECT_EQ(error_of([&] { t.string("output"); }),
            p + ":3:10: output must be a string, not an integer");
  EXPECT_EQ(error_of([&] { t.boolean("flag"); }),
            p + ":4:8: flag must be true or false, not a string");
  EXPECT_EQ(error_of([&] { t.number("abs"); }), p + ":5:7: abs must be a number, not an array");
  EXPECT_EQ(t.number("ok"), 2.5);
  EXPECT_TRUE(t.is_table("section"));
  EXPECT_FALSE(t.is_table("ok"));
  const std::string e = error_of([&] { t.table("section").check_keys({"method"}, "[section]"); });
  EXPECT_EQ(e, p + ":8:1: unknown key 'mehtod' in [section] (allowed: method)");
  EXPECT_EQ(error_of([&] {
              t.check_keys({"seeds", "methods"}, "the config");
            }),
            p + ":3:1: unknown key 'output' in the config (allowed: seeds, methods)");
  std::filesystem::remove(p);
}

TEST(TomlReader, BundledConfigsParse) {
  for (const char* f : {"baseline_pipeline.toml", "baseline_sage.toml", "baseline_small.toml",
                        "gate.toml", "main.toml", "real_models.toml"}) {
    const std::string p = std::string(ATTNSIM_SOURCE_DIR) + "/experiments/configs/" + f;
    EXPECT_NO_THROW(TomlTable::parse_file(p)) << p;
  }
  const TomlTable gate =
      TomlTable::parse_file(std::string(ATTNSIM_SOURCE_DIR) + "/experiments/configs/gate.toml");
  EXPECT_EQ(gate.strings("key"), (std::vector<std::string>{"method", "input", "seed"}));
  EXPECT_EQ(gate.table("rmse").integer("ulp"), 4096);
}

}  // namespace
}  // namespace attnsim
