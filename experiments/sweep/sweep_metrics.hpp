// The rows of a sweep: one per point (method, input, seed) with the error metrics against golden,
// plus one per (point, batch, head); printed as a table, written as one HDF5 dataset per column,
// and serialised losslessly for checkpoints and MPI gathers.
#pragma once

#include <cstdint>
#include <cstdio>
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
  // Columns under `prefix` ("" or "metrics/"), per-head columns under `prefix + "per_head/"`.
  void write(H5Writer& w, const std::string& prefix = "") const;

 private:
  std::vector<PointRow> rows_;
};

// Metric column names and what they mean, for `attnsim gate` and `attnsim compare`.
const std::vector<std::string>& metric_columns();

}  // namespace attnsim
