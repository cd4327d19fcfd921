// AMLA's Preload pipeline (paper §4.1, Appendix B) as a scheduler simulator of a Cube/Vector chain.
//
// Model (the paper's, made explicit; `sim/amla/preload.cpp` cites the line behind each step):
//  - A chain of n CV pairs [C1]→[V1]→[C2]→…→[Cn]→[Vn] with durations c[i], v[i] ≥ 0. Chain
//    positions p = 0..2n−1: p = 2i is C_{i+1}, p = 2i+1 is V_{i+1} (0-based i). Edge e = 0..2n−2
//    is X_e → X_{e+1}: e = 2i is C_{i+1}→V_{i+1}, e = 2i+1 is V_{i+1}→C_{i+2}.
//  - Cube stages run on one Cube unit, Vector stages on one Vector unit, one stage at a time.
//    Iterations τ = 1..N (AMLA: KV blocks) each run the whole chain; iteration τ+1 depends on τ
//    only through the unit order (§4.1.1: the steady loop of independent blocks).
//  - A Cycle (the steady-loop body, §4.1.1) holds every stage once: a cube order, a vector order
//    and per edge a flag "internal". Offsets follow: d(C1) = 0, d(Y) = d(X) for an internal edge
//    X→Y (Y waits for X inside the cycle), d(Y) = d(X)+1 for an external one (X ran a cycle
//    earlier). In cycle t stage X works on iteration t − d(X).
//  - Preload count = d(Vn) = number of external edges = (2n−1) − s, s = internal edges (Lemma B.1).
//    The paper's definition (§4.1.2: "the number of [C1] stages executed in the Preload phase")
//    is the same number: d is nondecreasing along the chain, so the cycles that skip a stage of an
//    iteration < 1 are t = 1..d(Vn), and each of them runs C1 (d(C1) = 0). preload_simulate counts
//    those C1 stages (PreloadRun::preload_c1) so the tests check the identity.
//  - The schedule for N iterations: cycles t = 1..N+P (P = preload count). Cycles 1..P are the
//    Preload phase (stages of iterations < 1 skipped), P+1..N the steady loop, N+1..N+P the drain
//    (stages of iterations > N skipped). Each unit runs its stages in cycle order, then in the
//    cycle's order; a stage starts at max(its unit's previous end, its chain predecessor's end in
//    the same iteration) (list scheduling), and under CycleSync::kBarrier also not before every
//    stage of the previous cycle has ended.
//  - Stall-free: T* = max(Σc, Σv) (Cube-dominated Σv ≤ Σc: T* = Σc; Vector-dominated: Σv). The
//    steady loop is stall-free when the dominant unit never idles in the steady cycles.
//
// Which notion of a Cycle the paper's theorems need. Appendix B.2 argues "all Vector stages must
// be overlapped by the cumulative Cube execution (to avoid extending the Cycle)": every stage of a
// cycle runs inside that cycle's window of length T*. That is CycleSync::kBarrier (the default):
// a cycle starts when the previous one has fully ended, so every steady cycle is the same and
// lasts the barrier-model cycle time (preload_cycle_time); stall-free means it equals T*. Theorem
// 4.1 (both parts) holds in this model, and the tests check it. CycleSync::kFree lets stages of
// consecutive cycles overlap (only unit order and the chain bind them). There a vector stage may
// spill into the next cycle, and part 1 of Theorem 4.1 fails (n = 1: cycle [C1 | V1] with C1→V1
// internal, Preload count 0, keeps the Cube busy for any v1 ≤ c1); preload_test.cpp shows it.
//
// Construction (Theorem B.1, Eq. 17-23), read so that Eq. 17, Eq. 20, the n = 3 example and the
// proof agree: the n−1 internal edges are C_i→V_i for every i ≠ f (V_i consumes C_i in the same
// cycle); the free vector stage V_f runs first, vector order V_f, V_{f+1}, …, V_{f−1}, cube order
// C_{f+1}, …, C_f (indices cyclic in 1..n). Eq. 17's k is k = n + 1 − f. See preload.cpp for the
// derivation and for the places where the paper's wording disagrees ("[V]→[C]", m = n−k vs m = k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// The chain's stage durations: c[i] of C_{i+1}, v[i] of V_{i+1}; equal sizes n ≥ 1, values ≥ 0.
struct CvChain {
  std::vector<double> c;
  std::vector<double> v;
};

// One Cycle: cube_order / vector_order are permutations of 0..n−1 (index i names C_{i+1} /
// V_{i+1}); internal[e] for the 2n−1 chain edges (numbering in the file comment).
struct PreloadCycle {
  std::vector<int> cube_order;
  std::vector<int> vector_order;
  std::vector<bool> internal;
};

//  kBarrier  a cycle's stages start only after every stage of the previous cycle has ended: the
//            paper's Cycle (Appendix B.2, "to avoid extending the Cycle"); Theorem 4.1 holds.
//  kFree     consecutive cycles overlap; only unit order and chain predecessors bind a stage.
enum class CycleSync : std::uint8_t { kBarrier, kFree };

enum class PreloadPhase : std::uint8_t { kPreload, kSteady, kDrain };

// One executed stage.
struct PreloadStageRun {
  int cycle;      // t = 1..N+P
  int iteration;  // τ = t − d(X), 1..N
  int position;   // chain position p (C_{p/2+1} when p is even, V_{(p+1)/2} when odd)
  PreloadPhase phase;
  double start;
  double end;
};

struct PreloadRun {
  int n = 0;
  int iterations = 0;     // N
  int preload_count = 0;  // d(Vn) = external edges (Lemma B.1)
  int preload_c1 = 0;     // C1 stages run in the Preload phase (§4.1.2's definition; = d(Vn))
  bool deadlock = false;  // the cycle's internal edges and unit orders wait on each other
  double cube_sum = 0;    // Σc
  double vector_sum = 0;  // Σv
  double makespan = 0;    // +inf on deadlock
  // Steady cycle time: mean distance between the ends of consecutive steady cycles over the
  // second half of the steady loop, a cycle's end being its dominant unit's last end; with one
  // steady cycle, that cycle's length from its start (its last stage's end).
  double period = 0;
  double steady_idle = 0;   // time the dominant unit idles in the steady cycles
  bool stall_free = false;  // steady_idle is zero (up to the rounding tolerance, preload.cpp)
  std::vector<PreloadStageRun> timeline;  // cube stages in unit order, then vector stages
};

// Offsets d(X) of the 2n chain positions (file comment); the cycle's shape is checked.
std::vector<int> preload_offsets(const PreloadCycle& cycle);
// d(Vn) = external edges = (2n−1) − internal edges (Lemma B.1).
int preload_count(const PreloadCycle& cycle);

// The schedule for `iterations` = N ≥ P + 1 iterations (at least one steady cycle), simulated.
// Throws std::invalid_argument on a malformed chain or cycle. Under kBarrier every steady cycle is
// the same, so N = P + 1 decides stall-freedom and N = P + 2 measures the period as a difference;
// kFree needs more steady cycles to pass the warm-up (a preload cycle's spill can stall the first
// steady ones).
PreloadRun preload_simulate(const CvChain& chain, const PreloadCycle& cycle, int iterations,
                            CycleSync sync = CycleSync::kBarrier);

// Barrier-model length of one steady cycle: every stage of the cycle listed once, external
// predecessors finished at the cycle's start, internal ones waited for. +inf on deadlock.
double preload_cycle_time(const CvChain& chain, const PreloadCycle& cycle);
// Whether a barrier-model cycle time is the stall-free max(Σc, Σv) (same tolerance as the run).
bool preload_cycle_stall_free(const CvChain& chain, const PreloadCycle& cycle);

// "cycle 3 steady   C2 it 1  cube    [1, 2)" lines, by start time, for printing.
std::string preload_timeline_text(const PreloadRun& run);

// The rotation schedule of Eq. 17's index k (1..n): f = n + 1 − k; internal C_i→V_i for i ≠ f,
// vector order V_f, V_{f+1}, …, cube order C_{f+1}, …, C_f. n = 3, k = 1 is the paper's
// permutation [C1][C2][C3] with [C1]→[V1], [C2]→[V2] enabled (Appendix B.3).
PreloadCycle preload_rotation_cycle(int n, int k);

// The analytic condition for Eq. 17's k. Σv ≤ Σc: Eq. 17 as printed,
//   Σ_{i=0}^{j−1} V_{n−k−i} ≤ Σ_{i=0}^{j−1} C_{n+1−k−i},  j = 1..n−1, indices cyclic in 1..n.
// Σv > Σc ("reverse roles", Appendix B.2/B.4.3): Eq. 17 on the mirrored chain C'_i = V_{n+1−i},
// V'_i = C_{n+1−i} at k' = n + 1 − k, which reads Σ_{i=0}^{j−1} C_{f+1+i} ≤ Σ_{i=0}^{j−1} V_{f+i}.
// For either case it is exactly the condition for preload_rotation_cycle(n, k) to be stall-free.
bool preload_eq17_holds(const CvChain& chain, int k);

// Theorem B.1's construction for a chain.
struct PreloadConstruction {
  bool cube_dominated = true;  // Σv ≤ Σc
  std::vector<double> a;       // a_i = V_i − C_{i+1}, C_{n+1} ≡ C_1 (Eq. 18), a[i−1] = a_i
  std::vector<double> f;       // F(l) = a_1 + … + a_l, l = 0..n (B.4.2)
  // The minimising l (smallest on ties): over 1..n when Σv ≤ Σc (B.4.2), over 0..n−1 otherwise.
  int l_min = 0;
  int free_vector = 1;  // f = (l_min mod n) + 1: V_f is the one vector stage with an external input
  int k = 1;            // Eq. 17's k = n + 1 − f
  PreloadCycle cycle;   // preload_rotation_cycle(n, k): Preload count n
};
PreloadConstruction preload_construct(const CvChain& chain);

// Which edges an exhaustive search may make internal: all, only C_i→V_i, only V_i→C_{i+1}.
enum class PreloadEdges : std::uint8_t { kAll, kCubeToVector, kVectorToCube };

struct PreloadSearch {
  int min_preload = 0;  // fewest external edges of a stall-free barrier-model cycle
  PreloadCycle cycle;   // one cycle that achieves it
};
// Exhaustive minimum over all cube orders, vector orders and internal-edge sets (n ≤ 6): a branch
// and bound that fixes the cube order, places the vector stages one by one and gives each its
// internal edges where the windows allow (preload.cpp); Σv > Σc goes through the mirrored chain.
PreloadSearch preload_search_min(const CvChain& chain, PreloadEdges edges = PreloadEdges::kAll);
// Whether a stall-free cycle with Preload count ≤ max_preload exists (the same search, stopping
// at the first one).
bool preload_search_exists(const CvChain& chain, int max_preload,
                           PreloadEdges edges = PreloadEdges::kAll);
// The literal search (n ≤ 4): every (cube order, vector order, edge set) through
// preload_cycle_time. The independent check of preload_search_min.
PreloadSearch preload_search_min_brute(const CvChain& chain,
                                       PreloadEdges edges = PreloadEdges::kAll);

// AMLA's own cycle (§4.1.3, Fig. 7): n = 2, cube order [C1, C2], vector order [V1, V2], the only
// internal edge C2→V2 (V2 has duration 0 in AMLA, so the paper says "no intra-Cycle
// dependencies"); Preload count 2, Preload phase [[C1], [C1, V1]].
PreloadCycle preload_amla_cycle();

// Random and adversarial chains of preload_theorem_check (preload.cpp documents the draws).
CvChain preload_random_chain(int n, bool cube_dominated, std::uint64_t set_seed);
CvChain preload_adversarial_chain(int n, bool cube_dominated, std::uint64_t set_seed);
// The seed of set `index` of size n: splitmix64 over (seed, n, index), so a set does not depend on
// the thread count or on the other sets.
std::uint64_t preload_set_seed(std::uint64_t seed, int n, long index);

struct PreloadTheoremRow {
  int n = 0;
  long sets = 0;               // random sets (even index Σv ≤ Σc, odd index Σv ≥ Σc)
  long cube_dominated = 0;     // of which Σv ≤ Σc
  long construction_ok = 0;    // construction stall-free with Preload count n (must equal sets)
  long eq17_ok = 0;            // Eq. 17 held for the chosen k (must equal sets)
  long searched = 0;           // n ≤ 4: random sets searched exhaustively
  long below_n = 0;            // of which a stall-free cycle with Preload count < n exists
  long adversarial = 0;        // n ≤ 4: Eq. 16 sets (and their Vector-dominated mirror images)
  long adversarial_min_n = 0;  // of which the exhaustive minimum is n (must equal adversarial)
};
// Theorem 4.1 on random sets, n = 1..n_max, sets_per_n each (OpenMP over sets; every set has its
// own seed preload_set_seed(seed, n, index), so the rows do not depend on the thread count).
std::vector<PreloadTheoremRow> preload_theorem_check(int n_max, long sets_per_n,
                                                     std::uint64_t seed);

}  // namespace attnsim
