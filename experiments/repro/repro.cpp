// The paper-reproduction framework (see repro.hpp).
#include "experiments/repro/repro.hpp"

#include <cinttypes>

#include "experiments/common/error.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"

namespace attnsim {

const std::vector<Reproduction>& repro_registry() {
  static const std::vector<Reproduction> registry = [] {
    std::vector<Reproduction> r;
    register_flash_repros(r);
    register_sage_repros(r);
    register_amla_repros(r);
    register_lean_repros(r);
    register_turbo_repros(r);
    register_failure_repros(r);
    register_invariance_repros(r);
    return r;
  }();
  return registry;
}

void ReproTable::add_row(std::vector<Cell> row) {
  if (row.size() != columns.size())
    throw UsageError("internal error: repro row has the wrong number of cells");
  rows.push_back(std::move(row));
}

namespace {

std::string cell_text(const ReproTable::Cell& c, char type, bool full) {
  if (type == 's') return c.s;
  char buf[48];
  if (type == 'i') {
    std::snprintf(buf, sizeof buf, "%lld", (long long)c.v);
  } else if (full) {
    std::snprintf(buf, sizeof buf, "%.17g", c.v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", c.v);
  }
  return buf;
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void ReproTable::print(std::FILE* f) const {
  if (!title.empty()) std::fprintf(f, "%s\n", title.c_str());
  std::vector<std::size_t> width;
  for (const auto& c : columns) width.push_back(c.name.size());
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i)
      width[i] = std::max(width[i], cell_text(r[i], columns[i].type, false).size());
  }
  auto line = [&](auto text_of) {
    std::string s;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      std::string t = text_of(i);
      const std::string pad(width[i] - t.size(), ' ');
      s += (i ? "  " : "") + (columns[i].type == 's' ? t + pad : pad + t);
    }
    std::fprintf(f, "%s\n", s.c_str());
  };
  line([&](std::size_t i) { return columns[i].name; });
  for (const auto& r : rows)
    line([&](std::size_t i) { return cell_text(r[i], columns[i].type, false); });
  if (!notes.empty()) std::fprintf(f, "%s\n", notes.c_str());
}

void ReproTable::write(const std::string& path, const std::string& repro_name,
                       const ReproOptions& opt) const {
  write_impl(path, {{"repro", repro_name}}, &opt);
}

void ReproTable::write_table(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& root_attrs) const {
  write_impl(path, root_attrs, nullptr);
}

void ReproTable::write_impl(const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& root_attrs,
                            const ReproOptions* opt) const {
  if (ends_with(path, ".csv")) {
    std::string text;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (i) text += ',';
      text += csv_quote(columns[i].name);
    }
    text += "\n";
    for (const auto& r : rows) {
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (i) text += ',';
        text += csv_quote(cell_text(r[i], columns[i].type, true));
      }
      text += "\n";
    }
    write_file_atomic(path, text.data(), text.size());
    return;
  }
  if (!ends_with(path, ".h5") && !ends_with(path, ".hdf5")) {
    throw UsageError("--out '" + path + "': expected a .csv, .h5 or .hdf5 file name");
  }
  H5Writer w(path);
  const std::uint64_t n = rows.size();
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const auto& col = columns[c];
    if (col.type == 's') {
      std::vector<std::string> v;
      for (const auto& r : rows) v.push_back(r[c].s);
      w.write_strings(col.name, v);
    } else if (col.type == 'i') {
      std::vector<std::int64_t> v;
      for (const auto& r : rows) v.push_back(std::int64_t(r[c].v));
      w.write_i64(col.name, {n}, v.data());
    } else {
      std::vector<double> v;
      for (const auto& r : rows) v.push_back(r[c].v);
      w.write_f64(col.name, {n}, v.data());
    }
    if (!col.help.empty()) w.attr_string(col.name, "help", col.help);
  }
  for (const auto& [k, v] : root_attrs) w.attr_string("/", k, v);
  w.attr_string("/", "title", title);
  if (!notes.empty()) w.attr_string("/", "notes", notes);
  if (opt) {
    w.attr_i64("/", "quick", opt->quick ? 1 : 0);
    w.attr_i64("/", "samples", opt->samples);
  }
  write_provenance(w);
  w.commit();
}

AttentionInput first_tokens(const AttentionInput& in, int n) {
  const AttentionShape& s = in.shape;
  if (n <= 0 || (n >= s.len_q && n >= s.len_kv)) return in;
  AttentionInput o = in;
  o.shape.len_q = std::min(n, s.len_q);
  o.shape.len_kv = std::min(n, s.len_kv);
  auto cut = [](const std::vector<float>& x, int heads, int len, int keep, int d) {
    std::vector<float> y;
    y.reserve(std::size_t(heads) * keep * d);
    for (int h = 0; h < heads; ++h) {
      const float* src = x.data() + std::size_t(h) * len * d;
      y.insert(y.end(), src, src + std::size_t(keep) * d);
    }
    return y;
  };
  o.q = cut(in.q, s.batch * s.heads_q, s.len_q, o.shape.len_q, s.head_dim);
  o.k = cut(in.k, s.batch * s.heads_kv, s.len_kv, o.shape.len_kv, s.head_dim);
  o.v = cut(in.v, s.batch * s.heads_kv, s.len_kv, o.shape.len_kv, s.head_dim_v);
  return o;
}

}  // namespace attnsim
