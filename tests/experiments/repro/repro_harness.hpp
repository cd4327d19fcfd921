// The repro tests' runner: `attnsim repro --quick --quiet ARGS` from the source directory, with an
// environment prefix (OMP_NUM_THREADS=...), stdout and stderr kept in a scratch directory.
#pragma once

#include <sys/wait.h>

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

}  // namespace attnsim
