// Silent-failure counters of the attention pipeline: per stage, how many saturations, overflows
// to Inf, underflows to zero, flushed subnormals, NaNs (by cause), integer wraps, vanished P
// values and technique-specific clamps the simulated kernel went through, and where the first one
// of each stage happened.
//
// How they are collected: a CounterScope names a StageCounters sink for the calls made while it
// lives; every tile workspace created meanwhile (make_workspace) gets a private StageCounters,
// attend_tile observes each stage's buffers after the stage call (counters.cpp: observe_*; the
// stage functions themselves, fast or reference, are untouched and give the same bits either
// way), and the workspace merges its counts into the sink when it is destroyed. With no scope the
// workspace holds a null pointer and attend_tile pays one branch per KV block. "First" is the
// smallest (slice, row, column) in output order, never the first in time, so the counts and the
// first events do not depend on the thread count. One process scope at a time; thread scopes
// (CounterScope::kThisThread) may live on several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace attnsim {

enum class CounterStage : int {
  kQk,        // QKᵀ accumulators (int32 product → FP32, or the float chain)
  kScores,    // dequantized, masked scores
  kSoftmax,   // the online-softmax step's exponent arguments
  kExp,       // p = exp(x), alpha
  kRescale,   // O following alpha (multiply, AMLA integer add, fp16 __hmul2, hook)
  kPCast,     // P to its encoding (FP8 satfinite, fp16/bf16, integer P, per-row/tile scale)
  kRowSum,    // l
  kPv,        // P·V into O or into a chunk
  kChunkAdd,  // the chunk onto O
  kEpilogue,  // O / l, the output cast, the LSE
  kPrepare,   // operand preparation outside the tile loop (TurboAttention's cache: buffer clamps,
              // BPQ zero-range blocks); counted by the technique code
  kCount
};

enum class CounterEvent : int {
  kSaturation,       // a value clamped to the format's max finite (satfinite, integer clamp)
  kOverflowInf,      // a finite computation gave ±Inf
  kUnderflowZero,    // a nonzero exact result rounded to zero (below half the least subnormal)
  kFlushedSubnormal, // a result in the subnormal range flushed to zero (FTZ) or by the format
  kNanZeroTimesInf,  // NaN from 0 · Inf
  kNanInfMinusInf,   // NaN from Inf − Inf (incl. a max of +Inf subtracted from itself)
  kNanZeroOverZero,  // NaN from 0 / 0 (or Inf / Inf)
  kNanPropagated,    // NaN out of a NaN in (counted where it first appears upstream too)
  kIntWrap,          // an integer accumulator outside int32 (wrap or clamp of the instruction)
  kPVanished,        // a nonzero P that the cast turned into 0
  kTurboClamp,       // TurboAttention: a value clamped by the KV buffer's / cache's integer range
  kBpqZeroRange,     // TurboAttention BPQ: a block whose min = max (scale 0)
  kAmlaAddFailure,   // AMLA: the INT32 add on O's bits differs from O · 2^N (0/subnormal O,
                     // exponent under- or overflow)
  kCount
};

inline constexpr int kCounterStages = int(CounterStage::kCount);
inline constexpr int kCounterEvents = int(CounterEvent::kCount);

const char* counter_stage_name(CounterStage s);  // "qk", "scores", ...
const char* counter_event_name(CounterEvent e);  // "saturation", "overflow_inf", ...

// Where an event happened: the query slice (batch · heads_q + head), the row (query token) and the
// column (key for [rows][keys] buffers, channel for O); ordered lexicographically.
struct CounterWhere {
  std::int64_t slice = std::numeric_limits<std::int64_t>::max();
  std::int64_t row = 0, col = 0;
  bool operator<(const CounterWhere& o) const {
    if (slice != o.slice) return slice < o.slice;
    if (row != o.row) return row < o.row;
    return col < o.col;
  }
  bool valid() const { return slice != std::numeric_limits<std::int64_t>::max(); }
};

struct StageCounters {
  std::array<std::array<std::int64_t, kCounterEvents>, kCounterStages> n{};
  std::array<CounterWhere, kCounterStages> first{};                 // per stage, any event
  std::array<CounterEvent, kCounterStages> first_event{};           // ... and its kind
  void add(CounterStage s, CounterEvent e, std::int64_t slice, std::int64_t row, std::int64_t col,
           std::int64_t count = 1) {
    n[std::size_t(s)][std::size_t(e)] += count;
    const CounterWhere w{slice, row, col};
    if (w < first[std::size_t(s)]) {
      first[std::size_t(s)] = w;
      first_event[std::size_t(s)] = e;
    }
  }
  void merge(const StageCounters& o);
  std::int64_t get(CounterStage s, CounterEvent e) const { return n[std::size_t(s)][std::size_t(e)]; }
  std::int64_t total(CounterEvent e) const;   // over the stages
  std::int64_t total() const;                 // every event
  // One line per stage with events: "pv: overflow_inf 12 (first: slice 0 row 37 col 5)".
  std::string describe() const;
  // Column names and values for results tables: cnt_<stage>_<event> for every pair, in order.
  static std::vector<std::string> column_names();
  std::vector<std::int64_t> column_values() const;
};

// The sink counters go to while a scope lives; null when counting is off. A thread's own scope
// (CounterScope::kThisThread) takes precedence over the process's.
StageCounters* counter_sink();
// Merges into the current sink (under the sinks' lock).
void counter_sink_merge(const StageCounters& c);
// Merges into `sink` (under the sinks' lock; nothing when null): what a workspace does when it is
// destroyed, into the sink that was current when it was made.
void counter_sink_merge(StageCounters* sink, const StageCounters& c);

// kProcess: every thread's calls count into `sink` (a run whose tiles go to an OpenMP team).
// kThisThread: only this thread's calls do, ahead of a process scope: one sink per sweep point
// when points run in parallel, each on one thread (the sweep sets max_active_levels 1), so a
// point's counts never mix with another's and do not depend on the thread count.
class CounterScope {
 public:
  enum Kind { kProcess, kThisThread };
  explicit CounterScope(StageCounters* sink, Kind kind = kProcess);
  ~CounterScope();
  CounterScope(const CounterScope&) = delete;
  CounterScope& operator=(const CounterScope&) = delete;

 private:
  StageCounters* prev_;
  Kind kind_;
};

}  // namespace attnsim
