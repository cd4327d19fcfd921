// The launch a kernel call belongs to: a serving batch's sequences, the device's SM
// count, and the schedule a kernel family's host code chooses from them. A kernel's launch
// heuristics (FA2's num_splits, FA3's, FlexAttention's SPLIT_KV, vLLM's 2D/3D choice) read the
// whole launch, so one sequence's bits can depend on its neighbours; attnsim computes a
// sequence's output under the schedule of the launch it is given (AttentionInput::launch).
#pragma once

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnsim {

// One sequence of a launch: its queries are the last len_q of its len_kv tokens (a decode step
// len_q = 1, a prefill len_q = len_kv, a chunk of a chunked prefill in between).
struct LaunchSeq {
  int len_q = 0;
  int len_kv = 0;
  bool operator==(const LaunchSeq& o) const { return len_q == o.len_q && len_kv == o.len_kv; }
};

// Every sequence of one kernel launch in launch order, the target at `target_index` (the first
// by default; the order matters to partitions that deal the launch's tiles in order, as
// LeanAttention's stream-K); the heads, head dims, dtype and mask are the input's (one per
// launch). sms: the GPU's SM count (the H100 SXM's 132).
struct Launch {
  std::vector<LaunchSeq> seqs;
  int sms = 132;
  int target_index = 0;

  int num_seqs() const { return int(seqs.size()); }
  const LaunchSeq& target() const { return seqs[std::size_t(target_index)]; }
  int max_len_q() const {
    int m = 0;
    for (const LaunchSeq& s : seqs) m = std::max(m, s.len_q);
    return m;
  }
  int max_len_kv() const {
    int m = 0;
    for (const LaunchSeq& s : seqs) m = std::max(m, s.len_kv);
    return m;
  }
  long long total_q() const {
    long long t = 0;
    for (const LaunchSeq& s : seqs) t += s.len_q;
    return t;
  }
  // Every sequence has the target's lengths: a dense [B, H, N, D] batch.
  bool dense() const {
    for (const LaunchSeq& s : seqs)
      if (!(s == seqs.front())) return false;
    return true;
  }
  // "Q:K" per sequence, runs of equal ones as "Q:KxN", joined by '+', the target marked '*'
  // unless it is the first (the situation syntax of `attnsim invariance`).
  std::string describe() const {
    std::string r;
    for (std::size_t i = 0; i < seqs.size();) {
      std::size_t j = i + 1;
      // A run never crosses the target: it starts a part of its own.
      while (j < seqs.size() && seqs[j] == seqs[i] && int(j) != target_index) ++j;
      if (!r.empty()) r += '+';
      if (int(i) == target_index && target_index != 0) r += '*';
      r += std::to_string(seqs[i].len_q) + ":" + std::to_string(seqs[i].len_kv);
      if (j - i > 1) r += "x" + std::to_string(j - i);
      i = j;
    }
    return r;
  }
};

// A launch shared by the inputs of its sequences (null on an input: the input's own batch is the
// launch, every sequence its shape).
using LaunchRef = std::shared_ptr<const Launch>;

// What a kernel's host code chooses for a launch, as `attnsim schedule` prints it: named items in
// the order the host code decides them. An item marked `arithmetic` changes the target
// sequence's arithmetic (tile sizes, the split count, the kernel); the rest (grid sizes, CTA
// counts) do not. Two launches give the target the same bits when their arithmetic items are
// equal (and the target's rows see the same keys): what `attnsim invariance` predicts.
struct ScheduleItem {
  std::string key;
  std::string value;
  bool arithmetic = true;
  std::string why;  // the host code's rule that chose it (source file / function)
};

struct KernelSchedule {
  std::string family;  // "sdpa:flash" (PyTorch's FA2), "fa3", "flex", "vllm_triton", ...
  std::string kernel;  // the kernel the launch runs, as the profiler names it (abridged)
  std::vector<ScheduleItem> items;
  // Parts of this schedule no recording verifies (each one line); empty when every part is.
  std::vector<std::string> unverified;

  // "key=value" of the arithmetic items, joined by ' ': equal strings, equal target bits.
  std::string arithmetic_key() const {
    std::string r = "kernel=" + kernel;
    for (const ScheduleItem& i : items)
      if (i.arithmetic) r += " " + i.key + "=" + i.value;
    return r;
  }
  const ScheduleItem* find(const std::string& key) const {
    for (const ScheduleItem& i : items)
      if (i.key == key) return &i;
    return nullptr;
  }
};

}  // namespace attnsim
