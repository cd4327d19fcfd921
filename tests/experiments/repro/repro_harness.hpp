// The repro tests' runner: `attnsim repro --quick --quiet ARGS` from the source directory, with an
// environment prefix (OMP_NUM_THREADS=...), stdout and stderr kept in a scratch directory.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace attnsim {

inline std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A CSV text as rows of cells (double quotes group a cell with commas; no escaped quotes).
inline std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// Returns the exit code; *out gets stdout when given.
inline int run_repro_quick(const std::filesystem::path& dir, const std::string& env,
                           const std::string& args, std::string* out) {
  const std::string so = (dir / "stdout.txt").string(), se = (dir / "stderr.txt").string();
  const std::string cmd = "cd " + std::string(ATTNSIM_SOURCE_DIR) + " && " + env + " " +
                          ATTNSIM_EXE + " repro --quick --quiet " + args + " >" + so + " 2>" + se;
  const int status = std::system(cmd.c_str());
  if (out) *out = slurp(so);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The fixture of a repro test suite: a scratch directory made once for the suite (ctest runs
// every test in its own process, so each test runs only the reproductions it reads) and removed
// after it. Suite::kName names the directory.
template <class Suite>
class ReproTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("attnsim_repro_" + std::string(Suite::kName) + "_" +
                                      std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }
  static int run(const std::string& env, const std::string& args, std::string* out) {
    return run_repro_quick(*dir_, env, args, out);
  }
  static inline std::filesystem::path* dir_ = nullptr;
};

}  // namespace attnsim
