// `attnsim compare` and `attnsim gate` (see compare.hpp).
#include "experiments/sweep/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

#include "experiments/common/error.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/io/toml_reader.hpp"
#include "numerics/metrics.hpp"

namespace attnsim {

namespace {

std::string shape_text(const std::vector<std::uint64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string type_text(const H5DatasetInfo& i) {
  if (i.kind == 's') return "string";
  if (!i.dtype_attr.empty() && i.kind != 'f') return i.dtype_attr;
  const char* k = i.kind == 'f'   ? "float"
                  : i.kind == 'i' ? "int"
                  : i.kind == 'u' ? "uint"
                                  : "other";
  return k + std::to_string(i.size * 8);
}

// The format a dataset's ULPs are counted in, or false for integers.
bool ulp_format_of(const H5DatasetInfo& i, UlpFormat* f) {
  if (i.kind == 'u' && i.size == 2 && i.dtype_attr == "bfloat16")
    return *f = UlpFormat::kBf16, true;
  if (i.kind != 'f') return false;
  *f = i.size == 2 ? UlpFormat::kFp16 : i.size == 4 ? UlpFormat::kFp32 : UlpFormat::kFp64;
  return true;
}

std::string index_text(std::size_t flat, const std::vector<std::uint64_t>& dims) {
  std::vector<std::uint64_t> c(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    c[d] = flat % dims[d];
    flat /= dims[d];
  }
  return shape_text(c);
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Describes row `i` of a results table by its label/input/seed columns in the same group.
struct RowNames {
  std::vector<std::string> label, input;
  std::vector<std::int64_t> seed;
  std::string describe(std::size_t i) const {
    if (i >= label.size()) return "";
    std::string s = label[i];
    if (i < input.size()) s += " | " + input[i];
    if (i < seed.size()) s += " | seed " + std::to_string(seed[i]);
    return s;
  }
};

RowNames row_names(const H5Reader& r, const std::string& group, std::uint64_t rows) {
  RowNames n;
  try {
    if (r.exists(group + "label") && r.exists(group + "input")) {
      n.label = r.read_strings(group + "label");
      n.input = r.read_strings(group + "input");
      if (r.exists(group + "seed")) n.seed = r.read_i64(group + "seed");
      if (n.label.size() != rows) n = RowNames{};
    }
  } catch (const UsageError&) {
    n = RowNames{};
  }
  return n;
}

}  // namespace

int compare_files(const std::string& path_a, const std::string& path_b, const CompareOptions& opt,
                  std::FILE* out) {
  const H5Reader a(path_a), b(path_b);
  auto excluded = [&](const std::string& name) {
    for (const auto& e : opt.exclude) {
      if (name == e || (!e.empty() && e.back() == '/' && name.rfind(e, 0) == 0)) return true;
    }
    return false;
  };
  std::map<std::string, H5DatasetInfo> da, db;
  for (auto& i : a.datasets()) da[i.name] = i;
  for (auto& i : b.datasets()) db[i.name] = i;
  std::set<std::string> names;
  for (auto& [n, i] : da) names.insert(n);
  for (auto& [n, i] : db) names.insert(n);
  std::fprintf(out, "compare A=%s B=%s (differ when |A-B| > %g + %g*|B|)\n", path_a.c_str(),
               path_b.c_str(), opt.atol, opt.rtol);
  int differing = 0, same = 0;
  for (const auto& name : names) {
    if (excluded(name)) continue;
    const bool in_a = da.count(name), in_b = db.count(name);
    if (!in_a || !in_b) {
      std::fprintf(out, "  %-28s only in %s\n", name.c_str(), in_a ? "A" : "B");
      ++differing;
      continue;
    }
    const H5DatasetInfo& ia = da[name];
    const H5DatasetInfo& ib = db[name];
    if (ia.dims != ib.dims) {
      std::fprintf(out, "  %-28s shape %s vs %s\n", name.c_str(), shape_text(ia.dims).c_str(),
                   shape_text(ib.dims).c_str());
      ++differing;
      continue;
    }
    if ((ia.kind == 's') != (ib.kind == 's')) {
      std::fprintf(out, "  %-28s type %s vs %s\n", name.c_str(), type_text(ia).c_str(),
                   type_text(ib).c_str());
      ++differing;
      continue;
    }
    const std::string group =
        name.find('/') == std::string::npos ? "" : name.substr(0, name.rfind('/') + 1);
    const RowNames rn = ia.dims.size() >= 1 ? row_names(b, group, ia.dims[0]) : RowNames{};
    if (ia.kind == 's') {
      const auto sa = a.read_strings(name), sb = b.read_strings(name);
      std::size_t n = 0;
      for (std::size_t i = 0; i < sa.size(); ++i) n += sa[i] != sb[i];
      if (n == 0) {
        ++same;
        continue;
      }
      ++differing;
      std::fprintf(out, "  %-28s %zu of %zu strings differ\n", name.c_str(), n, sa.size());
      int shown = 0;
      for (std::size_t i = 0; i < sa.size() && shown < opt.max_report; ++i) {
        if (sa[i] == sb[i]) continue;
        std::fprintf(out, "      [%zu] '%s' vs '%s'\n", i, sa[i].c_str(), sb[i].c_str());
        ++shown;
      }
      continue;
    }
    const std::vector<double> va = a.read_numeric(name), vb = b.read_numeric(name);
    UlpFormat fmt = UlpFormat::kFp64;
    const bool has_ulp = ulp_format_of(ia, &fmt) && ulp_format_of(ib, &fmt);
    std::size_t ndiff = 0, changed = 0, worst = 0;
    double max_abs = 0, max_rel = 0;
    std::uint64_t max_ulp = 0;
    std::vector<std::size_t> shown;
    for (std::size_t i = 0; i < va.size(); ++i) {
      if (same_value(va[i], vb[i])) continue;
      ++changed;
      const double d = std::fabs(va[i] - vb[i]);
      const bool beyond =
          !(d <= opt.atol + opt.rtol * std::fabs(vb[i]));  // NaN vs number is beyond
      if (has_ulp) max_ulp = std::max(max_ulp, ulp_distance(va[i], vb[i], fmt));
      if (!(d <= max_abs)) {
        max_abs = d;
        worst = i;
      }
      if (vb[i] != 0) max_rel = std::max(max_rel, d / std::fabs(vb[i]));
      if (beyond) {
        ++ndiff;
        if (int(shown.size()) < opt.max_report) shown.push_back(i);
      }
    }
    if (changed == 0) {
      ++same;
      continue;
    }
    std::string ulp_text;
    if (has_ulp)
      ulp_text = "  max " + (max_ulp == UINT64_MAX ? std::string("nan") : std::to_string(max_ulp)) +
                 " ulp (" + ulp_format_name(fmt) + ")";
    std::fprintf(out,
                 "  %-28s %zu of %zu elements differ%s  max |A-B| %.3e at %s  max rel %.3e%s\n",
                 name.c_str(), ndiff, va.size(), ndiff ? "" : " (all within tolerance)", max_abs,
                 index_text(worst, ia.dims).c_str(), max_rel, ulp_text.c_str());
    if (ndiff) ++differing;
    for (std::size_t i : shown) {
      const std::size_t row =
          ia.dims.empty() ? 0 : i / (va.size() / std::max<std::uint64_t>(ia.dims[0], 1));
      const std::string who = rn.describe(row);
      std::fprintf(out, "      %s %.17g -> %.17g (%+.3e)%s%s\n", index_text(i, ia.dims).c_str(),
                   va[i], vb[i], vb[i] - va[i], who.empty() ? "" : "  ", who.c_str());
    }
  }
  std::fprintf(out, "%d dataset(s) identical, %d differ\n", same, differing);
  return differing;
}

// ---- gate -------------------------------------------------------------------------------------

namespace {

double tolerance(const TomlTable& t, const std::string& metric, const std::string& key) {
  const double v = t.number(key);
  if (!std::isfinite(v) || v < 0)
    t.fail(key, "[" + metric + "] " + key + " must be a finite number >= 0");
  return v;
}

}  // namespace

GateRules read_gate_rules(const std::string& path) {
  const TomlTable root = TomlTable::parse_file(path);
  GateRules r;
  for (const std::string& name : root.keys()) {
    if (!root.is_table(name)) {
      if (name != "key") {
        root.fail(name, "unknown top-level key '" + name +
                            "' (allowed: key, and one [METRIC] table per gated metric)");
      }
      r.key = root.strings("key");
      if (r.key.empty()) root.fail("key", "key is empty");
      continue;
    }
    const TomlTable t = root.table(name);
    const std::string where = "[" + name + "]";
    t.check_keys({"abs", "rel", "ulp", "better"}, where);
    GateRule g{name};
    for (const std::string& key : t.keys()) {
      if (key == "better") {
        g.better = t.string(key);
        if (g.better != "lower" && g.better != "higher" && g.better != "none")
          t.fail(key, where + " better must be \"lower\", \"higher\" or \"none\"");
      } else {
        (key == "abs" ? g.abs : key == "rel" ? g.rel : g.ulp) = tolerance(t, name, key);
        // A count of FP64 units in the last place, printed and compared as an integer.
        if (key == "ulp" && (g.ulp != std::floor(g.ulp) || g.ulp > 0x1p62))
          t.fail(key, where + " ulp must be a whole number of units, at most 2^62");
      }
    }
    r.rules.push_back(g);
  }
  if (r.rules.empty())
    throw UsageError("rules '" + path + "' gate no metric (add a [METRIC] section)");
  return r;
}

namespace {

struct Table {
  std::vector<std::string> keys;  // one per row
  std::map<std::string, std::size_t> row_of;
  std::size_t rows = 0;
};

Table key_table(const H5Reader& r, const std::vector<std::string>& key) {
  Table t;
  std::vector<std::vector<std::string>> cols;
  for (const auto& k : key) {
    if (!r.exists(k))
      throw UsageError("'" + r.path() + "' has no key column '" + k +
                       "' (is it a sweep results file?)");
    const H5DatasetInfo info = r.dataset_info(k);
    if (info.dims.size() != 1)
      throw UsageError("key column '" + k + "' in '" + r.path() + "' is not 1-D");
    std::vector<std::string> c;
    if (info.kind == 's') {
      c = r.read_strings(k);
    } else {
      for (double v : r.read_numeric(k)) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        c.push_back(buf);
      }
    }
    if (!cols.empty() && c.size() != cols[0].size())
      throw UsageError("key columns of '" + r.path() + "' differ in length");
    cols.push_back(std::move(c));
  }
  t.rows = cols.empty() ? 0 : cols[0].size();
  for (std::size_t i = 0; i < t.rows; ++i) {
    std::string s;
    for (std::size_t k = 0; k < cols.size(); ++k) s += (k ? " | " : "") + cols[k][i];
    if (!t.row_of.emplace(s, i).second) {
      throw UsageError("'" + r.path() + "' has two rows with key '" + s +
                       "'; add columns to the rules' key");
    }
    t.keys.push_back(s);
  }
  return t;
}

std::vector<double> metric_column(const H5Reader& r, const std::string& name, std::size_t rows) {
  if (!r.exists(name)) throw UsageError("'" + r.path() + "' has no metric column '" + name + "'");
  const H5DatasetInfo info = r.dataset_info(name);
  if (info.kind == 's' || info.dims.size() != 1 || info.dims[0] != rows) {
    throw UsageError("metric column '" + name + "' in '" + r.path() +
                     "' is not a numeric column of " + std::to_string(rows) + " rows");
  }
  return r.read_numeric(name);
}

std::string rule_text(const GateRule& g) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "abs %g + rel %g%s, better %s", g.abs, g.rel,
                g.ulp >= 0 ? (" or " + std::to_string(std::int64_t(g.ulp)) + " ulp").c_str() : "",
                g.better.c_str());
  return buf;
}

}  // namespace

GateResult run_gate(const std::string& baseline, const std::string& results, const GateRules& rules,
                    std::FILE* out) {
  const H5Reader rb(baseline), rn(results);
  const Table tb = key_table(rb, rules.key), tn = key_table(rn, rules.key);
  // Every rule's column of both files before the report starts: a rule for a metric either file
  // lacks (a typo such as [cosin]) is one error line, not a half-printed table.
  std::vector<std::vector<double>> base_cols, new_cols;
  for (const auto& g : rules.rules) {
    base_cols.push_back(metric_column(rb, g.metric, tb.rows));
    new_cols.push_back(metric_column(rn, g.metric, tn.rows));
  }
  GateResult res;
  res.rows = int(tb.rows);
  std::fprintf(out, "gate: baseline %s (%zu rows), results %s (%zu rows)\n", baseline.c_str(),
               tb.rows, results.c_str(), tn.rows);
  std::vector<std::string> lines;
  for (const auto& k : tb.keys) {
    if (!tn.row_of.count(k)) {
      ++res.regressions;
      lines.push_back("  MISSING     row " + k + " is in the baseline but not in the results");
    }
  }
  int extra = 0;
  for (const auto& k : tn.keys) extra += !tb.row_of.count(k);
  std::fprintf(out, "  %-10s %-44s %6s %6s %8s %11s\n", "metric", "rule", "rows", "moved",
               "improved", "REGRESSED");
  for (std::size_t r = 0; r < rules.rules.size(); ++r) {
    const GateRule& g = rules.rules[r];
    const std::vector<double>&vb = base_cols[r], &vn = new_cols[r];
    int moved = 0, improved = 0, regressed = 0, compared = 0;
    for (std::size_t i = 0; i < tb.rows; ++i) {
      auto it = tn.row_of.find(tb.keys[i]);
      if (it == tn.row_of.end()) continue;
      ++compared;
      const double b = vb[i], n = vn[it->second];
      if (same_value(b, n)) continue;
      ++moved;
      const double d = n - b;
      bool within = std::fabs(d) <= g.abs + g.rel * std::fabs(b);
      if (!within && g.ulp >= 0 && std::isfinite(b) && std::isfinite(n)) {
        within = double(ulp_distance(n, b, UlpFormat::kFp64)) <= g.ulp;
      }
      if (within) {
        ++res.moved_within;
        continue;
      }
      const bool good =
          std::isfinite(d) && ((g.better == "lower" && d < 0) || (g.better == "higher" && d > 0));
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "  %-11s %-8s %.9g -> %.9g (%+.3e, %+.2f%%; allowed ±%.3e)  %s",
                    good ? "improved" : "REGRESSION", g.metric.c_str(), b, n, d,
                    b != 0 ? 100.0 * d / std::fabs(b) : 0.0, g.abs + g.rel * std::fabs(b),
                    tb.keys[i].c_str());
      lines.push_back(buf);
      if (good) {
        ++improved;
      } else {
        ++regressed;
      }
    }
    res.improvements += improved;
    res.regressions += regressed;
    std::fprintf(out, "  %-10s %-44s %6d %6d %8d %11d\n", g.metric.c_str(), rule_text(g).c_str(),
                 compared, moved, improved, regressed);
  }
  for (const auto& l : lines) std::fprintf(out, "%s\n", l.c_str());
  if (extra)
    std::fprintf(out, "  note: %d row(s) in the results are not in the baseline (not gated)\n",
                 extra);
  std::fprintf(
      out, "gate: %s: %d regression(s), %d improvement(s), %d change(s) within tolerance\n",
      res.regressions ? "FAIL" : "PASS", res.regressions, res.improvements, res.moved_within);
  return res;
}

}  // namespace attnsim
