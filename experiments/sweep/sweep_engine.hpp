// The sweep engine shared by `attnsim sweep`, `attnsim repro` and `attnsim bench`: the point list
// (methods after --grid expansion × inputs × seeds), its parallel evaluation over OpenMP threads
// and MPI ranks, and the checkpoint that makes interrupted sweeps resumable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "experiments/sweep/sweep_metrics.hpp"

namespace attnsim {

// One input of a sweep: a dump (file and layer group) or a synthetic spec at one seed.
struct SweepCase {
  std::string name;  // file[:group] or synthetic:SPEC
  std::string kind;  // dump | synthetic
  std::string file, prefix, spec;
  std::uint64_t seed = 0;
  // A varlen dump's sequence (experiments/io/varlen.hpp): its index, run inside the launch of
  // every sequence of the dump; -1 for a dense input.
  int seq = -1;
};

// --grid KEY=V1,V2,...: every method that has KEY is run at each value.
struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};
GridAxis parse_grid_axis(const std::string& text);
// The cartesian product of the axes a method has (first axis outermost), applied to every
// method in order; duplicates (same canonical string) are dropped. An axis no method has is a
// UsageError.
std::vector<MethodConfig> expand_grid(const std::vector<MethodConfig>& methods,
                                      const std::vector<GridAxis>& grid);

// Points are numbered case-major: point i runs method i % methods.size() on case
// i / methods.size(). The numbering, not the schedule, fixes a row's place in the results.
struct SweepPlan {
  std::vector<MethodConfig> methods;
  std::vector<SweepCase> cases;
  std::int64_t points() const { return std::int64_t(cases.size() * methods.size()); }
  // Identifies the point list (a checkpoint of another sweep is refused).
  std::string fingerprint() const;
};

SweepPlan make_plan(const std::vector<std::string>& method_lists,
                    const std::vector<std::string>& grid, const std::vector<std::string>& dumps,
                    const std::vector<std::string>& synthetic, int seeds);

// Refuses (check_memory, experiments/common/memory_limit.hpp) a plan whose evaluation would not
// fit: the plan's dump cases plus `seeds` seeds of each synthetic spec, which make_plan calls
// before creating the synthetic cases.
void check_plan_memory(const SweepPlan& plan, const std::vector<std::string>& synthetic,
                       int seeds);

struct SweepRunOptions {
  bool allow_nonfinite = false;
  bool progress = false;  // progress line on stderr (rank 0; experiments/common/progress.hpp)
  // A point whose method refuses its input (a UsageError from the method: a shape or head_dim
  // its kernel does not take) becomes a row with `skipped` set and NaN metrics, instead of
  // ending the sweep.
  bool skip_unsupported = false;
  std::string checkpoint_base;   // "" for none; else checkpoints are CHECKPOINT_BASE.ckpt.<rank>
  bool resume = false;           // reuse the rows of existing checkpoints
  std::int64_t max_points = -1;  // stop after computing this many points on each rank (then resume)
  // Each computed point's silent-failure counters (PointRow::counters): counted under a scope of
  // the point's own thread (CounterScope::kThisThread) when points share the threads, a process
  // scope when a point runs alone; independent of the thread count.
  bool counters = false;
};

struct SweepOutcome {
  ResultTable table;          // every row, in point order, on rank 0 when complete
  bool complete = false;      // false when max_points stopped a rank
  std::int64_t computed = 0;  // points computed by this rank in this run
  std::int64_t restored = 0;  // points this rank took from checkpoints
  double seconds = 0;         // wall time of the evaluation and the gather
};

// Evaluates the plan. Results do not depend on the OpenMP thread count, the number of MPI ranks
// (point i runs on rank i % ranks; rank 0 gathers) or the order points finish in.
SweepOutcome run_plan(const SweepPlan& plan, const SweepRunOptions& opt);

// Removes the checkpoint files of CHECKPOINT_BASE (after the results file is in place).
void remove_checkpoints(const std::string& checkpoint_base);
std::vector<std::string> checkpoint_files(const std::string& checkpoint_base);

}  // namespace attnsim
