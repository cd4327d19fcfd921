// The paper-reproduction framework behind `attnsim repro NAME`: a registry of reproductions, each a
// function that returns a table (printed on stdout beside the paper's figure, and written to CSV or
// HDF5 with the same rows). Simulator issues add theirs with one register_*_repros() hook.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sim/problem.hpp"

namespace attnsim {

struct ReproOptions {
  bool quick = false;  // the reduced version CI runs (under a minute on one core)
  int samples = 0;     // 0: the reproduction's default (quick or full)
  bool progress = false;
  // The --out path ("" when none): reproductions that produce more than one table write the
  // detailed ones next to it (`turbo`: FILE_errors.csv beside FILE.csv), on MPI rank 0.
  std::string out;
};

// A column-typed table: 's' string, 'i' integer, 'f' double.
struct ReproTable {
  struct Column {
    std::string name;
    char type;
    std::string help;
  };
  std::vector<Column> columns;
  struct Cell {
    std::string s;
    double v = 0;
  };
  std::vector<std::vector<Cell>> rows;
  std::string title;  // one line: what the table reproduces (paper, figure/table)
  std::string notes;  // printed under the table; HDF5: the root attribute `notes`

  void add_row(std::vector<Cell> row);
  void print(std::FILE* f) const;
  // CSV (RFC 4180; doubles with 17 significant digits) or HDF5 (one dataset per column; title and
  // notes as root attributes), by the path's extension; atomic.
  void write(const std::string& path, const std::string& repro_name, const ReproOptions& opt) const;
  // The same for any table (attnsim attribute, ...): `root_attrs` are string attributes of the
  // HDF5 root (ignored for CSV); provenance is always written.
  void write_table(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& root_attrs) const;

 private:
  void write_impl(const std::string& path,
                  const std::vector<std::pair<std::string, std::string>>& root_attrs,
                  const ReproOptions* repro) const;
};

struct Reproduction {
  std::string name;
  std::string paper;  // citation and the figure/table the output sits beside
  std::string help;
  int default_samples = 1, quick_samples = 1;
  std::function<ReproTable(const ReproOptions&)> run;
};

const std::vector<Reproduction>& repro_registry();

// Registration hooks, one per reproduction file (repro_*.cpp).
void register_flash_repros(std::vector<Reproduction>& registry);
void register_sage_repros(std::vector<Reproduction>& registry);
void register_amla_repros(std::vector<Reproduction>& registry);
void register_lean_repros(std::vector<Reproduction>& registry);
void register_turbo_repros(std::vector<Reproduction>& registry);
void register_failure_repros(std::vector<Reproduction>& registry);
void register_invariance_repros(std::vector<Reproduction>& registry);

// The first n tokens of every head, queries and keys alike (n <= 0 or past both lengths: the
// input itself): the repros' shorter runs of real dumps (sage, turbo).
AttentionInput first_tokens(const AttentionInput& in, int n);

}  // namespace attnsim
