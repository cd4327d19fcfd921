// AMLA's Preload pipeline scheduler (paper §4.1, Appendix B): model and notation in preload.hpp.
//
// Reading of Theorem B.1 (Appendix B.3/B.4), checked against the n = 3 example, Eq. 17, Eq. 20
// and the proof, and by simulation (preload_test.cpp):
//  - The n = 3 example: "For permutation [C1][C2][C3], enforcing [C1]→[V1] and [C2]→[V2]
//    requires [V1]+[V2] ≤ [C2]+[C3] and [V2] ≤ [C3]". With the Cube busy from 0 to Σc and V1, V2
//    waiting in the cycle for C1, C2, V1 starts at C1's end and V1+V2 must fit in C2+C3; V2 starts
//    at C2's end and must fit in C3; V3 (input from the previous cycle) runs first. So the internal
//    edges are C_i→V_i, the vector order is V3, V1, V2, and the conditions say the vector work
//    ends with the cycle. Eq. 17 with k = 1 is exactly this pair.
//  - In general (m = n − k as B.4.1 writes, f = m + 1): cube order C_{f+1}, …, C_f, vector order
//    V_f, V_{f+1}, …, V_{f−1}, internal C_i→V_i for i ≠ f. The Cube never waits (its inputs come
//    from the previous cycle), and the vector work ends by Σc iff for every i ≠ f the stages
//    V_i..V_m (V_i and those after it) fit in the cube work C_{i+1}..C_{m+1} left after C_i, i.e.
//    Σ_{l=i}^{m} a_l ≤ 0 with a_l = V_l − C_{l+1} (Eq. 18): Eq. 20 for j = m−i+1 = 1..n−1 and,
//    unrolled, Eq. 17. All n edges C_i→V_i exist, so every rotation has n−1 internal edges.
//  - Index conventions: B.4.1 sets m = n − k, then B.4.2 "claims m = k satisfies Eq. 20" with k the
//    minimiser of F. The two k are different indices: the proof's minimiser is m (B.4.2's k), and
//    Eq. 17's k is n − m (n when m = n, by the cyclic indexing). PreloadConstruction keeps both.
//  - Theorem 4.1 (2) and the caption of Fig. 11 call the internal chains "[V]→[C]"; the example's
//    "enables [C1]→[V1], [C2]→[V2]" and Eq. 17 are [C]→[V]. The [V]→[C] reading cannot be the
//    theorem: the only V→C edges are V_i→C_{i+1}, i < n; the cube stage that opens a Cube-bound
//    cycle cannot wait for a vector stage, so unless it is C1 (no input) one of the n−1 V→C edges
//    is external. n−1 internal V→C edges thus need C1 first and the next cube stage's input vector
//    done within C1 (besides later windows), which fails, e.g., on AMLA's own shape c = (1, 1), v = (1.5, 0) (preload_test.cpp,
//    PreloadConstruction.VectorToCubeReadingFails). We read "[V]→[C]" as "V depends on C".
//  - The Vector-dominated case ("reversing roles and inequalities", B.4.3) is the mirror image:
//    reverse time and swap the units (C'_i = V_{n+1−i}, V'_i = C_{n+1−i}); an edge C_i→V_i maps to
//    C'_{n+1−i}→V'_{n+1−i}, so the internal edges stay C→V and the rotation family maps to itself
//    with k ↔ n+1−k. Written directly: the Vector unit runs V_f, V_{f+1}, … back to back and V_i
//    must not wait for C_i: Σ_{l=f}^{f+j−1} a_l ≥ 0, j = 1..n−1, which the minimiser of F over
//    0..n−1 gives (F(n) ≥ 0 = F(0) handles the wrap as F(n) ≤ 0 does in Eq. 22-23).
#include "sim/amla/preload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>

#include "numerics/digest.hpp"

namespace attnsim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Stall-freedom compares sums of the same durations added in different orders (index order for
// max(Σc, Σv), unit order in the schedule): they differ by a few ulps, far below 1e-9 of the
// total. Random sets (preload_theorem_check) never come that close to a tie in the conditions.
double tolerance(double cube_sum, double vector_sum) { return 1e-9 * (cube_sum + vector_sum); }

double sum(const std::vector<double>& x) {
  double s = 0;
  for (double d : x) s += d;
  return s;
}

int check_chain(const CvChain& chain) {
  const std::size_t n = chain.c.size();
  if (n == 0 || chain.v.size() != n)
    throw std::invalid_argument("preload: c and v need size n >= 1");
  for (std::size_t i = 0; i < n; ++i) {
    if (!(chain.c[i] >= 0 && chain.v[i] >= 0 && std::isfinite(chain.c[i]) &&
          std::isfinite(chain.v[i])))
      throw std::invalid_argument("preload: durations must be finite and >= 0");
  }
  return int(n);
}

bool is_permutation_of_n(const std::vector<int>& order, int n) {
  if (int(order.size()) != n) return false;
  std::vector<bool> seen(std::size_t(n), false);
  for (int i : order) {
    if (i < 0 || i >= n || seen[std::size_t(i)]) return false;
    seen[std::size_t(i)] = true;
  }
  return true;
}

int check_cycle(const PreloadCycle& cycle) {
  const int n = int(cycle.cube_order.size());
  if (n == 0 || !is_permutation_of_n(cycle.cube_order, n) ||
      !is_permutation_of_n(cycle.vector_order, n) || int(cycle.internal.size()) != 2 * n - 1)
    throw std::invalid_argument("preload: cycle needs two permutations of 0..n-1 and 2n-1 edges");
  return n;
}

double duration(const CvChain& chain, int position) {
  return position % 2 == 0 ? chain.c[std::size_t(position / 2)]
                           : chain.v[std::size_t(position / 2)];
}

// Time reversal with the units swapped (B.4.3 "reversing roles"): C'_i = V_{n+1−i},
// V'_i = C_{n+1−i}; chain position p' is p = 2n−1−p', edge e' is e = 2n−2−e'. A stall-free
// barrier cycle of one chain, read backwards in time, is one of the other with reversed unit
// orders, and the earliest-start schedule finds one whenever one exists, so stall-freedom and
// the internal-edge count carry over. An involution.
CvChain mirror_chain(const CvChain& chain) {
  const std::size_t n = chain.c.size();
  CvChain m;
  m.c.resize(n);
  m.v.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    m.c[i] = chain.v[n - 1 - i];
    m.v[i] = chain.c[n - 1 - i];
  }
  return m;
}

PreloadCycle mirror_cycle(const PreloadCycle& cycle) {
  const int n = int(cycle.cube_order.size());
  PreloadCycle m;
  for (int r = n - 1; r >= 0; --r) {
    m.cube_order.push_back(n - 1 - cycle.vector_order[std::size_t(r)]);
    m.vector_order.push_back(n - 1 - cycle.cube_order[std::size_t(r)]);
  }
  m.internal.resize(std::size_t(2 * n - 1));
  for (int e = 0; e < 2 * n - 1; ++e)
    m.internal[std::size_t(e)] = cycle.internal[std::size_t(2 * n - 2 - e)];
  return m;
}

std::string stage_name(int position) {
  std::string name(1, position % 2 == 0 ? 'C' : 'V');
  return name += std::to_string(position / 2 + 1);
}

const char* phase_name(PreloadPhase p) {
  return p == PreloadPhase::kPreload ? "preload" : p == PreloadPhase::kSteady ? "steady" : "drain";
}

// One stage instance of the schedule, in its unit's sequence.
struct Slot {
  int cycle;
  int iteration;
  int position;
};

}  // namespace

std::vector<int> preload_offsets(const PreloadCycle& cycle) {
  const int n = check_cycle(cycle);
  std::vector<int> d(std::size_t(2 * n), 0);
  for (int e = 0; e < 2 * n - 1; ++e)
    d[std::size_t(e + 1)] = d[std::size_t(e)] + (cycle.internal[std::size_t(e)] ? 0 : 1);
  return d;
}

int preload_count(const PreloadCycle& cycle) { return preload_offsets(cycle).back(); }

PreloadRun preload_simulate(const CvChain& chain, const PreloadCycle& cycle, int iterations,
                            CycleSync sync) {
  const int n = check_chain(chain);
  if (check_cycle(cycle) != n) throw std::invalid_argument("preload: cycle and chain sizes differ");
  const std::vector<int> d = preload_offsets(cycle);
  const int P = d.back();
  const int N = iterations;
  if (N < P + 1) throw std::invalid_argument("preload_simulate: needs iterations >= preload + 1");
  const int cycles = N + P;
  const bool barrier = sync == CycleSync::kBarrier;

  PreloadRun run;
  run.n = n;
  run.iterations = N;
  run.preload_count = P;
  run.cube_sum = sum(chain.c);
  run.vector_sum = sum(chain.v);

  // The unit sequences: cycle by cycle, each in the cycle's order; stage X of cycle t works on
  // iteration t − d(X) and is skipped outside 1..N (Preload phase and drain, §4.1.1, §4.1.3).
  std::vector<Slot> seq[2];
  std::vector<int> remaining(std::size_t(cycles + 1), 0);
  for (int t = 1; t <= cycles; ++t) {
    for (int u = 0; u < 2; ++u) {
      for (int i : u == 0 ? cycle.cube_order : cycle.vector_order) {
        const int p = 2 * i + u;
        const int tau = t - d[std::size_t(p)];
        if (tau < 1 || tau > N) continue;
        seq[u].push_back({t, tau, p});
        ++remaining[std::size_t(t)];
      }
    }
  }

  // List scheduling: a stage starts at max(its unit's previous end, its predecessor's end in the
  // same iteration) and, under the barrier, not before the previous cycle's last end. Issuing
  // whichever unit is ready first does not change any time (each is a max over fixed values).
  std::vector<double> ends(std::size_t(N) * std::size_t(2 * n), -1.0);
  auto end_of = [&](int tau, int p) -> double& {
    return ends[std::size_t(tau - 1) * std::size_t(2 * n) + std::size_t(p)];
  };
  std::vector<double> cycle_end(std::size_t(cycles + 1), 0.0);
  std::vector<double> cycle_start(std::size_t(cycles + 1), kInf);
  std::size_t next[2] = {0, 0};
  double unit_free[2] = {0, 0};
  std::vector<PreloadStageRun> runs[2];
  runs[0].reserve(seq[0].size());
  runs[1].reserve(seq[1].size());
  auto phase_of = [&](int t) {
    return t <= P ? PreloadPhase::kPreload : t <= N ? PreloadPhase::kSteady : PreloadPhase::kDrain;
  };
  for (;;) {
    bool progressed = false;
    for (int u = 0; u < 2; ++u) {
      if (next[u] == seq[u].size()) continue;
      const Slot& s = seq[u][next[u]];
      double at = unit_free[u];
      if (s.position > 0) {
        const double pe = end_of(s.iteration, s.position - 1);
        if (pe < 0) continue;
        at = std::max(at, pe);
      }
      if (barrier && s.cycle > 1) {
        if (remaining[std::size_t(s.cycle - 1)] > 0) continue;
        at = std::max(at, cycle_end[std::size_t(s.cycle - 1)]);
      }
      const double end = at + duration(chain, s.position);
      end_of(s.iteration, s.position) = end;
      unit_free[u] = end;
      --remaining[std::size_t(s.cycle)];
      cycle_end[std::size_t(s.cycle)] = std::max(cycle_end[std::size_t(s.cycle)], end);
      cycle_start[std::size_t(s.cycle)] = std::min(cycle_start[std::size_t(s.cycle)], at);
      runs[u].push_back({s.cycle, s.iteration, s.position, phase_of(s.cycle), at, end});
      ++next[u];
      progressed = true;
    }
    if (next[0] == seq[0].size() && next[1] == seq[1].size()) break;
    if (!progressed) {
      run.deadlock = true;
      break;
    }
  }
  run.timeline = std::move(runs[0]);
  run.timeline.insert(run.timeline.end(), runs[1].begin(), runs[1].end());
  for (const PreloadStageRun& s : run.timeline)
    if (s.position == 0 && s.phase == PreloadPhase::kPreload) ++run.preload_c1;
  if (run.deadlock) {
    run.makespan = run.period = run.steady_idle = kInf;
    return run;
  }
  run.makespan = *std::max_element(cycle_end.begin(), cycle_end.end());

  // The steady loop, cycles P+1..N. Barrier: cycle t spans [end of cycle t−1, its last end], and
  // the dominant unit (busy T* in it) idles for the rest. Free: the gaps before the dominant
  // unit's stages of steady cycles (the brief's "stage start = previous stage end").
  const double t_star = std::max(run.cube_sum, run.vector_sum);
  const int dominant = run.vector_sum <= run.cube_sum ? 0 : 1;
  const int steady = N - P;
  if (barrier) {
    for (int t = P + 1; t <= N; ++t) {
      const double begin = t == 1 ? 0.0 : cycle_end[std::size_t(t - 1)];
      run.steady_idle += std::max(0.0, cycle_end[std::size_t(t)] - begin - t_star);
    }
  } else {
    double prev_end = -1;
    for (const Slot& s : seq[dominant]) {
      const double start = end_of(s.iteration, s.position) - duration(chain, s.position);
      if (s.cycle > P && s.cycle <= N && prev_end >= 0)
        run.steady_idle += std::max(0.0, start - prev_end);
      prev_end = end_of(s.iteration, s.position);
    }
  }
  run.stall_free = run.steady_idle <= tolerance(run.cube_sum, run.vector_sum) * steady;
  // The period from the dominant unit's last end per cycle, over the second half of the steady
  // loop: under the barrier every steady cycle is the same, and free-running the first steady
  // cycles may still carry the Preload phase's spill.
  std::vector<double> dominant_end(std::size_t(cycles + 1), 0.0);
  for (const Slot& s : seq[dominant])
    dominant_end[std::size_t(s.cycle)] = end_of(s.iteration, s.position);
  if (steady >= 2) {
    const int h = N - std::max(1, steady / 2);
    run.period = (dominant_end[std::size_t(N)] - dominant_end[std::size_t(h)]) / (N - h);
  } else {
    const double begin =
        barrier ? (P == 0 ? 0.0 : cycle_end[std::size_t(P)]) : cycle_start[std::size_t(P + 1)];
    run.period = cycle_end[std::size_t(P + 1)] - begin;
  }
  return run;
}

double preload_cycle_time(const CvChain& chain, const PreloadCycle& cycle) {
  const int n = check_chain(chain);
  if (check_cycle(cycle) != n) throw std::invalid_argument("preload: cycle and chain sizes differ");
  // One steady cycle under the barrier: external predecessors ended before it began (time 0).
  std::vector<double> ends(std::size_t(2 * n), -1.0);
  int next[2] = {0, 0};
  double unit_free[2] = {0, 0};
  double last = 0;
  while (next[0] < n || next[1] < n) {
    bool progressed = false;
    for (int u = 0; u < 2; ++u) {
      if (next[u] == n) continue;
      const int i = (u == 0 ? cycle.cube_order : cycle.vector_order)[std::size_t(next[u])];
      const int p = 2 * i + u;
      double at = unit_free[u];
      if (p > 0 && cycle.internal[std::size_t(p - 1)]) {
        if (ends[std::size_t(p - 1)] < 0) continue;
        at = std::max(at, ends[std::size_t(p - 1)]);
      }
      ends[std::size_t(p)] = unit_free[u] = at + duration(chain, p);
      last = std::max(last, unit_free[u]);
      ++next[u];
      progressed = true;
    }
    if (!progressed) return kInf;
  }
  return last;
}

bool preload_cycle_stall_free(const CvChain& chain, const PreloadCycle& cycle) {
  const double sc = sum(chain.c), sv = sum(chain.v);
  return preload_cycle_time(chain, cycle) <= std::max(sc, sv) + tolerance(sc, sv);
}

std::string preload_timeline_text(const PreloadRun& run) {
  std::vector<PreloadStageRun> t = run.timeline;
  std::stable_sort(t.begin(), t.end(), [](const PreloadStageRun& a, const PreloadStageRun& b) {
    return a.start < b.start || (a.start == b.start && a.position % 2 < b.position % 2);
  });
  std::string out;
  char line[160];
  for (const PreloadStageRun& s : t) {
    std::snprintf(line, sizeof line, "cycle %3d %-8s %-4s it %3d  %-6s [%.6g, %.6g)\n", s.cycle,
                  phase_name(s.phase), stage_name(s.position).c_str(), s.iteration,
                  s.position % 2 == 0 ? "cube" : "vector", s.start, s.end);
    out += line;
  }
  return out;
}

PreloadCycle preload_rotation_cycle(int n, int k) {
  if (n < 1 || k < 1 || k > n) throw std::invalid_argument("preload_rotation_cycle: 1 <= k <= n");
  const int f = n + 1 - k;  // the free vector stage V_f (1-based)
  PreloadCycle cy;
  for (int r = 0; r < n; ++r) {
    cy.cube_order.push_back((f + r) % n);        // C_{f+1}, …, C_f
    cy.vector_order.push_back((f - 1 + r) % n);  // V_f, V_{f+1}, …, V_{f−1}
  }
  cy.internal.assign(std::size_t(2 * n - 1), false);
  for (int i = 0; i < n; ++i)
    if (i + 1 != f) cy.internal[std::size_t(2 * i)] = true;  // C_{i+1}→V_{i+1}
  return cy;
}

namespace {

// Eq. 17 as printed, Σv ≤ Σc.
bool eq17_cube(const CvChain& ch, int k, double tol) {
  const int n = int(ch.c.size());
  auto cyc = [n](int x) { return std::size_t(((x - 1) % n + n) % n); };  // 1-based, cyclic
  double lhs = 0, rhs = 0;
  for (int j = 1; j <= n - 1; ++j) {
    const int i = j - 1;
    lhs += ch.v[cyc(n - k - i)];
    rhs += ch.c[cyc(n + 1 - k - i)];
    if (lhs > rhs + tol) return false;
  }
  return true;
}

}  // namespace

bool preload_eq17_holds(const CvChain& chain, int k) {
  const int n = check_chain(chain);
  if (k < 1 || k > n) throw std::invalid_argument("preload_eq17_holds: 1 <= k <= n");
  const double sc = sum(chain.c), sv = sum(chain.v), tol = tolerance(sc, sv);
  if (sv <= sc) return eq17_cube(chain, k, tol);
  return eq17_cube(mirror_chain(chain), n + 1 - k, tol);
}

PreloadConstruction preload_construct(const CvChain& chain) {
  const int n = check_chain(chain);
  PreloadConstruction pc;
  pc.cube_dominated = sum(chain.v) <= sum(chain.c);
  pc.a.resize(std::size_t(n));
  pc.f.assign(std::size_t(n + 1), 0.0);
  for (int i = 1; i <= n; ++i) {
    pc.a[std::size_t(i - 1)] = chain.v[std::size_t(i - 1)] - chain.c[std::size_t(i % n)];  // Eq. 18
    pc.f[std::size_t(i)] = pc.f[std::size_t(i - 1)] + pc.a[std::size_t(i - 1)];
  }
  // B.4.2: the minimal partial sum, over l = 1..n (F(n) ≤ 0 = F(0) makes l = n stand for 0);
  // the Vector-dominated mirror takes l = 0..n−1 (F(0) = 0 ≤ F(n)). Ties: the smallest l.
  const int lo = pc.cube_dominated ? 1 : 0;
  pc.l_min = lo;
  for (int l = lo; l < lo + n; ++l)
    if (pc.f[std::size_t(l)] < pc.f[std::size_t(pc.l_min)]) pc.l_min = l;
  pc.free_vector = pc.l_min % n + 1;
  pc.k = n + 1 - pc.free_vector;
  pc.cycle = preload_rotation_cycle(n, pc.k);
  return pc;
}

namespace {

// The exhaustive search for Σv ≤ Σc (the other case is mirrored). A stall-free barrier cycle runs
// the Cube back to back from 0 to T = Σc, so a cube order fixes every C_i's start s_i and end e_i.
// The vector stages then run in some order, V_i starting at max(previous vector end, e_i if
// C_i→V_i is internal, else 0), and the cycle is stall-free iff every V_i ends by T and by s_{i+1}
// if V_i→C_{i+1} is internal. Depth-first over the vector order, per stage two choices for the
// input edge (internal or not; internal is free when e_i is already past) and the output edge
// internal whenever its window allows (it changes no time). Bound: each unplaced stage adds at
// most the edges its window still allows from the current time.
struct Search {
  int n = 0;
  const double* c = nullptr;
  const double* v = nullptr;
  double T = 0, tol = 0;
  bool allow_in = true, allow_out = true;
  int stop_at = 0;  // stop once this many internal edges are found
  std::vector<int> cube;
  std::vector<double> s, e;
  std::vector<int> order;
  std::vector<char> in, out;
  int best = -1;
  PreloadCycle best_cycle;
  bool done = false;

  bool out_fits(int i, double end) const {
    return allow_out && i < n - 1 && end <= s[std::size_t(i + 1)] + tol;
  }

  void leaf(int count) {
    best = count;
    best_cycle.cube_order = cube;
    best_cycle.vector_order = order;
    best_cycle.internal.assign(std::size_t(2 * n - 1), false);
    for (int i = 0; i < n; ++i) {
      best_cycle.internal[std::size_t(2 * i)] = in[std::size_t(i)] != 0;
      if (i < n - 1) best_cycle.internal[std::size_t(2 * i + 1)] = out[std::size_t(i)] != 0;
    }
    if (best >= stop_at) done = true;
  }

  void dfs(unsigned used, int depth, double t, double rem, int count) {
    if (done) return;
    if (depth == n) {
      if (count > best) leaf(count);
      return;
    }
    int bound = count;
    for (int i = 0; i < n; ++i) {
      if (used >> i & 1u) continue;
      const double vi = v[i];
      bound += (allow_in && std::max(t, e[std::size_t(i)]) + vi <= T + tol) + out_fits(i, t + vi);
    }
    if (bound <= best) return;
    for (int i = 0; i < n && !done; ++i) {
      if (used >> i & 1u) continue;
      const double vi = v[i];
      const double ei = e[std::size_t(i)];
      order[std::size_t(depth)] = i;
      // Input external (or internal for free): starts at t; t + rem ≤ T keeps the rest feasible.
      const double end_a = t + vi;
      in[std::size_t(i)] = allow_in && ei <= t;
      out[std::size_t(i)] = out_fits(i, end_a);
      dfs(used | 1u << i, depth + 1, end_a, rem - vi,
          count + in[std::size_t(i)] + out[std::size_t(i)]);
      // Input internal, waiting for C_i.
      if (allow_in && ei > t && ei + rem <= T + tol) {
        const double end_b = ei + vi;
        in[std::size_t(i)] = 1;
        out[std::size_t(i)] = out_fits(i, end_b);
        dfs(used | 1u << i, depth + 1, end_b, rem - vi, count + 1 + out[std::size_t(i)]);
      }
    }
  }

  // Cube-dominated chain; returns the most internal edges (stopping early at stop_at).
  void run(const CvChain& ch, PreloadEdges edges, int stop) {
    n = int(ch.c.size());
    c = ch.c.data();
    v = ch.v.data();
    const double sc = sum(ch.c), sv = sum(ch.v);
    T = sc;
    tol = tolerance(sc, sv);
    allow_in = edges != PreloadEdges::kVectorToCube;
    allow_out = edges != PreloadEdges::kCubeToVector;
    stop_at = stop;
    cube.resize(std::size_t(n));
    for (int i = 0; i < n; ++i) cube[std::size_t(i)] = i;
    s.resize(std::size_t(n));
    e.resize(std::size_t(n));
    order.resize(std::size_t(n));
    in.assign(std::size_t(n), 0);
    out.assign(std::size_t(n), 0);
    do {
      double t = 0;
      for (int i : cube) {
        s[std::size_t(i)] = t;
        e[std::size_t(i)] = t += c[i];
      }
      dfs(0u, 0, 0.0, sv, 0);
    } while (!done && std::next_permutation(cube.begin(), cube.end()));
  }
};

Search search(const CvChain& chain, PreloadEdges edges, int stop_at, int initial_best) {
  const int n = check_chain(chain);
  if (n > 6) throw std::invalid_argument("preload search: n <= 6");
  const bool mirrored = sum(chain.v) > sum(chain.c);
  const CvChain ch = mirrored ? mirror_chain(chain) : chain;
  Search sr;
  sr.best = initial_best;
  sr.run(ch, edges, stop_at);
  if (mirrored && !sr.best_cycle.cube_order.empty()) sr.best_cycle = mirror_cycle(sr.best_cycle);
  return sr;
}

}  // namespace

PreloadSearch preload_search_min(const CvChain& chain, PreloadEdges edges) {
  const int n = check_chain(chain);
  const Search sr = search(chain, edges, 2 * n - 1, -1);
  return {2 * n - 1 - sr.best, sr.best_cycle};
}

bool preload_search_exists(const CvChain& chain, int max_preload, PreloadEdges edges) {
  const int n = check_chain(chain);
  const int need = 2 * n - 1 - max_preload;  // internal edges needed
  if (need <= 0) return true;                // all edges external is always stall-free
  return search(chain, edges, need, need - 1).best >= need;
}

PreloadSearch preload_search_min_brute(const CvChain& chain, PreloadEdges edges) {
  const int n = check_chain(chain);
  if (n > 4) throw std::invalid_argument("preload_search_min_brute: n <= 4");
  const int m = 2 * n - 1;
  PreloadSearch best{m + 1, {}};
  PreloadCycle cy;
  cy.cube_order.resize(std::size_t(n));
  cy.vector_order.resize(std::size_t(n));
  cy.internal.resize(std::size_t(m));
  for (int i = 0; i < n; ++i) cy.cube_order[std::size_t(i)] = i;
  do {
    for (int i = 0; i < n; ++i) cy.vector_order[std::size_t(i)] = i;
    do {
      for (unsigned mask = 0; mask < 1u << m; ++mask) {
        bool allowed = true;
        int internal = 0;
        for (int e = 0; e < m; ++e) {
          const bool on = mask >> e & 1u;
          cy.internal[std::size_t(e)] = on;
          internal += on;
          if (on && ((e % 2 == 0 && edges == PreloadEdges::kVectorToCube) ||
                     (e % 2 == 1 && edges == PreloadEdges::kCubeToVector)))
            allowed = false;
        }
        // Only schedules that could lower the minimum are simulated.
        if (!allowed || m - internal >= best.min_preload) continue;
        if (preload_cycle_stall_free(chain, cy)) best = {m - internal, cy};
      }
    } while (std::next_permutation(cy.vector_order.begin(), cy.vector_order.end()));
  } while (std::next_permutation(cy.cube_order.begin(), cy.cube_order.end()));
  return best;
}

PreloadCycle preload_amla_cycle() {
  // §4.1.3: "[C1]→[V1]→[C2]" with [V2] of duration zero; "the Preload phase issues
  // [[C1],[C1],[V1]]" = cycle 1 {C1}, cycle 2 {C1, V1}, so d(V1) = 1 and d(C2) = 2 (both
  // external); "we adopt a Preload count of 2", so C2→V2 is the internal edge.
  return {{0, 1}, {0, 1}, {false, false, true}};
}

namespace {

// U(0, 1]: 53 random bits, written out so the draws do not depend on the standard library's
// distribution code (mt19937_64's output is fixed by the standard; uniform_real_distribution
// is not).
double unit_interval(std::mt19937_64& g) { return double((g() >> 11) + 1) * 0x1p-53; }

}  // namespace

std::uint64_t preload_set_seed(std::uint64_t seed, int n, long index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ std::uint64_t(n)) ^ std::uint64_t(index));
}

CvChain preload_random_chain(int n, bool cube_dominated, std::uint64_t set_seed) {
  // C and V uniform on (0, 1]; a set on the wrong side of Σv = Σc has its C and V exchanged
  // (the same distribution, so nothing is resampled).
  std::mt19937_64 g(set_seed);
  CvChain ch;
  for (int i = 0; i < n; ++i) ch.c.push_back(unit_interval(g));
  for (int i = 0; i < n; ++i) ch.v.push_back(unit_interval(g));
  const double sc = sum(ch.c), sv = sum(ch.v);
  if (cube_dominated ? sv > sc : sv < sc) std::swap(ch.c, ch.v);
  return ch;
}

CvChain preload_adversarial_chain(int n, bool cube_dominated, std::uint64_t set_seed) {
  // Eq. 16: V_k + C_j > Σc for every j. C uniform on (0, 1], k uniform; V_k = Σc − u·min C with
  // u in (0, 1/2], the other V share a total of u'·u·min C, u' in (0, 0.9], so Σv < Σc. The
  // Vector-dominated set exchanges C and V (C_k + V_j > Σv for every j).
  std::mt19937_64 g(set_seed);
  CvChain ch;
  for (int i = 0; i < n; ++i) ch.c.push_back(unit_interval(g));
  const int k = int(g() % std::uint64_t(n));
  const double sc = sum(ch.c), cmin = *std::min_element(ch.c.begin(), ch.c.end());
  const double u = 0.5 * unit_interval(g);
  const double rest = 0.9 * unit_interval(g) * u * cmin;
  std::vector<double> w(static_cast<std::size_t>(n));
  double wsum = 0;
  for (int i = 0; i < n; ++i) wsum += w[std::size_t(i)] = i == k ? 0.0 : unit_interval(g);
  ch.v.resize(std::size_t(n));
  for (int i = 0; i < n; ++i)
    ch.v[std::size_t(i)] = i == k ? sc - u * cmin : w[std::size_t(i)] / wsum * rest;
  if (!cube_dominated) std::swap(ch.c, ch.v);
  return ch;
}

std::vector<PreloadTheoremRow> preload_theorem_check(int n_max, long sets_per_n,
                                                     std::uint64_t seed) {
  std::vector<PreloadTheoremRow> rows;
  for (int n = 1; n <= n_max; ++n) {
    long cube = 0, cons = 0, eq = 0, searched = 0, below = 0, adv = 0, adv_ok = 0;
    const bool search_n = n <= 4;
#pragma omp parallel for schedule(dynamic, 256) \
    reduction(+ : cube, cons, eq, searched, below, adv, adv_ok)
    for (long idx = 0; idx < sets_per_n; ++idx) {
      const bool cube_dominated = idx % 2 == 0;
      const std::uint64_t s = preload_set_seed(seed, n, idx);
      const CvChain ch = preload_random_chain(n, cube_dominated, s);
      cube += sum(ch.v) <= sum(ch.c);
      // Barrier model: N = n + 1 gives one steady cycle, which decides; n + 2 gives two, so the
      // period is measured as a difference of cycle ends.
      const PreloadConstruction pc = preload_construct(ch);
      const PreloadRun run = preload_simulate(ch, pc.cycle, n + 2);
      cons += run.stall_free && run.preload_count == n && run.preload_c1 == n;
      eq += preload_eq17_holds(ch, pc.k);
      if (search_n) {
        ++searched;
        below += preload_search_exists(ch, n - 1);
        const CvChain ad = preload_adversarial_chain(n, cube_dominated, splitmix64(s));
        const PreloadRun ra = preload_simulate(ad, preload_construct(ad).cycle, n + 2);
        ++adv;
        adv_ok += ra.stall_free && ra.preload_count == n && !preload_search_exists(ad, n - 1);
      }
    }
    rows.push_back({n, sets_per_n, cube, cons, eq, searched, below, adv, adv_ok});
  }
  return rows;
}

}  // namespace attnsim
