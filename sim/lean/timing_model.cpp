// The load-balance timing model of the lean and FlashDecoding decode kernels (timing_model.hpp).
#include "sim/lean/timing_model.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace attnsim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One step of a CTA's program.
struct Op {
  enum Kind { kStream, kDelay, kSignal, kWait } kind = kDelay;
  double amount = 0;  // tiles (kStream), µs (kDelay), flags needed (kWait)
  int block = 0;      // kSignal, kWait
};

struct Program {
  std::vector<Op> ops;
  long long tiles = 0;
};

// The event loop: CTAs in blockIdx order onto the lowest free slot; delays run on the wall clock;
// a kWait parks the CTA until its block has `amount` signals; the streaming CTAs share one rate
// min(1/tile_us, BW / N) (processor sharing), so one virtual clock V (tiles streamed per
// streaming CTA since t = 0) orders their ends.
KernelTime simulate(const std::vector<Program>& progs, int blocks, double tile_bytes,
                    const TimingParams& p, const TimingDevice& dev) {
  const int slots = dev.sms * dev.ctas_per_sm;
  const double r_cta = 1.0 / p.tile_us;
  const double r_bw = p.hbm_gbs * 1e3 / tile_bytes;  // tiles per µs the HBM delivers in all
  const int n = int(progs.size());
  KernelTime kt;
  kt.ctas.resize(std::size_t(n));
  std::vector<std::size_t> pc(std::size_t(n), 0);
  std::vector<double> mark(std::size_t(n), 0);  // start of the current op or wait
  std::vector<int> signals(std::size_t(blocks), 0);
  std::vector<std::vector<int>> waiting(static_cast<std::size_t>(blocks));
  using Ev = std::pair<double, int>;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> delays, streams;
  std::priority_queue<int, std::vector<int>, std::greater<int>> free_slots;
  for (int s = 0; s < slots; ++s) free_slots.push(s);
  double now = 0, v = 0;
  int next = 0, done = 0;
  std::vector<int> ready;  // CTAs whose next op is due now

  auto start_cta = [&](int c) {
    CtaTime& t = kt.ctas[std::size_t(c)];
    t.cta = c;
    t.slot = free_slots.top();
    free_slots.pop();
    t.start_us = now;
    mark[std::size_t(c)] = now;
    t.tiles = progs[std::size_t(c)].tiles;
    ready.push_back(c);
  };
  // Runs CTA c's untimed ops until it starts a timed op, parks or ends.
  auto advance = [&](int c) {
    const auto& ops = progs[std::size_t(c)].ops;
    CtaTime& t = kt.ctas[std::size_t(c)];
    while (pc[std::size_t(c)] < ops.size()) {
      const Op& op = ops[pc[std::size_t(c)]];
      if (op.kind == Op::kSignal) {
        ++signals[std::size_t(op.block)];
        auto& w = waiting[std::size_t(op.block)];  // they look again
        for (int x : w) ready.push_back(x);
        w.clear();
        ++pc[std::size_t(c)];
        continue;
      }
      if (op.kind == Op::kWait) {
        if (signals[std::size_t(op.block)] >= int(op.amount)) {
          t.wait_us += now - mark[std::size_t(c)];
          ++pc[std::size_t(c)];
          continue;
        }
        waiting[std::size_t(op.block)].push_back(c);  // mark: when its last op ended
        return;
      }
      ++pc[std::size_t(c)];
      mark[std::size_t(c)] = now;
      if (op.kind == Op::kDelay) {
        t.fixed_us += op.amount;
        delays.push({now + op.amount, c});
        return;
      }
      if (op.amount > 0) {
        streams.push({v + op.amount, c});
        return;
      }
    }
    // Done: free the slot, start the next CTA in blockIdx order.
    t.end_us = now;
    ++done;
    free_slots.push(t.slot);
    if (next < n) start_cta(next++);
  };
  auto drain = [&]() {
    while (!ready.empty()) {
      const int c = ready.back();
      ready.pop_back();
      advance(c);
    }
  };
  while (next < n && !free_slots.empty()) start_cta(next++);
  drain();
  while (done < n) {
    const double rate = streams.empty() ? 0.0 : std::min(r_cta, r_bw / double(streams.size()));
    const double t_delay = delays.empty() ? kInf : delays.top().first;
    const double t_stream = streams.empty() ? kInf : now + (streams.top().first - v) / rate;
    if (t_delay == kInf && t_stream == kInf)
      throw std::logic_error("timing model: CTAs wait on flags no resident CTA will set");
    int c;
    if (t_stream <= t_delay) {
      c = streams.top().second;
      v = streams.top().first;
      streams.pop();
      now = std::max(now, t_stream);
      kt.ctas[std::size_t(c)].stream_us += now - mark[std::size_t(c)];
    } else {
      c = delays.top().second;
      delays.pop();
      v += (t_delay - now) * rate;
      now = t_delay;
    }
    mark[std::size_t(c)] = now;  // the op just ended; a wait after it starts now
    ready.push_back(c);
    drain();
  }
  kt.makespan_us = 0;
  std::vector<char> used(std::size_t(slots), 0);
  for (const CtaTime& t : kt.ctas) {
    kt.makespan_us = std::max(kt.makespan_us, t.end_us);
    kt.busy_us += t.end_us - t.start_us;
    kt.wait_us += t.wait_us;
    kt.kv_bytes += double(t.tiles) * tile_bytes;
    used[std::size_t(t.slot)] = 1;
  }
  for (char u : used) kt.slots_used += u;
  kt.idle_us = double(slots) * kt.makespan_us - kt.busy_us;
  return kt;
}

double tile_bytes_of(const LeanPlan& plan, int head_dim, const TimingDevice& dev) {
  return 2.0 * plan.block_n * head_dim * dev.bytes_per_elem;  // one K and one V tile
}

}  // namespace

std::vector<double> to_vector(const TimingParams& p) {
  return {p.tile_us, p.hbm_gbs, p.launch_us, p.segment_us, p.flag_us, p.merge_us};
}

TimingParams timing_params_from(const std::vector<double>& v) {
  if (v.size() != kNumTimingParams) throw std::invalid_argument("timing model: six parameters");
  return {v[0], v[1], v[2], v[3], v[4], v[5]};
}

const std::vector<std::string>& timing_param_names() {
  static const std::vector<std::string> names{"tile_us",    "hbm_gbs", "launch_us",
                                              "segment_us", "flag_us", "merge_us"};
  return names;
}

KernelTime predict_lean_time(const LeanPlan& plan, int head_dim, const TimingParams& p,
                             const TimingDevice& dev) {
  // Blocks in the plan's order; splits per block = its segments.
  std::map<std::tuple<int, int, int>, int> block_of;
  std::vector<int> splits;
  for (const LeanSegment& g : plan.segments) {
    auto [it, fresh] = block_of.try_emplace({g.batch, g.head, g.m_block}, int(splits.size()));
    if (fresh) splits.push_back(0);
    ++splits[std::size_t(it->second)];
  }
  std::vector<Program> progs(std::size_t(plan.grid));
  for (const LeanSegment& g : plan.segments) {
    Program& pr = progs[std::size_t(g.cta)];
    const int blk = block_of.at({g.batch, g.head, g.m_block});
    const int ns = splits[std::size_t(blk)];
    pr.tiles += g.n_end - g.n_begin;
    pr.ops.push_back({Op::kStream, double(g.n_end - g.n_begin)});
    pr.ops.push_back({Op::kDelay, p.segment_us});
    if (!g.host) {
      pr.ops.push_back({Op::kSignal, 0, blk});
    } else if (ns > 1) {
      // The host merges ns partials (its own included) once the ns − 1 flags are set.
      pr.ops.push_back({Op::kWait, double(ns - 1), blk});
      pr.ops.push_back({Op::kDelay, p.flag_us + p.merge_us * ns});
    }
  }
  KernelTime kt = simulate(progs, int(splits.size()), tile_bytes_of(plan, head_dim, dev), p, dev);
  kt.total_us = p.launch_us + kt.makespan_us;
  return kt;
}

KernelTime predict_splitkv_time(const LeanPlan& plan, int head_dim, const TimingParams& p,
                                const TimingDevice& dev) {
  const int ns = std::max(1, plan.num_splits);
  // blockIdx = (split, block), split fastest: the plan's segments in order, each block padded
  // to ns CTAs by its empty trailing splits.
  std::vector<Program> progs;
  std::size_t i = 0;
  const auto& seg = plan.segments;
  while (i < seg.size()) {
    const LeanSegment& first = seg[i];
    int made = 0;
    while (i < seg.size() && seg[i].batch == first.batch && seg[i].head == first.head &&
           seg[i].m_block == first.m_block) {
      Program pr;
      pr.tiles = seg[i].n_end - seg[i].n_begin;
      pr.ops.push_back({Op::kStream, double(pr.tiles)});
      pr.ops.push_back({Op::kDelay, p.segment_us});
      progs.push_back(std::move(pr));
      ++made;
      ++i;
    }
    for (; made < ns; ++made) {
      Program pr;  // FA2: an empty split writes O = 0, lse = −inf and returns
      pr.ops.push_back({Op::kDelay, p.segment_us});
      progs.push_back(std::move(pr));
    }
  }
  KernelTime kt = simulate(progs, 1, tile_bytes_of(plan, head_dim, dev), p, dev);
  kt.combine_us = ns > 1 ? p.launch_us + p.merge_us * ns : 0.0;
  kt.total_us = p.launch_us + kt.makespan_us + kt.combine_us;
  return kt;
}

double predict_time(const TimingSample& s, const TimingParams& p, const TimingDevice& dev) {
  return s.lean ? predict_lean_time(*s.plan, s.head_dim, p, dev).total_us
                : predict_splitkv_time(*s.plan, s.head_dim, p, dev).total_us;
}

TimingFit fit_timing_params(const std::vector<TimingSample>& samples, const TimingParams& start,
                            const TimingDevice& dev, int max_evaluations) {
  if (samples.empty()) throw std::invalid_argument("timing fit: no samples");
  using Point = std::vector<double>;
  const std::size_t k = kNumTimingParams;
  TimingFit fit;
  // The objective over x = log(params): mean squared log error.
  auto objective = [&](const Point& x) {
    Point v;
    for (double xj : x) v.push_back(std::exp(xj));
    const TimingParams p = timing_params_from(v);
    std::vector<double> e(samples.size());
#pragma omp parallel for schedule(dynamic, 4)
    for (long i = 0; i < long(samples.size()); ++i) {
      const TimingSample& t = samples[std::size_t(i)];
      e[std::size_t(i)] = std::log(predict_time(t, p, dev) / t.measured_us);
    }
    double s = 0;  // in sample order: the fit does not depend on the thread count
    for (double x : e) s += x * x;
    ++fit.evaluations;
    return s / double(samples.size());
  };
  // Nelder–Mead (reflection 1, expansion 2, contraction and shrink 1/2), first simplex steps of
  // 0.3 in log space; stops when the simplex's values agree to 1e-12 or the budget is spent.
  auto nelder_mead = [&](const Point& x0, int budget) {
    std::vector<Point> s(k + 1, x0);
    for (std::size_t j = 0; j < k; ++j) s[j + 1][j] += 0.3;
    std::vector<double> f;
    for (const Point& x : s) f.push_back(objective(x));
    for (int used = int(k) + 1; used < budget;) {
      std::vector<std::size_t> ord(k + 1);
      for (std::size_t j = 0; j <= k; ++j) ord[j] = j;
      std::stable_sort(ord.begin(), ord.end(),
                       [&](std::size_t a, std::size_t b) { return f[a] < f[b]; });
      std::vector<Point> s2;
      std::vector<double> f2;
      for (std::size_t j : ord) {
        s2.push_back(s[j]);
        f2.push_back(f[j]);
      }
      s.swap(s2);
      f.swap(f2);
      if (f[k] - f[0] < 1e-12 * (1 + f[0])) break;
      Point c(k, 0.0);
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t d = 0; d < k; ++d) c[d] += s[j][d] / double(k);
      auto along = [&](double t) {  // c + t·(worst − c)
        Point y(k);
        for (std::size_t d = 0; d < k; ++d) y[d] = c[d] + t * (s[k][d] - c[d]);
        return y;
      };
      const Point xr = along(-1.0);
      const double fr = objective(xr);
      ++used;
      if (fr < f[0]) {
        const Point xe = along(-2.0);
        const double fe = objective(xe);
        ++used;
        s[k] = fe < fr ? xe : xr;
        f[k] = std::min(fe, fr);
      } else if (fr < f[k - 1]) {
        s[k] = xr;
        f[k] = fr;
      } else {
        const Point xc = along(fr < f[k] ? -0.5 : 0.5);
        const double fc = objective(xc);
        ++used;
        if (fc < std::min(fr, f[k])) {
          s[k] = xc;
          f[k] = fc;
        } else {
          for (std::size_t j = 1; j <= k; ++j) {
            for (std::size_t d = 0; d < k; ++d) s[j][d] = s[0][d] + 0.5 * (s[j][d] - s[0][d]);
            f[j] = objective(s[j]);
            ++used;
          }
        }
      }
    }
    const std::size_t best = std::size_t(std::min_element(f.begin(), f.end()) - f.begin());
    return std::make_pair(s[best], f[best]);
  };
  Point x0;
  for (double v : to_vector(start)) x0.push_back(std::log(v));
  const auto [x1, f1] = nelder_mead(x0, max_evaluations / 2);  // then once more from there
  const auto [x2, f2] = nelder_mead(x1, max_evaluations - fit.evaluations);
  Point v;
  for (double xj : (f2 <= f1 ? x2 : x1)) v.push_back(std::exp(xj));
  fit.params = timing_params_from(v);
  fit.rms_log = std::sqrt(std::min(f1, f2));
  return fit;
}

}  // namespace attnsim
