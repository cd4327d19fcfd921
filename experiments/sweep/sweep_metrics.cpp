// The rows of a sweep (see sweep_metrics.hpp).
#include "experiments/sweep/sweep_metrics.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "experiments/common/error.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim {

namespace {

// Strings are percent-escaped so a record is one tab-separated line.
std::string escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '%' || c == '\t' || c == '\n' || c == '\r' || c < 0x20) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      o += buf;
    } else {
      o += char(c);
    }
  }
  return o;
}

bool unescape(const std::string& s, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      *out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const std::string hex = s.substr(i + 1, 2);
    char* end = nullptr;
    const long v = std::strtol(hex.c_str(), &end, 16);
    if (hex.size() != 2 || end != hex.c_str() + 2) return false;
    *out += char(v);
    i += 2;
  }
  return true;
}

void put_f(std::string& o, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "\t%a", v);
  o += buf;
}
void put_i(std::string& o, std::int64_t v) { o += "\t" + std::to_string(v); }

void put_metrics(std::string& o, const MetricValues& m) {
  put_f(o, m.cosine);
  put_f(o, m.rel_l1);
  put_f(o, m.rmse);
  put_f(o, m.rel_fro);
  put_f(o, m.max_abs);
  put_i(o, m.nonfinite);
  put_i(o, m.ulp_p50);
  put_i(o, m.ulp_p99);
  put_i(o, m.ulp_max);
  put_i(o, std::int64_t(m.ulp_hist.size()));
  for (auto c : m.ulp_hist) put_i(o, c);
  put_f(o, m.ulp_row_p50);
  put_f(o, m.ulp_row_p99);
  put_f(o, m.ulp_row_max);
}

struct Fields {
  std::vector<std::string> f;
  std::size_t i = 0;
  bool ok = true;
  const std::string* next() {
    if (i >= f.size()) {
      ok = false;
      return nullptr;
    }
    return &f[i++];
  }
  double d() {
    const std::string* s = next();
    if (!s || s->empty()) return ok = false, 0.0;
    char* end = nullptr;
    const double v = std::strtod(s->c_str(), &end);
    if (end != s->c_str() + s->size()) ok = false;
    return v;
  }
  std::int64_t i64() {
    const std::string* s = next();
    if (!s || s->empty()) return ok = false, 0;
    char* end = nullptr;
    const long long v = std::strtoll(s->c_str(), &end, 10);
    if (end != s->c_str() + s->size()) ok = false;
    return v;
  }
  std::string str() {
    const std::string* s = next();
    std::string out;
    if (!s || !unescape(*s, &out)) ok = false;
    return out;
  }
};

void get_metrics(Fields& f, MetricValues* m) {
  m->cosine = f.d();
  m->rel_l1 = f.d();
  m->rmse = f.d();
  m->rel_fro = f.d();
  m->max_abs = f.d();
  m->nonfinite = f.i64();
  m->ulp_p50 = f.i64();
  m->ulp_p99 = f.i64();
  m->ulp_max = f.i64();
  const std::int64_t n = f.i64();
  if (n != UlpHistogram::kBuckets) {
    f.ok = false;
    return;
  }
  m->ulp_hist.resize(std::size_t(n));
  for (auto& c : m->ulp_hist) c = f.i64();
  m->ulp_row_p50 = f.d();
  m->ulp_row_p99 = f.d();
  m->ulp_row_max = f.d();
}

// row2: row1 plus resolved, skipped and the row-scaled ULP figures (a row1 checkpoint line is
// not read: its points are computed again).
constexpr const char* kRecordTag = "row2";

}  // namespace

std::string serialize_row(const PointRow& r) {
  std::string o = kRecordTag;
  put_i(o, r.point);
  for (const std::string* s :
       {&r.method, &r.label, &r.input, &r.out_format, &r.resolved, &r.skipped})
    o += "\t" + escape(*s);
  for (std::int64_t v :
       {r.seed, r.batch, r.heads_q, r.heads_kv, r.len_q, r.len_kv, r.head_dim, r.causal})
    put_i(o, v);
  put_metrics(o, r.m);
  put_i(o, std::int64_t(r.heads.size()));
  for (const auto& h : r.heads) {
    put_i(o, h.batch_index);
    put_i(o, h.head);
    put_metrics(o, h.m);
  }
  // Counted points (sweep --counters) only: "cnt", the count of values, the values.
  if (!r.counters.empty()) {
    o += "\tcnt";
    put_i(o, std::int64_t(r.counters.size()));
    for (auto c : r.counters) put_i(o, c);
  }
  o += "\tend";
  return o;
}

bool parse_row(const std::string& line, PointRow* r) {
  Fields f;
  std::size_t pos = 0;
  while (true) {
    const auto tab = line.find('\t', pos);
    f.f.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
    if (tab == std::string::npos) break;
    pos = tab + 1;
  }
  const std::string* tag = f.next();
  if (!tag || *tag != kRecordTag) return false;
  r->point = f.i64();
  r->method = f.str();
  r->label = f.str();
  r->input = f.str();
  r->out_format = f.str();
  r->resolved = f.str();
  r->skipped = f.str();
  for (std::int64_t* v : {&r->seed, &r->batch, &r->heads_q, &r->heads_kv, &r->len_q, &r->len_kv,
                          &r->head_dim, &r->causal}) {
    *v = f.i64();
  }
  get_metrics(f, &r->m);
  const std::int64_t nh = f.i64();
  if (!f.ok || nh < 0 || nh > (1 << 24)) return false;
  r->heads.assign(std::size_t(nh), HeadRow{});
  for (auto& h : r->heads) {
    h.batch_index = f.i64();
    h.head = f.i64();
    get_metrics(f, &h.m);
    if (!f.ok) return false;
  }
  const std::string* end = f.next();
  r->counters.clear();
  if (f.ok && end && *end == "cnt") {
    const std::int64_t nc = f.i64();
    if (!f.ok || nc != std::int64_t(kCounterStages) * kCounterEvents) return false;
    r->counters.resize(std::size_t(nc));
    for (auto& c : r->counters) c = f.i64();
    end = f.next();
  }
  return f.ok && end && *end == "end" && f.i == f.f.size();
}

void ResultTable::sort_by_point() {
  std::stable_sort(rows_.begin(), rows_.end(),
                   [](const PointRow& a, const PointRow& b) { return a.point < b.point; });
}

void ResultTable::print(std::FILE* f) const {
  // Method and input columns as wide as their longest entry: never truncated, so two inputs that
  // differ only in a long name's tail cannot look the same. ULP figures of a NaN mismatch
  // (kUlpNanMismatch) print as "nan". A resolved column follows when some method resolved an
  // "auto" value.
  int wm = 6, wi = 5;
  bool any_resolved = false;
  for (const auto& r : rows_) {
    wm = std::max(wm, int(r.label.size()));
    wi = std::max(wi, int(r.input.size()));
    any_resolved = any_resolved || !r.resolved.empty();
  }
  auto ulp = [](std::int64_t v) {
    return v == std::int64_t(kUlpNanMismatch) ? std::string("nan") : std::to_string(v);
  };
  std::fprintf(f, "%-*s %-*s %4s %10s %10s %10s %10s %10s %6s %9s %7s %7s %8s %11s%s\n", wm,
               "method", wi, "input", "seed", "cos_sim", "rel_l1", "rmse", "rel_fro", "max_abs",
               "out", "nonfinite", "ulp_p50", "ulp_p99", "ulp_max", "ulp_row_p99",
               any_resolved ? " resolved" : "");
  for (const auto& r : rows_) {
    if (!r.skipped.empty()) {
      std::fprintf(f, "%-*s %-*s %4lld skipped: %s\n", wm, r.label.c_str(), wi, r.input.c_str(),
                   (long long)r.seed, r.skipped.c_str());
      continue;
    }
    std::fprintf(
        f, "%-*s %-*s %4lld %10.8f %10.3e %10.3e %10.3e %10.3e %6s %9lld %7s %7s %8s %11.3g%s%s\n",
        wm, r.label.c_str(), wi, r.input.c_str(), (long long)r.seed, r.m.cosine, r.m.rel_l1,
        r.m.rmse, r.m.rel_fro, r.m.max_abs, r.out_format.c_str(), (long long)r.m.nonfinite,
        ulp(r.m.ulp_p50).c_str(), ulp(r.m.ulp_p99).c_str(), ulp(r.m.ulp_max).c_str(),
        r.m.ulp_row_p99, r.resolved.empty() ? "" : " ", r.resolved.c_str());
  }
}

namespace {

// The value of a metric column by name (summary tables); NaN for a name that is not one.
double metric_value(const MetricValues& m, const std::string& name) {
  if (name == "cosine") return m.cosine;
  if (name == "rel_l1") return m.rel_l1;
  if (name == "rmse") return m.rmse;
  if (name == "rel_fro") return m.rel_fro;
  if (name == "max_abs") return m.max_abs;
  if (name == "ulp_row_p50") return m.ulp_row_p50;
  if (name == "ulp_row_p99") return m.ulp_row_p99;
  if (name == "ulp_row_max") return m.ulp_row_max;
  return std::numeric_limits<double>::quiet_NaN();
}

// "data/real/smollm2_gpl3.h5:layer_15" -> "smollm2_gpl3:layer_15"; "synthetic:normal:nq=256" as
// it is.
std::string short_input(const std::string& input) {
  if (input.rfind("synthetic:", 0) == 0) return input.substr(10);
  const std::size_t slash = input.find_last_of('/', input.find(':'));
  std::string s = slash == std::string::npos ? input : input.substr(slash + 1);
  const std::size_t h5 = s.find(".h5");
  if (h5 != std::string::npos) s.erase(h5, 3);
  return s;
}

}  // namespace

const std::vector<std::string>& summary_metrics() {
  static const std::vector<std::string> k{"rel_l1",  "rel_fro",     "cosine",      "rmse",
                                          "max_abs", "ulp_row_p50", "ulp_row_p99", "ulp_row_max"};
  return k;
}

void ResultTable::print_summary(std::FILE* f, const std::string& metric) const {
  // Rows: labels in first-seen (point) order; columns: inputs in point order, seeds averaged.
  std::vector<std::string> labels, inputs;
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> cell;
  std::map<std::pair<std::string, std::string>, std::string> why;
  bool seeds = false;
  for (const auto& r : rows_) {
    if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
    if (std::find(inputs.begin(), inputs.end(), r.input) == inputs.end()) inputs.push_back(r.input);
    const auto key = std::make_pair(r.label, r.input);
    if (!r.skipped.empty()) {
      why[key] = r.skipped;
      continue;
    }
    auto& [sum, n] = cell[key];
    sum += metric_value(r.m, metric);
    seeds = seeds || ++n > 1;
  }
  // A bare method name beside the same method with options is its defaults: say so.
  auto shown = [&](const std::string& label) {
    if (label.find(':') != std::string::npos) return label;
    for (const auto& l : labels)
      if (l.rfind(label + ":", 0) == 0) return label + " (defaults)";
    return label;
  };
  int wl = 6;
  for (const auto& l : labels) wl = std::max(wl, int(shown(l).size()));
  std::vector<int> wc;
  for (const auto& i : inputs) wc.push_back(std::max(9, int(short_input(i).size())));
  std::fprintf(f, "%s against FP64 golden attention%s\n", metric.c_str(),
               seeds ? " (mean over seeds)" : "");
  std::fprintf(f, "%-*s", wl, "method");
  for (std::size_t c = 0; c < inputs.size(); ++c)
    std::fprintf(f, "  %*s", wc[c], short_input(inputs[c]).c_str());
  std::fprintf(f, "\n");
  // n/a: the methods that refused an input, grouped by input and reason.
  std::vector<std::pair<std::string, std::string>> reasons;  // (input + reason, methods)
  for (const auto& l : labels) {
    std::fprintf(f, "%-*s", wl, shown(l).c_str());
    for (std::size_t c = 0; c < inputs.size(); ++c) {
      const auto key = std::make_pair(l, inputs[c]);
      char buf[32];
      if (cell.count(key)) {
        const auto& [sum, n] = cell.at(key);
        std::snprintf(buf, sizeof buf, metric == "cosine" ? "%.7f" : "%.2e", sum / n);
      } else if (why.count(key)) {
        std::snprintf(buf, sizeof buf, "n/a");
        const std::string head = short_input(inputs[c]) + ": " + why.at(key);
        auto it = std::find_if(reasons.begin(), reasons.end(),
                               [&](const auto& r) { return r.first == head; });
        if (it == reasons.end())
          reasons.push_back({head, l});
        else
          it->second += ", " + l;
      } else {
        std::snprintf(buf, sizeof buf, "-");
      }
      std::fprintf(f, "  %*s", wc[c], buf);
    }
    std::fprintf(f, "\n");
  }
  if (!reasons.empty()) std::fprintf(f, "n/a (the method refuses the input):\n");
  for (const auto& [head, methods] : reasons)
    std::fprintf(f, "  %s on %s\n", methods.c_str(), head.c_str());
}

namespace {

// Writes the metric columns of `ms` under `prefix`.
void write_metrics(H5Writer& w, const std::string& prefix,
                   const std::vector<const MetricValues*>& ms) {
  const std::uint64_t n = ms.size();
  auto f64 = [&](const char* name, double MetricValues::*field) {
    std::vector<double> v;
    for (const auto* m : ms) v.push_back(m->*field);
    w.write_f64(prefix + name, {n}, v.data());
  };
  auto i64 = [&](const char* name, std::int64_t MetricValues::*field) {
    std::vector<std::int64_t> v;
    for (const auto* m : ms) v.push_back(m->*field);
    w.write_i64(prefix + name, {n}, v.data());
  };
  f64("cosine", &MetricValues::cosine);
  f64("rel_l1", &MetricValues::rel_l1);
  f64("rmse", &MetricValues::rmse);
  f64("rel_fro", &MetricValues::rel_fro);
  f64("max_abs", &MetricValues::max_abs);
  f64("ulp_row_p50", &MetricValues::ulp_row_p50);
  f64("ulp_row_p99", &MetricValues::ulp_row_p99);
  f64("ulp_row_max", &MetricValues::ulp_row_max);
  i64("nonfinite", &MetricValues::nonfinite);
  i64("ulp_p50", &MetricValues::ulp_p50);
  i64("ulp_p99", &MetricValues::ulp_p99);
  i64("ulp_max", &MetricValues::ulp_max);
  std::vector<std::int64_t> hist;
  for (const auto* m : ms) {
    std::vector<std::int64_t> h = m->ulp_hist;
    h.resize(UlpHistogram::kBuckets, 0);
    hist.insert(hist.end(), h.begin(), h.end());
  }
  w.write_i64(prefix + "ulp_hist", {n, std::uint64_t(UlpHistogram::kBuckets)}, hist.data());
  std::string labels;
  for (int k = 0; k < UlpHistogram::kBuckets; ++k)
    labels += (k ? "," : "") + UlpHistogram::bucket_label(k);
  w.attr_string(prefix + "ulp_hist", "buckets", labels);
}

}  // namespace

void ResultTable::write(H5Writer& w, const std::string& prefix) const {
  const std::uint64_t n = rows_.size();
  auto strings = [&](const char* name, std::string PointRow::*field) {
    std::vector<std::string> v;
    for (const auto& r : rows_) v.push_back(r.*field);
    w.write_strings(prefix + name, v);
  };
  auto i64 = [&](const char* name, std::int64_t PointRow::*field) {
    std::vector<std::int64_t> v;
    for (const auto& r : rows_) v.push_back(r.*field);
    w.write_i64(prefix + name, {n}, v.data());
  };
  i64("point", &PointRow::point);
  strings("method", &PointRow::method);
  strings("label", &PointRow::label);
  strings("input", &PointRow::input);
  strings("out_format", &PointRow::out_format);
  strings("resolved", &PointRow::resolved);
  strings("skipped", &PointRow::skipped);
  i64("seed", &PointRow::seed);
  i64("batch", &PointRow::batch);
  i64("heads_q", &PointRow::heads_q);
  i64("heads_kv", &PointRow::heads_kv);
  i64("len_q", &PointRow::len_q);
  i64("len_kv", &PointRow::len_kv);
  i64("head_dim", &PointRow::head_dim);
  i64("causal", &PointRow::causal);
  std::vector<const MetricValues*> ms;
  for (const auto& r : rows_) ms.push_back(&r.m);
  write_metrics(w, prefix, ms);
  // sweep --counters: one int64 column per (stage, event), cnt_<stage>_<event> (the names of
  // StageCounters::column_names()); -1 for a point not counted (skipped by --skip-unsupported).
  bool any_counted = false;
  for (const auto& r : rows_) any_counted = any_counted || !r.counters.empty();
  if (any_counted) {
    const std::vector<std::string> names = StageCounters::column_names();
    for (std::size_t c = 0; c < names.size(); ++c) {
      std::vector<std::int64_t> v;
      for (const auto& r : rows_) v.push_back(r.counters.empty() ? -1 : r.counters[c]);
      w.write_i64(prefix + names[c], {n}, v.data());
    }
  }

  // Per head: `point` joins a head row to its point row.
  const std::string ph = prefix + "per_head/";
  std::vector<std::int64_t> point, batch_index, head;
  std::vector<const MetricValues*> hm;
  for (const auto& r : rows_) {
    for (const auto& h : r.heads) {
      point.push_back(r.point);
      batch_index.push_back(h.batch_index);
      head.push_back(h.head);
      hm.push_back(&h.m);
    }
  }
  const std::uint64_t nh = point.size();
  w.write_i64(ph + "point", {nh}, point.data());
  w.write_i64(ph + "batch_index", {nh}, batch_index.data());
  w.write_i64(ph + "head", {nh}, head.data());
  write_metrics(w, ph, hm);
  w.attr_string(
      prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1), "metrics",
      "cosine, rel_l1 (SageAttention2 A.7), rmse, rel_fro (AMLA 5.1), max_abs against FP64 golden; "
      "ulp_p50/p99/max: encodings of each row's out_format between output and golden (huge near "
      "zero); ulp_row_p50/p99/max: |o - golden| in units of out_format's spacing at the magnitude "
      "of the element's output row (max |golden| over head_dim_v); resolved: the values the "
      "method resolved from auto options; skipped: why a point was not computed "
      "(--skip-unsupported); per_head/ has one row per (point, batch_index, head); with "
      "--counters, cnt_<stage>_<event>: the point's silent-failure counters (-1: not counted)");
}

const std::vector<std::string>& metric_columns() {
  static const std::vector<std::string> k{"cosine",  "rel_l1",      "rmse",        "rel_fro",
                                          "max_abs", "nonfinite",   "ulp_p50",     "ulp_p99",
                                          "ulp_max", "ulp_row_p50", "ulp_row_p99", "ulp_row_max"};
  return k;
}

}  // namespace attnsim
