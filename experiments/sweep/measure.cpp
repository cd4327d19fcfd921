// The error metrics of a method's output against golden (see measure.hpp).
#include "experiments/sweep/measure.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "experiments/common/error.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

MetricValues measure(const double* out, const double* golden, std::size_t n,
                     const std::string& format, std::size_t row_len) {
  // ULP distances are measured in the method's output format: how far the stored output is from
  // the golden value rounded to that same format.
  const UlpFormat uf = parse_ulp_format(format);
  // On the OpenMP threads, with results that cannot depend on them: one thread sums the error
  // metrics in element order (compensated sums: the order sets their last bits), the others
  // take the per-element ULP distances and row-scaled errors in parts of whole rows, then the
  // two sets are ranked side by side (exact order statistics, counts and maxima).
  ErrorMetrics e;
  std::vector<std::uint64_t> dist(n);
  std::vector<double> row_err(n);
  const std::size_t row = std::max<std::size_t>(row_len, 1);
  const std::size_t part = row * std::max<std::size_t>(1, (std::size_t{1} << 15) / row);
  const std::ptrdiff_t parts = std::ptrdiff_t((n + part - 1) / part);
#pragma omp parallel
  {
#pragma omp single nowait
    e = error_metrics(out, golden, n);
#pragma omp for schedule(dynamic, 1)
    for (std::ptrdiff_t k = 0; k < parts; ++k) {
      const std::size_t i0 = std::size_t(k) * part, len = std::min(part, n - i0);
      ulp_distances(out + i0, golden + i0, len, uf, dist.data() + i0);
      row_scaled_errors(out + i0, golden + i0, len, row_len, uf, row_err.data() + i0);
    }
  }
  UlpHistogram h;
  RowUlpStats rs;
#pragma omp parallel sections
  {
#pragma omp section
    h = ulp_histogram_of(dist.data(), n, uf);
#pragma omp section
    if (row_len != 0) rs = row_ulp_stats_of(row_err.data(), n);
  }
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
  m.ulp_max = std::int64_t(h.nan_mismatch > 0 ? kUlpNanMismatch
                                                : std::min(h.max_ulp, kUlpNanMismatch - 1));
  m.ulp_hist.assign(h.counts.begin(), h.counts.end());
  m.ulp_row_p50 = rs.p50;
  m.ulp_row_p99 = rs.p99;
  m.ulp_row_max = rs.max;
  return m;
}

std::string resolved_text(const std::map<std::string, std::string>& resolved) {
  std::string t;
  for (const auto& [k, v] : resolved) t += (t.empty() ? "" : ",") + k + "=" + v;
  return t;
}

namespace {

// What a measured and a skipped row share: the point, the method, the input and its shape.
PointRow row_head(std::int64_t point, const MethodConfig& method, const std::string& input,
                  std::int64_t seed, const AttentionInput& in) {
  PointRow r;
  r.point = point;
  r.method = method.canonical();
  r.label = method.short_name();
  r.input = input;
  r.seed = seed;
  const AttentionShape& s = in.shape;
  r.batch = s.batch;
  r.heads_q = s.heads_q;
  r.heads_kv = s.heads_kv;
  r.len_q = s.len_q;
  r.len_kv = s.len_kv;
  r.head_dim = s.head_dim;
  r.causal = in.causal ? 1 : 0;
  return r;
}

}  // namespace

const std::vector<double>& Goldens::get(CausalAlign align) {
  // The same golden for both alignments where they hide the same keys.
  if (!causal_alignment_matters(in_->causal, in_->shape)) align = CausalAlign::kBottomRight;
  std::optional<std::vector<double>>& slot = g_[align == CausalAlign::kTopLeft ? 1 : 0];
  const std::lock_guard<std::mutex> lock(mu_);
  if (!slot) slot = golden_attention_ref(*in_, align);
  return *slot;
}

const std::vector<double>& Goldens::for_method(const MethodConfig& method) {
  const CausalAlign align = align_of(method);
  if (!method.changes_problem()) return get(align);
  AttentionInput p = method.problem(*in_);
  if (p.window == in_->window && p.softcap == in_->softcap) return get(align);
  const std::tuple<int, int, double> key{int(align), p.window, p.softcap};
  {
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = changed_.find(key);
    if (it != changed_.end()) return it->second;
  }
  std::vector<double> g = golden_attention_ref(p, align);
  const std::lock_guard<std::mutex> lock(mu_);
  return changed_.emplace(key, std::move(g)).first->second;
}

CausalAlign Goldens::align_of(const MethodConfig& method) const {
  if (!causal_alignment_matters(in_->causal, in_->shape)) return CausalAlign::kBottomRight;
  return method.causal_align(*in_);
}

std::string causal_mask_name(const MethodConfig& method, const AttentionInput& in) {
  if (!in.causal) return "none";
  if (!causal_alignment_matters(true, in.shape)) return "causal";
  return method.causal_align(in) == CausalAlign::kTopLeft ? "top_left" : "bottom_right";
}

PointRow measure_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const MethodOutput& out,
                       Goldens& goldens) {
  const CausalAlign align = goldens.align_of(method);
  const std::vector<double>& golden = goldens.for_method(method);
  if (out.o.size() != golden.size()) {
    throw UsageError("method " + method.canonical() + " returned " + std::to_string(out.o.size()) +
                     " values, expected " + std::to_string(golden.size()));
  }
  PointRow r = row_head(point, method, input, seed, in);
  r.out_format = out.format;
  std::map<std::string, std::string> resolved = out.resolved;
  if (align == CausalAlign::kTopLeft) resolved["golden_mask"] = "top_left";
  r.resolved = resolved_text(resolved);
  const AttentionShape& s = in.shape;
  const std::size_t dv = std::size_t(s.head_dim_v);
  r.m = measure(out.o.data(), golden.data(), golden.size(), out.format, dv);
  // O is [batch, heads_q, len_q, head_dim_v]: one head is a contiguous block.
  const std::size_t per_head = std::size_t(s.len_q) * std::size_t(s.head_dim_v);
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads_q; ++h) {
      const std::size_t off = (std::size_t(b) * std::size_t(s.heads_q) + std::size_t(h)) * per_head;
      r.heads.push_back(
          {b, h, measure(out.o.data() + off, golden.data() + off, per_head, out.format, dv)});
    }
  }
  return r;
}

PointRow skipped_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const std::string& why) {
  PointRow r = row_head(point, method, input, seed, in);
  r.skipped = why.empty() ? "refused" : why;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.m.cosine = r.m.rel_l1 = r.m.rmse = r.m.rel_fro = r.m.max_abs = nan;
  r.m.ulp_row_p50 = r.m.ulp_row_p99 = r.m.ulp_row_max = nan;
  r.m.nonfinite = 0;
  r.m.ulp_p50 = r.m.ulp_p99 = r.m.ulp_max = std::int64_t(kUlpNanMismatch);
  r.m.ulp_hist.assign(UlpHistogram::kBuckets, 0);
  return r;
}

}  // namespace attnsim
