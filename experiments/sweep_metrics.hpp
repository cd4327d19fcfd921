// The rows of a sweep: one per (method, input, seed), with the error metrics against golden;
// printed as a table and written as one HDF5 dataset per column.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/hdf5_io.hpp"
#include "experiments/methods.hpp"
#include "numerics/metrics.hpp"

namespace attnsim {

class ResultTable {
 public:
  void add(const std::string& method, const std::string& label, const std::string& input, std::int64_t seed, const AttentionInput& in,
           const MethodOutput& out, const std::vector<double>& golden);
  void print(std::FILE* f) const;
  void write(H5Writer& w) const;
  std::size_t rows() const { return method_.size(); }

 private:
  std::vector<std::string> method_, label_, input_, out_format_;
  std::vector<std::int64_t> seed_, batch_, heads_q_, heads_kv_, len_q_, len_kv_, head_dim_, causal_;
  std::vector<double> cosine_, rel_l1_, rmse_, rel_fro_, max_abs_;
  std::vector<std::int64_t> ulp_p50_, ulp_p99_, ulp_max_, nonfinite_;
  std::vector<std::uint64_t> ulp_hist_;  // rows x UlpHistogram::kBuckets
};

}  // namespace attnsim
