// `attnsim schedule` and `attnsim invariance`: the schedule a kernel's host code takes
// for a described launch, and whether one target sequence's output rows stay bit-identical
// between two serving situations (launches). The schedule is computed from the kernel family's
// launch heuristics (MethodSpec::schedule, written beside each preset in sim/); the attention is
// computed only when asked (ULP distances, errors against golden). No HDF5 here: the command
// line (cli/cmd_invariance.cpp) and the Python module read files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "sim/launch.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// A situation: "Q:K" sequences joined by '+' in launch order, each optionally repeated "xN"
// ("1:4096x16", "1:500+1:300x3+9:9"); the first sequence is the target, or the one of the part
// marked '*' ("1:300x3+*1:4096"), whose queries are the last Q of its first K tokens. Throws UsageError (one line) for bad text, Q < 1, Q > K or more than 2^20
// sequences.
std::vector<LaunchSeq> parse_situation(const std::string& text);
// The same as a launch: a part written "*Q:K[xN]" is the target (its first sequence; at most one
// part is marked), else the first sequence is; sms = 132.
Launch parse_launch(const std::string& text);

// `--launch SITUATION` of run / verify and attention(launch=): the launch the input's sequences
// are the first of. Sets in.launch after checking that `m` has a schedule model (a launch would
// change nothing otherwise: refused, not ignored) and that the input's batch is the launch's
// first sequences of its lengths (UsageError, one line). An empty situation leaves `in` alone.
void attach_launch(const MethodConfig& m, AttentionInput& in, const std::string& situation,
                   int sms);

// "{n}" in `text` replaced by n.
std::string substitute_n(const std::string& text, int n);
// A --range value "a..b" or "a,b,c" (integers >= 0), in order; UsageError (one line) otherwise.
std::vector<int> parse_range(const std::string& text);

// The launch-independent part of the problem: the heads, head dims and mask every sequence of the
// launch shares, the GPU's SM count.
struct InvarianceProblem {
  int heads_q = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  bool causal = false;
  int sms = 132;
  std::string dtype = "float32";  // the target data's dtype (a dump's)
};

// A problem of that many heads and head dims (head_dim_v 0: head_dim).
InvarianceProblem invariance_problem(int heads_q, int heads_kv, int head_dim, bool causal = false,
                                     int head_dim_v = 0, int sms = 132);

// The schedule `m` takes for `seqs` (launch of the problem); UsageError (one line) when the
// method has no schedule model or the launch is one its kernel cannot run.
KernelSchedule method_schedule(const MethodConfig& m, const InvarianceProblem& p,
                               const Launch& launch);

// The target sequence's tokens: `data` holds one sequence (batch 1) of len_kv tokens whose last
// len_q have queries ([1, heads, tokens, d] as a dump); a situation may use its first K tokens
// and, of those, the queries it has.
struct TargetData {
  AttentionInput data;
};

// The target's output in a situation: the method run on the target's rows of `data` with the
// schedule of the launch (O [heads_q, len_q, head_dim_v] of the target's queries).
MethodOutput run_in_situation(const MethodConfig& m, const InvarianceProblem& p,
                              const std::string& situation, const TargetData& data);

// A synthetic target long enough for every situation (the longest target's keys): `dist` of
// `--synthetic` (normal, uniform, ...) with `seed`, the problem's heads and head dims.
TargetData synthetic_target(const InvarianceProblem& p, const std::vector<std::string>& situations,
                            const std::string& dist, std::uint64_t seed);

// One output row (query head, token position) compared between the two situations.
struct InvarianceRow {
  int head = 0, position = 0;
  bool identical = true;
  std::uint64_t ulp = 0;      // max ULP distance A vs B over the row (the output format)
  double err_a = 0, err_b = 0;  // max |output − golden| over the row in A and in B
};

struct InvarianceReport {
  std::string method;       // canonical
  std::string a, b;         // the situations as given (after {n})
  KernelSchedule sched_a, sched_b;
  std::vector<std::string> differs_in;  // arithmetic schedule items that differ ("splits 14 -> 1")
  // Said in the report: a top-left causal kernel's one-query target ran without the mask.
  std::vector<std::string> notes;
  bool predicted_identical = true;
  int first_position = 0, positions = 0;  // the compared token positions: [first, first + n)
  int rows = 0;                           // positions × query heads
  // With computed outputs (--ulp):
  bool computed = false;
  std::vector<InvarianceRow> per_row;  // head-major
  int identical_rows = 0;
  std::uint64_t max_ulp = 0;
  double max_err_a = 0, max_err_b = 0;
  int first_diverging_head = -1, first_diverging_position = -1;
  bool identical() const { return computed ? identical_rows == rows : predicted_identical; }
};

// Situations A and B for `m`: their schedules, the prediction, and with `data` (non-null) the
// computed outputs of the target's common rows in each (rows whose visible keys agree).
// UsageError (one line, exit 2) for situations that cannot be compared or run.
InvarianceReport invariance(const MethodConfig& m, const InvarianceProblem& p, const std::string& a,
                            const std::string& b, const TargetData* data);

// The same over a range: "{n}" in `a` and `b` replaced by each n (a side without {n} computed
// once).
std::vector<InvarianceReport> invariance_table(const MethodConfig& m, const InvarianceProblem& p,
                                               const std::string& a, const std::string& b,
                                               const std::vector<int>& ns, const TargetData* data);

// The report as text (the schedules side by side, the prediction, the rows); `rows`: how many
// per-row lines at most.
std::string format_invariance(const InvarianceReport& r, int rows);
// One line per n of a table over a range, and the smallest n that breaks invariance.
std::string format_invariance_table(const std::vector<int>& ns,
                                    const std::vector<InvarianceReport>& rs);
// CSV: per row of one report ("head,position,identical,ulp,err_a,err_b"), or one line per n of a
// table ("n,situation_a,situation_b,schedule_a,schedule_b,differs_in,predicted_identical,rows,
// identical_rows,max_ulp,first_diverging_head,first_diverging_position,max_err_a,max_err_b").
std::string invariance_rows_csv(const InvarianceReport& r);
std::string invariance_table_csv(const std::vector<int>& ns,
                                 const std::vector<InvarianceReport>& rs);
// The schedule as text (`attnsim schedule`).
std::string format_schedule(const std::string& method, const std::string& situation,
                            const KernelSchedule& k);

}  // namespace attnsim
