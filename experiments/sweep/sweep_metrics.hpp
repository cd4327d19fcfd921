// The rows of a sweep: one per point (method, input, seed) with the error metrics against golden,
// plus one per (point, batch, head); printed as a table, written as one HDF5 dataset per column,
// and serialised losslessly for checkpoints and MPI gathers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/sweep/measure.hpp"

namespace attnsim {

// One line (no '\n' inside, none at the end), exact: doubles as hexadecimal floats.
std::string serialize_row(const PointRow& row);
// The inverse; false if the line is not a complete record (a checkpoint cut mid-write).
bool parse_row(const std::string& line, PointRow* row);

class ResultTable {
 public:
  void add(PointRow row) { rows_.push_back(std::move(row)); }
  void sort_by_point();
  const std::vector<PointRow>& rows() const { return rows_; }
  void print(std::FILE* f) const;
  // A method x input table of one metric (rows: labels in point order; columns: inputs, the mean
  // over seeds), "n/a" for skipped points, their reasons under the table.
  void print_summary(std::FILE* f, const std::string& metric) const;
  // Columns under `prefix` ("" or "metrics/"), per-head columns under `prefix + "per_head/"`.
  void write(H5Writer& w, const std::string& prefix = "") const;

 private:
  std::vector<PointRow> rows_;
};

// Metric column names and what they mean, for `attnsim gate` and `attnsim compare`.
const std::vector<std::string>& metric_columns();
// The metrics print_summary takes (rel_l1 first: SageAttention2's headline metric).
const std::vector<std::string>& summary_metrics();

}  // namespace attnsim
