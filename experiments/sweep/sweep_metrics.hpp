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
#include "numerics/metrics.hpp"

namespace attnsim {

// The metrics of one output (a whole tensor, or one head of it) against golden.
struct MetricValues {
  double cosine = 1, rel_l1 = 0, rmse = 0, rel_fro = 0, max_abs = 0;
  std::int64_t nonfinite = 0, ulp_p50 = 0, ulp_p99 = 0, ulp_max = 0;
  std::vector<std::int64_t> ulp_hist;  // UlpHistogram::kBuckets counts
};

MetricValues measure(const double* out, const double* golden, std::size_t n,
                     const std::string& format);

struct HeadRow {
  std::int64_t batch_index = 0, head = 0;
  MetricValues m;
};

struct PointRow {
  std::int64_t point = 0;  // index in the sweep's point order
  std::string method, label, input, out_format;
  std::int64_t seed = 0, batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_kv = 0, head_dim = 0,
               causal = 0;
  MetricValues m;
  std::vector<HeadRow> heads;  // batch-major, then head
};

// Measures a method's output against golden, overall and per (batch, head).
PointRow measure_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const MethodOutput& out,
                       const std::vector<double>& golden);

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
