// The silent-failure counters' bookkeeping: names, merging, the process's sink (counters.hpp).
#include "sim/pipeline/counters.hpp"

#include <atomic>
#include <cstdio>

namespace attnsim {

namespace {
constexpr const char* kStageNames[kCounterStages] = {"qk",  "scores",   "softmax",   "exp",
                                                     "rescale", "p_cast", "row_sum", "pv",
                                                     "chunk_add", "epilogue", "prepare"};
constexpr const char* kEventNames[kCounterEvents] = {
    "saturation",   "overflow_inf", "underflow_zero", "flushed_subnormal", "nan_0xinf",
    "nan_inf-inf",  "nan_0/0",      "nan_propagated", "int_wrap",          "p_vanished",
    "turbo_clamp",  "bpq_zero_range", "amla_add_failure"};

std::atomic<StageCounters*> g_sink{nullptr};
std::mutex g_sink_mutex;
thread_local StageCounters* t_sink = nullptr;
}  // namespace

const char* counter_stage_name(CounterStage s) { return kStageNames[int(s)]; }
const char* counter_event_name(CounterEvent e) { return kEventNames[int(e)]; }

void StageCounters::merge(const StageCounters& o) {
  for (int s = 0; s < kCounterStages; ++s) {
    for (int e = 0; e < kCounterEvents; ++e) n[std::size_t(s)][std::size_t(e)] += o.n[std::size_t(s)][std::size_t(e)];
    if (o.first[std::size_t(s)] < first[std::size_t(s)]) {
      first[std::size_t(s)] = o.first[std::size_t(s)];
      first_event[std::size_t(s)] = o.first_event[std::size_t(s)];
    }
  }
}

std::int64_t StageCounters::total(CounterEvent e) const {
  std::int64_t t = 0;
  for (int s = 0; s < kCounterStages; ++s) t += n[std::size_t(s)][std::size_t(e)];
  return t;
}

std::int64_t StageCounters::total() const {
  std::int64_t t = 0;
  for (int e = 0; e < kCounterEvents; ++e) t += total(CounterEvent(e));
  return t;
}

std::string StageCounters::describe() const {
  std::string out;
  char buf[160];
  for (int s = 0; s < kCounterStages; ++s) {
    std::string line;
    for (int e = 0; e < kCounterEvents; ++e) {
      const std::int64_t c = n[std::size_t(s)][std::size_t(e)];
      if (c == 0) continue;
      std::snprintf(buf, sizeof buf, "%s%s %lld", line.empty() ? "" : ", ", kEventNames[e],
                    (long long)c);
      line += buf;
    }
    if (line.empty()) continue;
    const CounterWhere& w = first[std::size_t(s)];
    std::snprintf(buf, sizeof buf, " (first: %s at slice %lld row %lld col %lld)",
                  kEventNames[int(first_event[std::size_t(s)])], (long long)w.slice,
                  (long long)w.row, (long long)w.col);
    out += std::string("  ") + kStageNames[s] + ": " + line + buf + "\n";
  }
  if (out.empty()) out = "  no events\n";
  return out;
}

std::vector<std::string> StageCounters::column_names() {
  std::vector<std::string> c;
  for (int s = 0; s < kCounterStages; ++s)
    for (int e = 0; e < kCounterEvents; ++e) {
      std::string name = std::string("cnt_") + kStageNames[s] + "_" + kEventNames[e];
      for (char& ch : name)
        if (ch == '-' || ch == '/') ch = ch == '-' ? 'm' : 'd';
      c.push_back(name);
    }
  return c;
}

std::vector<std::int64_t> StageCounters::column_values() const {
  std::vector<std::int64_t> v;
  for (int s = 0; s < kCounterStages; ++s)
    for (int e = 0; e < kCounterEvents; ++e) v.push_back(n[std::size_t(s)][std::size_t(e)]);
  return v;
}

StageCounters* counter_sink() {
  if (t_sink) return t_sink;
  return g_sink.load(std::memory_order_acquire);
}

void counter_sink_merge(StageCounters* sink, const StageCounters& c) {
  if (!sink) return;
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  sink->merge(c);
}

void counter_sink_merge(const StageCounters& c) { counter_sink_merge(counter_sink(), c); }

CounterScope::CounterScope(StageCounters* sink, Kind kind)
    : prev_(kind == kThisThread ? t_sink : g_sink.exchange(sink)), kind_(kind) {
  if (kind == kThisThread) t_sink = sink;
}
CounterScope::~CounterScope() {
  if (kind_ == kThisThread)
    t_sink = prev_;
  else
    g_sink.store(prev_);
}

}  // namespace attnsim
