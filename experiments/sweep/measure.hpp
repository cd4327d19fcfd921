// The error metrics of a method's output against golden, overall and per (batch, head), as every
// command reports them (a row of a sweep, `attnsim run`) and `attnsim.metrics` returns them; no
// HDF5, so the Python module links them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace attnsim
