// The rows of a sweep (see sweep_metrics.hpp).
#include "experiments/sweep_metrics.hpp"

#include "experiments/error.hpp"

namespace attnsim {

void ResultTable::add(const std::string& method, const std::string& label, const std::string& input, std::int64_t seed,
                      const AttentionInput& in, const MethodOutput& out, const std::vector<double>& golden) {
  if (out.o.size() != golden.size()) {
    throw UsageError("method " + method + " returned " + std::to_string(out.o.size()) + " values, expected " +
                     std::to_string(golden.size()));
  }
  const ErrorMetrics m = error_metrics(out.o, golden);
  // ULP distances are measured in the method's output format: how far the stored output is from
  // the golden value rounded to that same format.
  const UlpHistogram h = ulp_histogram(out.o.data(), golden.data(), golden.size(), parse_ulp_format(out.format));
  method_.push_back(method);
  label_.push_back(label);
  input_.push_back(input);
  out_format_.push_back(out.format);
  seed_.push_back(seed);
  const AttentionShape& s = in.shape;
  batch_.push_back(s.batch);
  heads_q_.push_back(s.heads_q);
  heads_kv_.push_back(s.heads_kv);
  len_q_.push_back(s.len_q);
  len_kv_.push_back(s.len_kv);
  head_dim_.push_back(s.head_dim);
  causal_.push_back(in.causal ? 1 : 0);
  cosine_.push_back(m.cosine);
  rel_l1_.push_back(m.rel_l1);
  rmse_.push_back(m.rmse);
  rel_fro_.push_back(m.rel_fro);
  max_abs_.push_back(m.max_abs);
  nonfinite_.push_back(std::int64_t(m.nonfinite));
  ulp_p50_.push_back(std::int64_t(h.quantile_ulp(0.5)));
  ulp_p99_.push_back(std::int64_t(h.quantile_ulp(0.99)));
  ulp_max_.push_back(std::int64_t(h.max_ulp));
  ulp_hist_.insert(ulp_hist_.end(), h.counts.begin(), h.counts.end());
}

void ResultTable::print(std::FILE* f) const {
  std::fprintf(f, "%-34s %-28s %4s %10s %10s %10s %10s %10s %6s %7s %8s\n", "method", "input", "seed", "cos_sim",
               "rel_l1", "rmse", "rel_fro", "max_abs", "out", "ulp_p99", "ulp_max");
  for (std::size_t i = 0; i < rows(); ++i) {
    std::string in = input_[i];
    if (in.size() > 28) in = in.substr(0, 25) + "...";
    std::fprintf(f, "%-34s %-28s %4lld %10.8f %10.3e %10.3e %10.3e %10.3e %6s %7lld %8lld\n", label_[i].c_str(),
                 in.c_str(), (long long)seed_[i], cosine_[i], rel_l1_[i], rmse_[i], rel_fro_[i], max_abs_[i],
                 out_format_[i].c_str(), (long long)ulp_p99_[i], (long long)ulp_max_[i]);
  }
}

void ResultTable::write(H5Writer& w) const {
  const std::uint64_t n = rows();
  w.write_strings("method", method_);
  w.write_strings("label", label_);
  w.write_strings("input", input_);
  w.write_strings("out_format", out_format_);
  auto i64 = [&](const char* name, const std::vector<std::int64_t>& v) { w.write_i64(name, {n}, v.data()); };
  auto f64 = [&](const char* name, const std::vector<double>& v) { w.write_f64(name, {n}, v.data()); };
  i64("seed", seed_);
  i64("batch", batch_);
  i64("heads_q", heads_q_);
  i64("heads_kv", heads_kv_);
  i64("len_q", len_q_);
  i64("len_kv", len_kv_);
  i64("head_dim", head_dim_);
  i64("causal", causal_);
  f64("cosine", cosine_);
  f64("rel_l1", rel_l1_);
  f64("rmse", rmse_);
  f64("rel_fro", rel_fro_);
  f64("max_abs", max_abs_);
  i64("nonfinite", nonfinite_);
  i64("ulp_p50", ulp_p50_);
  i64("ulp_p99", ulp_p99_);
  i64("ulp_max", ulp_max_);
  std::vector<std::int64_t> hist(ulp_hist_.begin(), ulp_hist_.end());
  w.write_i64("ulp_hist", {n, std::uint64_t(UlpHistogram::kBuckets)}, hist.data());
  std::string labels;
  for (int k = 0; k < UlpHistogram::kBuckets; ++k) labels += (k ? "," : "") + UlpHistogram::bucket_label(k);
  w.attr_string("ulp_hist", "buckets", labels);
  w.attr_string("/", "metrics",
                "cosine, rel_l1 (SageAttention2 A.7), rmse, rel_fro (AMLA 5.1), max_abs against FP64 golden; "
                "ULP distances in each row's out_format");
}

}  // namespace attnsim
