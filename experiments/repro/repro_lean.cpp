// Reproductions of LeanAttention (Sanovar et al., arXiv 2405.10480) on the timing model of
// sim/lean/timing_model.hpp, calibrated and checked on our H100 kernels' timings
// (data/hw/h100/lean/lean_timings.csv; another file with ATTNSIM_LEAN_TIMINGS=path):
//  lean         per configuration: measured and predicted lean / FlashDecoding times and the
//               speedup fd / lean, calibration (uniform, even config id) or held out; the r and
//               error summary and the ragged speedup by batch context ratio (Fig. 11 shape)
//  lean-ragged  the paper's Appendix A / Fig. 11 by the model: ragged batches of 2..64 entries,
//               avg/max context 0.1..1, max context 8K..512K: makespan, SM-slot idle time,
//               per-CTA work of LeanAttention and FlashDecoding, the predicted speedup
//  lean-cta     per-CTA work, start, end and idle of both kernels on one measured ragged batch
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "numerics/ragged.hpp"
#include "experiments/common/error.hpp"
#include "experiments/repro/repro.hpp"
#include "sim/lean/schedule.hpp"
#include "sim/lean/timing_model.hpp"

namespace attnsim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One configuration of lean_timings.csv with its three kernels' medians.
struct Config {
  int id = 0;
  std::string kind;  // uniform / ragged
  int batch = 0, hq = 0, hk = 0, d = 0, lk_max = 0;
  std::vector<int> lk;  // per batch entry (uniform: one value, repeated)
  std::string spec;     // ragged_spec
  double kv_bytes = 0;
  struct Kernel {
    double us = kNaN;
    int grid = 0, splits = 0;
    long long tiles = 0;
  } lean, fd, fd1;
  double ratio() const {
    const double sum = std::accumulate(lk.begin(), lk.end(), 0.0);
    return sum / (double(batch) * lk_max);
  }
};

std::string timings_path() {
  if (const char* e = std::getenv("ATTNSIM_LEAN_TIMINGS"); e && *e) return e;
  const std::string rel = "data/hw/h100/lean/lean_timings.csv";
  if (std::filesystem::exists(rel)) return rel;
  return std::string(ATTNSIM_DATA_DIR) + "/hw/h100/lean/lean_timings.csv";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cell;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cell);
      cell.clear();
    } else if (c != '\r') {
      cell += c;
    }
  }
  out.push_back(cell);
  return out;
}

// Reads the timing table (columns by name; the README's "Timing" section), one Config per id.
std::vector<Config> read_timings(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("repro lean: cannot read the timings '" + path + "'");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> head = split(line, ',');
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < head.size(); ++i) col[head[i]] = i;
  for (const char* need : {"config", "kind", "kernel", "batch", "hq", "hk", "d", "lk_max", "lk",
                           "ragged_spec", "kv_bytes", "grid", "tiles", "num_splits", "time_us"})
    if (!col.count(need))
      throw UsageError("repro lean: '" + path + "' has no column '" + need + "'");
  std::map<int, Config> by_id;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::vector<std::string> c = split(line, ',');
    auto at = [&](const char* name) -> const std::string& {
      const std::size_t i = col.at(name);
      if (i >= c.size())
        throw UsageError("repro lean: '" + path + "' line " + std::to_string(lineno) +
                         " has too few cells");
      return c[i];
    };
    try {
      const int id = std::stoi(at("config"));
      Config& g = by_id[id];
      g.id = id;
      g.kind = at("kind");
      g.batch = std::stoi(at("batch"));
      g.hq = std::stoi(at("hq"));
      g.hk = std::stoi(at("hk"));
      g.d = std::stoi(at("d"));
      g.lk_max = std::stoi(at("lk_max"));
      g.spec = at("ragged_spec");
      g.kv_bytes = std::stod(at("kv_bytes"));
      g.lk.clear();
      for (const std::string& x : split(at("lk"), ';')) g.lk.push_back(std::stoi(x));
      if (g.lk.size() == 1) g.lk.assign(std::size_t(g.batch), g.lk[0]);
      if (int(g.lk.size()) != g.batch) throw std::invalid_argument("lk");
      Config::Kernel k;
      k.us = std::stod(at("time_us"));
      k.grid = std::stoi(at("grid"));
      k.splits = std::stoi(at("num_splits"));
      k.tiles = std::stoll(at("tiles"));
      const std::string& kernel = at("kernel");
      if (kernel == "lean") {
        g.lean = k;
      } else if (kernel == "fd") {
        g.fd = k;
      } else if (kernel == "fd1") {
        g.fd1 = k;
      }
    } catch (const std::logic_error&) {
      throw UsageError("repro lean: '" + path + "' line " + std::to_string(lineno) +
                       ": a number or the lk list does not parse");
    }
  }
  std::vector<Config> out;
  for (auto& [id, g] : by_id) {
    if (std::isnan(g.lean.us) || std::isnan(g.fd.us) || std::isnan(g.fd1.us))
      throw UsageError("repro lean: configuration " + std::to_string(id) + " of '" + path +
                       "' lacks a lean, fd or fd1 row");
    out.push_back(g);
  }
  if (out.empty()) throw UsageError("repro lean: '" + path + "' has no configurations");
  return out;
}

// The partition of our kernels (cuda_check/lean): ceil(g / 64) m-blocks of the folded group,
// every batch entry its own tile count (README "Deviations").
LeanShape shape_of(int batch, int hq, int hk, int d, int lk_max, const std::vector<int>& lk) {
  LeanShape s;
  s.batch = batch;
  s.heads_q = hq;
  s.heads_kv = hk;
  s.len_q = 1;
  s.len_kv = lk_max;
  s.head_dim = d;
  s.m_blocks = LeanMBlocks::kAll;
  bool uniform = true;
  for (int x : lk) uniform = uniform && x == lk_max;
  if (!uniform) s.len_kv_per_batch = lk;
  return s;
}

// The three plans of one configuration, built once (the samples point into them).
struct Plans {
  LeanPlan lean, fd, fd1;
  int fd_heuristic = 0;  // FA2's split count for the shape (splitkv_plan(s, 0))
};

// Calibration: the uniform configurations of even id (92 of 331); the rest is held out (the
// uniform ones of odd id and every ragged batch: the fit never sees a ragged batch).
bool in_calibration_set(const Config& g) { return g.kind == "uniform" && g.id % 2 == 0; }

// The first guess of the fit, from the kernel's physics rather than the data: a 64 KiB tile per
// ~2.4 µs for one CTA (one cp.async round trip per K and V tile), 3 TB/s (the H100's copy
// bandwidth), a few µs per launch and epilogue, an L2 round trip per merged split.
TimingParams first_guess() {
  TimingParams p;
  p.tile_us = 2.4;
  p.hbm_gbs = 3000;
  p.launch_us = 3;
  p.segment_us = 3;
  p.flag_us = 3;
  p.merge_us = 0.3;
  return p;
}

struct Study {
  std::string path;
  std::vector<Config> configs;
  std::vector<Plans> plans;
  std::vector<std::string> mismatches;  // plan vs recorded grid / tiles / splits
  TimingFit fit;
  int calibration_samples = 0;
};

// Reads the timings, builds every plan, checks them against the recording and fits the model
// (about 10 s on two cores; the same with --quick).
Study run_study() {
  Study st;
  st.path = timings_path();
  st.configs = read_timings(st.path);
  st.plans.resize(st.configs.size());
  std::vector<TimingSample> cal;
  for (std::size_t i = 0; i < st.configs.size(); ++i) {
    const Config& g = st.configs[i];
    Plans& p = st.plans[i];
    const LeanShape s = shape_of(g.batch, g.hq, g.hk, g.d, g.lk_max, g.lk);
    p.lean = lean_plan(s);
    p.fd = splitkv_plan(s, g.fd.splits);
    p.fd1 = splitkv_plan(s, 1);
    p.fd_heuristic = splitkv_plan(s, 0).num_splits;
    const int blocks = g.batch * p.fd.heads * p.fd.num_m_blocks;
    auto check = [&](bool ok, const std::string& what) {
      if (!ok) st.mismatches.push_back("config " + std::to_string(g.id) + ": " + what);
    };
    check(p.lean.grid == g.lean.grid, "lean grid " + std::to_string(p.lean.grid) + " vs " +
                                          std::to_string(g.lean.grid) + " recorded");
    check(p.lean.total_tiles == g.lean.tiles, "lean tiles " + std::to_string(p.lean.total_tiles) +
                                                  " (" + std::to_string(p.lean.num_m_blocks) +
                                                  " m-blocks) vs " + std::to_string(g.lean.tiles) +
                                                  " recorded");
    check(p.fd.total_tiles == g.fd.tiles, "fd tiles " + std::to_string(p.fd.total_tiles) + " vs " +
                                              std::to_string(g.fd.tiles) + " recorded");
    check(g.fd.splits * blocks == g.fd.grid, "fd grid " + std::to_string(g.fd.splits * blocks) +
                                                 " vs " + std::to_string(g.fd.grid) + " recorded");
    check(p.fd_heuristic == g.fd.splits, "FA2 heuristic " + std::to_string(p.fd_heuristic) +
                                             " splits vs " + std::to_string(g.fd.splits) +
                                             " recorded");
    if (in_calibration_set(g)) {
      cal.push_back({&p.lean, true, g.d, g.lean.us});
      cal.push_back({&p.fd, false, g.d, g.fd.us});
      cal.push_back({&p.fd1, false, g.d, g.fd1.us});
    }
  }
  if (cal.empty())
    throw UsageError("repro lean: no calibration configurations in '" + st.path + "'");
  st.calibration_samples = int(cal.size());
  st.fit = fit_timing_params(cal, first_guess(), {}, 3000);
  return st;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class... A>
std::string fmt(const char* f, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

std::string params_text(const TimingFit& fit) {
  const TimingParams& p = fit.params;
  std::string s;
  s += fmt(
      "  tile_us    = %.4g  µs per 64 KiB K+V tile for one CTA streaming alone (%.0f GB/s a CTA)\n",
      p.tile_us, 65536e-3 / p.tile_us);
  s += fmt("  hbm_gbs    = %.4g  GB/s shared by the streaming CTAs\n", p.hbm_gbs);
  s += fmt("  launch_us  = %.4g  µs per kernel launch (event to event)\n", p.launch_us);
  s += fmt("  segment_us = %.4g  µs per segment (Q load, normalize, write, flag)\n", p.segment_us);
  s += fmt("  flag_us    = %.4g  µs per lean host before its merge (fence, flag poll, lse loads)\n",
           p.flag_us);
  s += fmt("  merge_us   = %.4g  µs per split merged (lean host; FD combine kernel)\n", p.merge_us);
  return s;
}

struct ErrStat {
  double mean = 0, max = 0;
  int n = 0;
  void add(double rel) {
    mean += std::fabs(rel);
    max = std::max(max, std::fabs(rel));
    ++n;
  }
  std::string text() const {
    return n ? fmt("mean %.1f%% max %.1f%%", 100 * mean / n, 100 * max) : std::string("-");
  }
};

// Per configuration of the study: the three kernels as the model runs them.
struct Predicted {
  KernelTime lean, fd, fd1;
};
std::vector<Predicted> predict_all(const Study& st) {
  std::vector<Predicted> out(st.configs.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (long i = 0; i < long(st.configs.size()); ++i) {
    const Config& g = st.configs[std::size_t(i)];
    const Plans& p = st.plans[std::size_t(i)];
    Predicted& r = out[std::size_t(i)];
    r.lean = predict_lean_time(p.lean, g.d, st.fit.params);
    r.fd = predict_splitkv_time(p.fd, g.d, st.fit.params);
    r.fd1 = predict_splitkv_time(p.fd1, g.d, st.fit.params);
  }
  return out;
}

double idle_fraction(const KernelTime& k, const TimingDevice& dev = {}) {
  const double cap = double(dev.sms * dev.ctas_per_sm) * k.makespan_us;
  return cap > 0 ? k.idle_us / cap : 0.0;
}

long long max_cta_tiles(const KernelTime& k) {
  long long m = 0;
  for (const CtaTime& c : k.ctas) m = std::max(m, c.tiles);
  return m;
}

// The ragged speedups by batch context ratio and batch size on the measured ragged batches
// (Fig. 11 shape), medians over heads and max contexts, measured / predicted.
std::string fig11_measured_text(const Study& st, const std::vector<Predicted>& pr) {
  std::map<std::pair<int, int>, std::vector<double>> meas, pred;  // (ratio·100, batch)
  std::vector<int> batches;
  std::vector<int> ratios;
  for (std::size_t i = 0; i < st.configs.size(); ++i) {
    const Config& g = st.configs[i];
    if (g.kind != "ragged") continue;
    const int r = int(std::lround(100 * g.ratio()));
    meas[{r, g.batch}].push_back(g.fd.us / g.lean.us);
    pred[{r, g.batch}].push_back(pr[i].fd.total_us / pr[i].lean.total_us);
    if (std::find(batches.begin(), batches.end(), g.batch) == batches.end())
      batches.push_back(g.batch);
    if (std::find(ratios.begin(), ratios.end(), r) == ratios.end()) ratios.push_back(r);
  }
  std::sort(batches.begin(), batches.end());
  std::sort(ratios.begin(), ratios.end());
  std::string s =
      "Ragged batches (Fig. 11 shape): speedup fd / lean, measured / predicted, median over the "
      "heads (32/32, 32/8, 64/8) and max contexts (8K, 32K, 128K) measured:\n  avg/max ";
  for (int b : batches) s += fmt("        B=%-3d", b);
  s += "\n";
  for (int r : ratios) {
    s += fmt("  %5.2f  ", r / 100.0);
    for (int b : batches) {
      auto it = meas.find({r, b});
      s += it == meas.end() ? std::string("            -")
                            : fmt("  %5.2f / %-4.2f", median(it->second), median(pred[{r, b}]));
    }
    s += "\n";
  }
  return s;
}

ReproTable lean_table(const ReproOptions&) {
  const Study st = run_study();
  const std::vector<Predicted> pr = predict_all(st);
  ReproTable t;
  t.title =
      "lean: LeanAttention (stream-K) vs FlashDecoding (FA2 split-KV + combine) decode on "
      "the H100, measured (" +
      st.path +
      ") and predicted by the load-balance timing model "
      "(sim/lean/timing_model.hpp), fit on the calibration configurations";
  t.columns = {
      {"config", 'i', "configuration id of lean_timings.csv"},
      {"kind", 's', "uniform or ragged"},
      {"batch", 'i', "batch entries"},
      {"hq", 'i', "query heads"},
      {"hk", 'i', "KV heads"},
      {"lk_max", 'i', "longest context (keys)"},
      {"ratio", 'f', "batch context ratio: mean context / lk_max (1 for uniform)"},
      {"measured_lean_us", 'f', "lean kernel, median of 25 launches (µs)"},
      {"measured_fd_us", 'f', "FlashDecoding split kernel + combine, FA2's split count (µs)"},
      {"predicted_lean_us", 'f', "timing model (µs)"},
      {"predicted_fd_us", 'f', "timing model (µs)"},
      {"measured_speedup", 'f', "measured fd / lean"},
      {"predicted_speedup", 'f', "predicted fd / lean"},
      {"split", 's', "calib (the fit saw it: uniform, even id) or heldout"},
      {"fd_splits", 'i', "FlashDecoding splits (FA2's num_splits_heuristic)"},
      {"lean_grid", 'i', "lean CTAs"},
      {"fd_grid", 'i', "FlashDecoding split-kernel CTAs"},
      {"tiles", 'i', "K+V n-tiles (128 keys × 128 dims × 2 tensors, fp16)"},
      {"kv_gb", 'f', "K and V bytes read, GB"},
      {"measured_fd1_us", 'f', "FlashDecoding with one split (µs)"},
      {"predicted_fd1_us", 'f', "timing model (µs)"},
      {"lean_err", 'f', "predicted / measured − 1, lean"},
      {"fd_err", 'f', "predicted / measured − 1, fd"},
      {"fd1_err", 'f', "predicted / measured − 1, fd1"},
      {"lean_idle_frac", 'f', "model: SM-slot time without a CTA / (2·SMs × makespan), lean"},
      {"fd_idle_frac", 'f', "the same for the FlashDecoding split kernel"},
      {"lean_max_cta_tiles", 'i', "model: the most tiles one lean CTA streams"},
      {"fd_max_cta_tiles", 'i', "the most tiles one FlashDecoding CTA streams"}};
  std::vector<double> ms, ps, ms_u, ps_u, ms_r, ps_r, ms_c, ps_c;
  ErrStat e_lean, e_fd, e_fd1, c_lean, c_fd, c_fd1;
  int held = 0, held_u = 0, held_r = 0;
  for (std::size_t i = 0; i < st.configs.size(); ++i) {
    const Config& g = st.configs[i];
    const Predicted& p = pr[i];
    const bool calib = in_calibration_set(g);
    const double m_s = g.fd.us / g.lean.us, p_s = p.fd.total_us / p.lean.total_us;
    const double el = p.lean.total_us / g.lean.us - 1, ef = p.fd.total_us / g.fd.us - 1,
                 e1 = p.fd1.total_us / g.fd1.us - 1;
    if (calib) {
      ms_c.push_back(m_s);
      ps_c.push_back(p_s);
      c_lean.add(el);
      c_fd.add(ef);
      c_fd1.add(e1);
    } else {
      ++held;
      ms.push_back(m_s);
      ps.push_back(p_s);
      (g.kind == "uniform" ? ms_u : ms_r).push_back(m_s);
      (g.kind == "uniform" ? ps_u : ps_r).push_back(p_s);
      (g.kind == "uniform" ? held_u : held_r)++;
      e_lean.add(el);
      e_fd.add(ef);
      e_fd1.add(e1);
    }
    t.add_row({{"", double(g.id)},
               {g.kind},
               {"", double(g.batch)},
               {"", double(g.hq)},
               {"", double(g.hk)},
               {"", double(g.lk_max)},
               {"", g.ratio()},
               {"", g.lean.us},
               {"", g.fd.us},
               {"", p.lean.total_us},
               {"", p.fd.total_us},
               {"", m_s},
               {"", p_s},
               {calib ? "calib" : "heldout"},
               {"", double(g.fd.splits)},
               {"", double(g.lean.grid)},
               {"", double(g.fd.grid)},
               {"", double(g.lean.tiles)},
               {"", g.kv_bytes / 1e9},
               {"", g.fd1.us},
               {"", p.fd1.total_us},
               {"", el},
               {"", ef},
               {"", e1},
               {"", idle_fraction(p.lean)},
               {"", idle_fraction(p.fd)},
               {"", double(max_cta_tiles(p.lean))},
               {"", double(max_cta_tiles(p.fd))}});
  }
  std::string n;
  n += "Timing model (sim/lean/timing_model.hpp): CTAs on 2 x 132 SM slots in blockIdx order; a "
       "CTA streams its tiles at min(1/tile_us, BW/(64 KiB x N streaming)); segment, flag and "
       "merge costs; FD adds a combine launch.\n";
  n +=
      fmt("Fit: least squares on log time over %d calibration samples (uniform configurations "
          "of even id x lean, fd, fd1): rms log error %.4f, %d evaluations, from a first guess "
          "(tile 2.4 µs, 3 TB/s, 3/3/3/0.3 µs).\n",
          st.calibration_samples, st.fit.rms_log, st.fit.evaluations);
  n += params_text(st.fit);
  n +=
      st.mismatches.empty()
          ? fmt("Plans (sim/lean/schedule.hpp, m_blocks=all) agree with the recorded lean grid and "
                "tiles, the FD grid and FA2's split count on all %zu configurations.\n",
                st.configs.size())
          : fmt("Plans disagree with the recording on %zu items:\n", st.mismatches.size());
  for (const std::string& m : st.mismatches) n += "  " + m + "\n";
  n += fmt("Held out (%d configurations: %d uniform of odd id, %d ragged): ", held, held_u, held_r);
  const double r_all = pearson(ms, ps);
  n += fmt("speedup fd/lean predicted vs measured: held-out r = %.4f (goal r >= 0.9: %s)\n", r_all,
           r_all >= 0.9 ? "met" : "missed");
  auto lo_hi = [](const std::vector<double>& v) {
    return fmt("%.2f..%.2f", *std::min_element(v.begin(), v.end()),
               *std::max_element(v.begin(), v.end()));
  };
  n += fmt("  by kind: uniform r = %.3f (measured speedups %s), ragged r = %.3f (%s)\n",
           pearson(ms_u, ps_u), lo_hi(ms_u).c_str(), pearson(ms_r, ps_r), lo_hi(ms_r).c_str());
  n += "  relative error of predicted times: lean " + e_lean.text() + ", fd " + e_fd.text() +
       ", fd1 " + e_fd1.text() + "\n";
  n += fmt("Calibration (%zu configurations): r = %.3f; lean ", ms_c.size(), pearson(ms_c, ps_c)) +
       c_lean.text() + ", fd " + c_fd.text() + ", fd1 " + c_fd1.text() + "\n";
  n += fig11_measured_text(st, pr);
  n += "The model's Fig. 11 sweep (2..64 entries, ratio 0.1..1, max context to 512K): attnsim "
       "repro lean-ragged; per-CTA work of one ragged batch: attnsim repro lean-cta.";
  t.notes = n;
  return t;
}

// ---------------------------------------------------------------------------------------------
// The ragged sweep.

// ragged_lengths: numerics/ragged.hpp (the generator cuda_check/lean/lean_decode.cu times with).

// One seed per (shape, ratio, draw), so --quick's points are the full run's.
std::uint64_t draw_seed(int batch, int hk, int lk_max, double ratio, int draw) {
  std::uint64_t s = 0x1EA4;
  for (long long x : {(long long)batch, (long long)hk, (long long)lk_max,
                      (long long)std::llround(100 * ratio), (long long)draw})
    s = s * 1000003ull + std::uint64_t(x);
  return s;
}

ReproTable lean_ragged(const ReproOptions& opt) {
  const Study st = run_study();
  const TimingParams& prm = st.fit.params;
  // The measured ragged configurations by (batch, hq, hk, max, ratio·100).
  std::map<std::vector<int>, std::size_t> measured;
  for (std::size_t i = 0; i < st.configs.size(); ++i) {
    const Config& g = st.configs[i];
    if (g.kind == "ragged")
      measured[{g.batch, g.hq, g.hk, g.lk_max, int(std::lround(100 * g.ratio()))}] = i;
  }
  const std::vector<int> batches =
      opt.quick ? std::vector<int>{4, 16, 64} : std::vector<int>{2, 4, 8, 16, 32, 64};
  const std::vector<int> maxes =
      opt.quick ? std::vector<int>{32768, 524288} : std::vector<int>{8192, 32768, 131072, 524288};
  const std::vector<double> ratios =
      opt.quick ? std::vector<double>{0.1, 0.25, 0.5, 0.75, 1.0}
                : std::vector<double>{0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0};
  const std::pair<int, int> heads[] = {{32, 8}, {32, 32}};
  struct Point {
    int batch, hq, hk, lk_max;
    double ratio;
  };
  std::vector<Point> points;
  for (auto [hq, hk] : heads)
    for (int m : maxes)
      for (int b : batches)
        for (double r : ratios) {
          // K+V of the batch within the H100's 80 GB.
          if (r * m * b * 2.0 * hk * 128 * 2 > 80e9) continue;
          if (ragged_lengths(b, m, r, 1).empty() && r < 1.0) continue;
          points.push_back({b, hq, hk, m, r});
        }
  struct Out {
    double lean_us = 0, fd_us = 0, s_mean = 0, s_min = 0, s_max = 0, lean_mk = 0, fd_mk = 0,
           lean_idle = 0, fd_idle = 0, lean_max_tiles = 0, fd_max_tiles = 0, mean_tiles_lean = 0,
           mean_tiles_fd = 0, kv_gb = 0;
    int fd_splits = 0, lean_grid = 0, fd_grid = 0;
    double meas_s = kNaN, meas_pred_s = kNaN, meas_lean = kNaN, meas_fd = kNaN;
  };
  std::vector<Out> out(points.size());
  const int seeds = std::max(1, opt.samples);
#pragma omp parallel for schedule(dynamic, 1)
  for (long pi = 0; pi < long(points.size()); ++pi) {
    const Point& pt = points[std::size_t(pi)];
    Out& o = out[std::size_t(pi)];
    o.s_min = std::numeric_limits<double>::infinity();
    o.s_max = 0;
    for (int sd = 0; sd < seeds; ++sd) {
      std::vector<int> lk =
          pt.ratio >= 1.0 ? std::vector<int>(std::size_t(pt.batch), pt.lk_max)
                          : ragged_lengths(pt.batch, pt.lk_max, pt.ratio,
                                           draw_seed(pt.batch, pt.hk, pt.lk_max, pt.ratio, sd));
      const LeanShape s = shape_of(pt.batch, pt.hq, pt.hk, 128, pt.lk_max, lk);
      const LeanPlan lp = lean_plan(s), fp = splitkv_plan(s, 0);
      const KernelTime kl = predict_lean_time(lp, 128, prm),
                       kf = predict_splitkv_time(fp, 128, prm);
      const double sp = kf.total_us / kl.total_us;
      o.lean_us += kl.total_us / seeds;
      o.fd_us += kf.total_us / seeds;
      o.s_mean += sp / seeds;
      o.s_min = std::min(o.s_min, sp);
      o.s_max = std::max(o.s_max, sp);
      o.lean_mk += kl.makespan_us / seeds;
      o.fd_mk += kf.makespan_us / seeds;
      o.lean_idle += idle_fraction(kl) / seeds;
      o.fd_idle += idle_fraction(kf) / seeds;
      o.lean_max_tiles += double(max_cta_tiles(kl)) / seeds;
      o.fd_max_tiles += double(max_cta_tiles(kf)) / seeds;
      o.mean_tiles_lean += double(lp.total_tiles) / double(kl.ctas.size()) / seeds;
      o.mean_tiles_fd += double(fp.total_tiles) / double(kf.ctas.size()) / seeds;
      o.kv_gb += kl.kv_bytes / 1e9 / seeds;
      o.fd_splits = fp.num_splits;
      o.lean_grid = lp.grid;
      o.fd_grid = int(kf.ctas.size());
    }
    auto it = measured.find({pt.batch, pt.hq, pt.hk, pt.lk_max, int(std::lround(100 * pt.ratio))});
    if (it != measured.end()) {
      const Config& g = st.configs[it->second];
      const Plans& p = st.plans[it->second];
      o.meas_lean = g.lean.us;
      o.meas_fd = g.fd.us;
      o.meas_s = g.fd.us / g.lean.us;
      o.meas_pred_s = predict_splitkv_time(p.fd, g.d, prm).total_us /
                      predict_lean_time(p.lean, g.d, prm).total_us;
    }
  }
  ReproTable t;
  t.title =
      "lean-ragged: LeanAttention Appendix A / Fig. 11 by the timing model: ragged decode "
      "batches (one entry at the max context, the others sharing the rest), lean vs "
      "FlashDecoding with FA2's split count, by batch context ratio (mean / max context), " +
      std::to_string(seeds) +
      " length draw(s) per point; H100 parameters fit as in `repro "
      "lean`";
  t.columns = {
      {"batch", 'i', "batch entries"},
      {"hq", 'i', "query heads"},
      {"hk", 'i', "KV heads"},
      {"lk_max", 'i', "longest context"},
      {"ratio", 'f', "batch context ratio: mean context / lk_max"},
      {"kv_gb", 'f', "K and V bytes read (mean over draws), GB"},
      {"fd_splits", 'i', "FA2's num_splits_heuristic for the shape"},
      {"lean_grid", 'i', "lean CTAs"},
      {"fd_grid", 'i', "FlashDecoding CTAs (empty splits included)"},
      {"predicted_lean_us", 'f', "model, mean over draws (µs)"},
      {"predicted_fd_us", 'f', "model, mean over draws (µs)"},
      {"predicted_speedup", 'f', "fd / lean, mean over draws"},
      {"predicted_speedup_min", 'f', "smallest over draws"},
      {"predicted_speedup_max", 'f', "largest over draws"},
      {"lean_makespan_us", 'f', "lean kernel: first CTA start to last CTA end"},
      {"fd_makespan_us", 'f', "FlashDecoding split kernel makespan (combine not included)"},
      {"lean_idle_frac", 'f', "SM-slot time with no CTA / (2·SMs × makespan), lean"},
      {"fd_idle_frac", 'f', "the same, FlashDecoding split kernel"},
      {"lean_mean_cta_tiles", 'f', "tiles per lean CTA, mean"},
      {"lean_max_cta_tiles", 'f', "the most tiles one lean CTA streams"},
      {"fd_mean_cta_tiles", 'f', "tiles per FlashDecoding CTA, mean"},
      {"fd_max_cta_tiles", 'f', "the most tiles one FlashDecoding CTA streams"},
      {"measured_lean_us", 'f',
       "H100, the measured configuration of this (batch, heads, max, ratio) if any"},
      {"measured_fd_us", 'f', "H100, the same"},
      {"measured_speedup", 'f', "H100 fd / lean (NaN: not measured)"},
      {"predicted_speedup_measured_lengths", 'f',
       "model on the measured configuration's own lengths"}};
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& pt = points[i];
    const Out& o = out[i];
    t.add_row({{"", double(pt.batch)},
               {"", double(pt.hq)},
               {"", double(pt.hk)},
               {"", double(pt.lk_max)},
               {"", pt.ratio},
               {"", o.kv_gb},
               {"", double(o.fd_splits)},
               {"", double(o.lean_grid)},
               {"", double(o.fd_grid)},
               {"", o.lean_us},
               {"", o.fd_us},
               {"", o.s_mean},
               {"", o.s_min},
               {"", o.s_max},
               {"", o.lean_mk},
               {"", o.fd_mk},
               {"", o.lean_idle},
               {"", o.fd_idle},
               {"", o.mean_tiles_lean},
               {"", o.lean_max_tiles},
               {"", o.mean_tiles_fd},
               {"", o.fd_max_tiles},
               {"", o.meas_lean},
               {"", o.meas_fd},
               {"", o.meas_s},
               {"", o.meas_pred_s}});
  }
  // Summary: the speedup at the lowest and highest ratio per batch (32/8, the longest max
  // context each batch fits), and where it falls monotonically as the ratio rises.
  std::string n = "Predicted speedup fd / lean (32/8 heads) by ratio, per max context and batch:\n";
  for (int m : maxes) {
    n += fmt("  max %.0fK:", m / 1024.0);
    for (int b : batches) {
      double lo = kNaN, hi = kNaN, r_lo = 0, r_hi = 0;
      bool mono = true;
      double prev = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < points.size(); ++i) {
        const Point& pt = points[i];
        if (pt.hq != 32 || pt.hk != 8 || pt.lk_max != m || pt.batch != b) continue;
        if (std::isnan(lo)) {
          lo = out[i].s_mean;
          r_lo = pt.ratio;
        }
        hi = out[i].s_mean;
        r_hi = pt.ratio;
        mono = mono && out[i].s_mean <= prev * 1.02;
        prev = out[i].s_mean;
      }
      if (!std::isnan(lo))
        n += fmt("  B=%d %.2f (%.2g) -> %.2f (%.2g)%s", b, lo, r_lo, hi, r_hi,
                 mono ? "" : " (not monotone)");
    }
    n += "\n";
  }
  n +=
      fmt("Model parameters: tile %.3g µs, %.4g GB/s, launch %.3g, segment %.3g, flag %.3g, "
          "merge %.3g µs.",
          prm.tile_us, prm.hbm_gbs, prm.launch_us, prm.segment_us, prm.flag_us, prm.merge_us);
  t.notes = n;
  return t;
}

// ---------------------------------------------------------------------------------------------
// One ragged batch, CTA by CTA.

ReproTable lean_cta(const ReproOptions&) {
  const Study st = run_study();
  const TimingParams& prm = st.fit.params;
  // The example: B = 8, 32/8 heads, max 32K, avg/max 0.25 (data/hw/h100/lean/README.md's
  // selected rows), else the first ragged configuration of the file.
  std::size_t pick = st.configs.size();
  for (std::size_t i = 0; i < st.configs.size(); ++i) {
    const Config& g = st.configs[i];
    if (g.kind != "ragged") continue;
    if (pick == st.configs.size()) pick = i;
    if (g.batch == 8 && g.hq == 32 && g.hk == 8 && g.lk_max == 32768 &&
        std::lround(100 * g.ratio()) == 25) {
      pick = i;
      break;
    }
  }
  if (pick == st.configs.size())
    throw UsageError("repro lean-cta: no ragged configuration in '" + st.path + "'");
  const Config& g = st.configs[pick];
  const Plans& p = st.plans[pick];
  const KernelTime kl = predict_lean_time(p.lean, g.d, prm),
                   kf = predict_splitkv_time(p.fd, g.d, prm);
  const TimingDevice dev;
  ReproTable t;
  std::string lens;
  for (int x : g.lk) {
    if (!lens.empty()) lens += ';';
    lens += std::to_string(x);
  }
  t.title = "lean-cta: per-CTA work and time of LeanAttention and FlashDecoding (" +
            std::to_string(g.fd.splits) +
            " splits) by the timing model on the measured ragged "
            "batch config " +
            std::to_string(g.id) + " (B=" + std::to_string(g.batch) + ", " + std::to_string(g.hq) +
            "/" + std::to_string(g.hk) + " heads, lk=" + lens + ")";
  t.columns = {{"kernel", 's', "lean or fd (the split kernel; its combine follows)"},
               {"cta", 'i', "blockIdx (fd: split fastest)"},
               {"slot", 'i', "SM slot it ran on (slot % 132 = SM)"},
               {"sm", 'i', "SM"},
               {"segments", 'i', "(batch, head) blocks it works on"},
               {"tiles", 'i', "n-tiles it streams"},
               {"start_us", 'f', "start, from the kernel's first CTA"},
               {"end_us", 'f', "end"},
               {"stream_us", 'f', "in the tile loop"},
               {"fixed_us", 'f', "segment epilogues and the host's merge"},
               {"wait_us", 'f', "lean host waiting for its splits' flags"},
               {"makespan_us", 'f', "the kernel's makespan (same on every row)"},
               {"predicted_us", 'f', "the model's event-to-event time"},
               {"measured_us", 'f', "H100 median"}};
  auto segments_of = [](const LeanPlan& plan, int cta) {
    int n = 0;
    for (const LeanSegment& s : plan.segments) n += s.cta == cta;
    return n;
  };
  for (const char* name : {"lean", "fd"}) {
    const bool lean = std::string(name) == "lean";
    const KernelTime& k = lean ? kl : kf;
    for (const CtaTime& c : k.ctas) {
      const int segs = lean ? segments_of(p.lean, c.cta) : (c.tiles > 0 ? 1 : 0);
      t.add_row({{name},
                 {"", double(c.cta)},
                 {"", double(c.slot)},
                 {"", double(c.slot % dev.sms)},
                 {"", double(segs)},
                 {"", double(c.tiles)},
                 {"", c.start_us},
                 {"", c.end_us},
                 {"", c.stream_us},
                 {"", c.fixed_us},
                 {"", c.wait_us},
                 {"", k.makespan_us},
                 {"", k.total_us},
                 {"", lean ? g.lean.us : g.fd.us}});
    }
  }
  std::string n;
  for (const char* name : {"lean", "fd"}) {
    const bool lean = std::string(name) == "lean";
    const KernelTime& k = lean ? kl : kf;
    double mean_tiles = 0;
    for (const CtaTime& c : k.ctas) mean_tiles += double(c.tiles) / double(k.ctas.size());
    n += fmt("%s: %zu CTAs, tiles per CTA mean %.1f max %lld, makespan %.1f µs, ", name,
             k.ctas.size(), mean_tiles, max_cta_tiles(k), k.makespan_us);
    n +=
        fmt("SM-slot idle %.1f%%, host waits %.1f µs in all; predicted %.1f µs, measured %.1f µs\n",
            100 * idle_fraction(k), k.wait_us, k.total_us, lean ? g.lean.us : g.fd.us);
  }
  n += fmt("Speedup fd / lean: predicted %.2f, measured %.2f.", kf.total_us / kl.total_us,
           g.fd.us / g.lean.us);
  t.notes = n;
  return t;
}

}  // namespace

void register_lean_repros(std::vector<Reproduction>& r) {
  r.push_back({"lean",
               "LeanAttention (Sanovar et al., arXiv 2405.10480): stream-K decode vs FlashDecoding "
               "on our H100 kernels (data/hw/h100/lean/lean_timings.csv)",
               "measured vs predicted lean and FlashDecoding times per configuration from the "
               "load-balance timing model fit on the calibration half; held-out r of the speedup",
               1, 1, lean_table});
  r.push_back({"lean-ragged",
               "LeanAttention Appendix A / Fig. 11 (ragged batches) by the timing model",
               "predicted speedup, makespan, SM idle and per-CTA work of lean vs FlashDecoding by "
               "batch context ratio, 2..64 entries, max context 8K..512K",
               5, 1, lean_ragged});
  r.push_back({"lean-cta", "LeanAttention Appendix A: per-CTA work of one ragged batch",
               "the model's per-CTA tiles, start, end and waits of lean and FlashDecoding on one "
               "measured ragged batch",
               1, 1, lean_cta});
}

}  // namespace attnsim
