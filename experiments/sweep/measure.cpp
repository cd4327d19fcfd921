// The error metrics of a method's output against golden (see measure.hpp).
#include "experiments/sweep/measure.hpp"

#include <algorithm>

#include "experiments/common/error.hpp"

namespace attnsim {

MetricValues measure(const double* out, const double* golden, std::size_t n,
                     const std::string& format) {
  const ErrorMetrics e = error_metrics(out, golden, n);
  // ULP distances are measured in the method's output format: how far the stored output is from
  // the golden value rounded to that same format.
  const UlpHistogram h = ulp_histogram(out, golden, n, parse_ulp_format(format));
  MetricValues m;
  m.cosine = e.cosine;
  m.rel_l1 = e.rel_l1;
  m.rmse = e.rmse;
  m.rel_fro = e.rel_fro;
  m.max_abs = e.max_abs;
  m.nonfinite = std::int64_t(e.nonfinite);
  // Exact order statistics; a NaN where golden is not counts as kUlpNanMismatch (2^63 - 1) in
  // them and in ulp_max, so an all-NaN output reads as far as possible, never as 0.
  m.ulp_p50 = std::int64_t(h.p50);
  m.ulp_p99 = std::int64_t(h.p99);
  m.ulp_max =
      std::int64_t(h.nan_mismatch > 0 ? kUlpNanMismatch : std::min(h.max_ulp, kUlpNanMismatch - 1));
  m.ulp_hist.assign(h.counts.begin(), h.counts.end());
  return m;
}

PointRow measure_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const MethodOutput& out,
                       const std::vector<double>& golden) {
  if (out.o.size() != golden.size()) {
    throw UsageError("method " + method.canonical() + " returned " + std::to_string(out.o.size()) +
                     " values, expected " + std::to_string(golden.size()));
  }
  PointRow r;
  r.point = point;
  r.method = method.canonical();
  r.label = method.short_name();
  r.input = input;
  r.out_format = out.format;
  r.seed = seed;
  const AttentionShape& s = in.shape;
  r.batch = s.batch;
  r.heads_q = s.heads_q;
  r.heads_kv = s.heads_kv;
  r.len_q = s.len_q;
  r.len_kv = s.len_kv;
  r.head_dim = s.head_dim;
  r.causal = in.causal ? 1 : 0;
  r.m = measure(out.o.data(), golden.data(), golden.size(), out.format);
  // O is [batch, heads_q, len_q, head_dim_v]: one head is a contiguous block.
  const std::size_t per_head = std::size_t(s.len_q) * std::size_t(s.head_dim_v);
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads_q; ++h) {
      const std::size_t off = (std::size_t(b) * std::size_t(s.heads_q) + std::size_t(h)) * per_head;
      r.heads.push_back(
          {b, h, measure(out.o.data() + off, golden.data() + off, per_head, out.format)});
    }
  }
  return r;
}

}  // namespace attnsim
