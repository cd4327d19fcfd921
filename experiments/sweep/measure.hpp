// The error metrics of a method's output against golden, overall and per (batch, head), as every
// command reports them (a row of a sweep, `attnsim run`) and `attnsim.metrics` returns them; no
// HDF5, so the Python module links them.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "numerics/metrics.hpp"

namespace attnsim {

// The metrics of one output (a whole tensor, or one head of it) against golden.
//   ulp_p50, ulp_p99, ulp_max   encodings of the output format between o and golden rounded to it
//                               (numerics/metrics.hpp ulp_histogram): exact per element, but an
//                               output near zero is millions of encodings from a golden value of
//                               the other sign while the error is tiny (ulp_max 1.7e9 for FP32
//                               flash at rel_l1 1e-6); kept for what they measure (bits), and
//                               because they are a contract of results files
//   ulp_row_p50, ulp_row_p99, ulp_row_max
//                               |o - golden| in units of the output format's spacing at the
//                               element's row magnitude, max |golden| over its head_dim_v values
//                               (numerics/metrics.hpp row_scaled_ulp): meaningful near zero; 0.5
//                               is one rounding of the output at the row's scale
struct MetricValues {
  double cosine = 1, rel_l1 = 0, rmse = 0, rel_fro = 0, max_abs = 0;
  std::int64_t nonfinite = 0, ulp_p50 = 0, ulp_p99 = 0, ulp_max = 0;
  std::vector<std::int64_t> ulp_hist;  // UlpHistogram::kBuckets counts
  double ulp_row_p50 = 0, ulp_row_p99 = 0, ulp_row_max = 0;
};

// `row_len`: elements per output row (head_dim_v), for the row-scaled ULP figures.
MetricValues measure(const double* out, const double* golden, std::size_t n,
                     const std::string& format, std::size_t row_len);

struct HeadRow {
  std::int64_t batch_index = 0, head = 0;
  MetricValues m;
};

struct PointRow {
  std::int64_t point = 0;  // index in the sweep's point order
  std::string method, label, input, out_format;
  // MethodOutput::resolved as "key=value,..." in key order ("" when nothing was resolved).
  std::string resolved;
  // Why the point was not computed ("" when it was): with --skip-unsupported, the method's own
  // refusal of this input (a head_dim or shape its kernel does not take). Metrics are NaN then.
  std::string skipped;
  std::int64_t seed = 0, batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_kv = 0, head_dim = 0,
               causal = 0;
  MetricValues m;
  std::vector<HeadRow> heads;  // batch-major, then head
  // `sweep --counters`: the point's silent-failure counters, StageCounters::column_values()
  // order (cnt_<stage>_<event>); empty when not counted (and for a skipped point).
  std::vector<std::int64_t> counters;
};

// FP64 golden attention of one input with each causal-mask alignment its methods apply
// (sim/problem.hpp: a top-left kernel on a causal input with len_q != len_kv hides other keys than
// the bottom-right default), each computed once, on first use; the points of a sweep share it
// from several threads. The input must outlive it.
class Goldens {
 public:
  explicit Goldens(const AttentionInput& in) : in_(&in) {}
  const std::vector<double>& get(CausalAlign align);
  // The golden `method`'s output is measured against: with the method's own alignment.
  // A method with its own problem options (a window, a softcap) gets that problem's golden.
  const std::vector<double>& for_method(const MethodConfig& method);
  // The alignment that golden uses for `method`: bottom-right unless the method's kernel is
  // top-left and the alignment matters for this input.
  CausalAlign align_of(const MethodConfig& method) const;

 private:
  const AttentionInput* in_;
  std::mutex mu_;
  std::optional<std::vector<double>> g_[2];
  // Goldens of changed problems, by (alignment, window, softcap).
  std::map<std::tuple<int, int, double>, std::vector<double>> changed_;
};

// The causal mask `method` applies to `in`, by name: "none", "causal" (len_q == len_kv: both
// alignments hide the same keys), else "bottom_right" or "top_left" (what `run --output` writes
// as `golden_mask` and attnsim.AttentionResult.causal_mask says).
std::string causal_mask_name(const MethodConfig& method, const AttentionInput& in);

// Measures a method's output against golden with the method's own causal alignment, overall and
// per (batch, head). A top-left golden is said in the row: `golden_mask=top_left` in `resolved`.
PointRow measure_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const MethodOutput& out,
                       Goldens& goldens);
// The row of a point whose method refused its input (`why`): NaN metrics, no per-head rows.
PointRow skipped_point(std::int64_t point, const MethodConfig& method, const std::string& input,
                       std::int64_t seed, const AttentionInput& in, const std::string& why);
// "key=value,..." of a resolved map, in key order.
std::string resolved_text(const std::map<std::string, std::string>& resolved);

}  // namespace attnsim
