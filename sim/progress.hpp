// Work counters the simulators advance as they compute (golden attention: one unit per block of
// query rows of a head), read by the command line's progress display
// (experiments/common/progress.hpp). Counting never changes a result; it costs one relaxed atomic
// add per unit, and a unit is thousands of multiply-adds or more.
#pragma once

#include <atomic>
#include <cstdint>

namespace attnsim {

struct WorkProgress {
  std::atomic<std::int64_t> planned{0};  // units announced by computations that started
  std::atomic<std::int64_t> done{0};     // units finished
};

// The process's counters.
inline WorkProgress& work_progress() {
  static WorkProgress p;
  return p;
}

// A computation about to do n units (call once, before the first work_done).
inline void work_planned(std::int64_t n) {
  work_progress().planned.fetch_add(n, std::memory_order_relaxed);
}

// n units finished.
inline void work_done(std::int64_t n = 1) {
  work_progress().done.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace attnsim
