// `attnsim schedule` (the schedule a kernel's host code takes for a described launch) and
// `attnsim invariance` (whether one target sequence's rows stay bit-identical between two
// launches), experiments/analysis/invariance.hpp. Exit codes of invariance: 0 every compared row
// bit-identical, 1 some row differs (predicted, or computed with --ulp), 2 bad input.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/varlen.hpp"

namespace attnsim {

namespace {

struct LaunchCliOptions {
  std::string method, heads, input, group, csv, range, dist = "normal";
  int head_dim = 0, head_dim_v = 0, sms = 132, seq = 0, rows = 10;
  unsigned long long seed = 0;
  bool causal = false, ulp = false, quiet = false, seed_given = false, dist_given = false;
  std::vector<std::string> situations;
};

void add_problem_options(CLI::App* cmd, LaunchCliOptions* o) {
  cmd->add_option("--method", o->method,
                  "the kernel: a method with a launch-time schedule model (sdpa, fa3, flex, "
                  "vllm_triton, lean, splitkv; its options as in `attnsim run`)")
      ->required();
  cmd->add_option("--heads", o->heads,
                  "query heads / KV heads of every sequence (\"32/8\"; \"16\" = 16/16); with "
                  "--input: the dump's");
  cmd->add_option("--head-dim", o->head_dim, "head dim (with --input: the dump's)");
  cmd->add_option("--head-dim-v", o->head_dim_v, "V's head dim (default: --head-dim)");
  cmd->add_flag("--causal", o->causal,
                "causal mask on prefill rows (a one-query decode row sees its whole cache)");
  cmd->add_option("--sms", o->sms, "the GPU's SM count (the H100 SXM's 132)")->default_val(132);
}

InvarianceProblem problem_of(const LaunchCliOptions& o, const AttentionInput* data) {
  InvarianceProblem p;
  p.causal = o.causal;
  p.sms = o.sms;
  if (o.sms < 1) throw UsageError("--sms must be >= 1");
  if (data) {
    const AttentionShape& s = data->shape;
    p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.head_dim = s.head_dim,
    p.head_dim_v = s.head_dim_v, p.dtype = data->dtype;
    p.causal = o.causal || data->causal;
    if (!o.heads.empty() || o.head_dim != 0 || o.head_dim_v != 0)
      throw UsageError("--heads/--head-dim come from --input: drop them");
    return p;
  }
  if (o.heads.empty() || o.head_dim <= 0)
    throw UsageError("give --heads HQ/HKV and --head-dim D (or --input with the target's tokens)");
  const std::size_t slash = o.heads.find('/');
  try {
    std::size_t used = 0;
    p.heads_q = std::stoi(o.heads.substr(0, slash), &used);
    if (used != (slash == std::string::npos ? o.heads.size() : slash)) throw std::exception();
    p.heads_kv = p.heads_q;
    if (slash != std::string::npos) {
      const std::string kv = o.heads.substr(slash + 1);
      p.heads_kv = std::stoi(kv, &used);
      if (used != kv.size()) throw std::exception();
    }
  } catch (const std::exception&) {
    throw UsageError("--heads '" + o.heads + "' is not HQ or HQ/HKV");
  }
  if (p.heads_q <= 0 || p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    throw UsageError("--heads " + o.heads + ": both positive, HQ a multiple of HKV");
  p.head_dim = o.head_dim;
  p.head_dim_v = o.head_dim_v > 0 ? o.head_dim_v : o.head_dim;
  return p;
}

void run_schedule(const LaunchCliOptions& o) {
  const MethodConfig m = parse_method(o.method);
  const InvarianceProblem p = problem_of(o, nullptr);
  if (o.situations.size() != 1)
    throw UsageError("schedule takes one situation (sequences Q:K joined by '+', target first)");
  const KernelSchedule k = method_schedule(m, p, parse_launch(o.situations[0]));
  std::fputs(format_schedule(m.canonical(), o.situations[0], k).c_str(), stdout);
}

// The target's tokens: a dump's sequence, or a synthetic one long enough for every situation.
AttentionInput target_data(const LaunchCliOptions& o, const std::vector<std::string>& situations) {
  if (!o.input.empty()) {
    const std::vector<std::string> prefixes = select_dump_prefixes(o.input, o.group);
    if (prefixes.size() != 1)
      throw UsageError("'" + o.input + "' has " + std::to_string(prefixes.size()) +
                       " layer groups: name one with --group");
    AttentionInput all = read_attention_dump(o.input, prefixes[0], false);
    // A varlen dump: --seq picks a packed sequence (its tokens; the situations give the launch).
    const std::vector<LaunchSeq> seqs = dump_varlen(o.input, prefixes[0]);
    if (!seqs.empty()) {
      if (o.seq < 0 || o.seq >= int(seqs.size()))
        throw UsageError("--seq " + std::to_string(o.seq) + ": the varlen dump has " +
                         std::to_string(seqs.size()) + " sequence(s)");
      AttentionInput t = varlen_sequence(all, seqs, o.seq, o.sms);
      t.launch.reset();
      return t;
    }
    const AttentionShape s = all.shape;
    if (o.seq < 0 || o.seq >= s.batch)
      throw UsageError("--seq " + std::to_string(o.seq) + ": the dump has " +
                       std::to_string(s.batch) + " sequence(s)");
    AttentionInput t = all;
    t.shape.batch = 1;
    const std::size_t nq = std::size_t(s.heads_q) * s.len_q * s.head_dim;
    const std::size_t nk = std::size_t(s.heads_kv) * s.len_kv * s.head_dim;
    const std::size_t nv = std::size_t(s.heads_kv) * s.len_kv * s.head_dim_v;
    t.q.assign(all.q.begin() + o.seq * nq, all.q.begin() + (o.seq + 1) * nq);
    t.k.assign(all.k.begin() + o.seq * nk, all.k.begin() + (o.seq + 1) * nk);
    t.v.assign(all.v.begin() + o.seq * nv, all.v.begin() + (o.seq + 1) * nv);
    return t;
  }
  return synthetic_target(problem_of(o, nullptr), situations, o.dist, o.seed).data;
}

void run_invariance(const LaunchCliOptions& o) {
  const MethodConfig m = parse_method(o.method);
  if (o.situations.size() != 2)
    throw UsageError("invariance takes two situations A and B (sequences Q:K joined by '+', "
                     "the target first; \"{n}\" with --range)");
  if (!o.csv.empty()) check_output_path(o.csv, {o.input});
  if (!o.input.empty()) check_input_file(o.input);
  if (o.rows < 0) throw UsageError("--rows must be >= 0");
  const bool table = !o.range.empty();
  std::vector<int> ns{0};
  if (table) {
    ns = parse_range(o.range);
    if (o.situations[0].find("{n}") == std::string::npos &&
        o.situations[1].find("{n}") == std::string::npos)
      throw UsageError("--range needs \"{n}\" in situation A or B");
  } else if (o.situations[0].find("{n}") != std::string::npos ||
             o.situations[1].find("{n}") != std::string::npos) {
    throw UsageError("\"{n}\" in a situation needs --range");
  }
  // Every situation is parsed (and refused) before anything is computed.
  std::vector<std::string> all;
  for (int n : ns)
    for (const std::string& s : o.situations) {
      all.push_back(substitute_n(s, n));
      (void)parse_situation(all.back());
    }
  const bool need_data = o.ulp || !o.input.empty();
  if ((o.seed_given || o.dist_given) && (!o.ulp || !o.input.empty()))
    throw UsageError(std::string(o.seed_given ? "--seed" : "--dist") +
                     " shapes the synthetic target, which only --ulp without --input computes");
  AttentionInput data_in;
  if (need_data) data_in = target_data(o, all);
  const InvarianceProblem p = problem_of(o, need_data && !o.input.empty() ? &data_in : nullptr);
  TargetData data{data_in};
  const TargetData* dp = need_data ? &data : nullptr;
  bool identical = true;
  std::string csv;
  if (table) {
    const std::vector<InvarianceReport> rs =
        invariance_table(m, p, o.situations[0], o.situations[1], ns, dp);
    for (const InvarianceReport& r : rs) identical = identical && r.identical();
    if (!o.quiet) std::fputs(format_invariance_table(ns, rs).c_str(), stdout);
    csv = invariance_table_csv(ns, rs);
  } else {
    const InvarianceReport r = invariance(m, p, o.situations[0], o.situations[1], dp);
    identical = r.identical();
    if (!o.quiet) std::fputs(format_invariance(r, o.rows).c_str(), stdout);
    csv = r.computed ? invariance_rows_csv(r) : invariance_table_csv(ns, {r});
  }
  if (!o.csv.empty()) write_file_atomic(o.csv, csv.data(), csv.size());
  if (!identical)
    throw UsageError("invariance: the target's bits differ between the situations", 1);
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto opt = std::make_shared<LaunchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "schedule",
      "Print the schedule a kernel's host code takes for a launch (tiles, splits, 2D/3D path, "
      "combine), each choice with the rule that made it");
  add_problem_options(cmd, opt.get());
  cmd->add_option("situation", opt->situations,
                  "the launch: sequences Q:K (the last Q of K tokens have queries) joined by '+', "
                  "each optionally repeated xN; the first is the target (\"1:4096x16\", "
                  "\"1:500+1:300x3+9:9\")")
      ->required();
  cmd->callback([opt]() { run_schedule(*opt); });
}

void add_invariance_command(CLI::App& app) {
  auto opt = std::make_shared<LaunchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "invariance",
      "Whether a target sequence's rows keep their bits between two launches (situations A and "
      "B): the schedules, the predicted answer, and with --ulp the computed rows (exit 0 "
      "bit-identical, 1 different)");
  add_problem_options(cmd, opt.get());
  cmd->add_option("situations", opt->situations,
                  "situations A and B (as `attnsim schedule` takes one; \"{n}\" with --range)")
      ->expected(2)
      ->required();
  cmd->add_option("--range", opt->range,
                  "a table over n: \"a..b\" or \"a,b,c\", substituted for {n} in A and B")
      ->check(non_empty());
  cmd->add_flag("--ulp", opt->ulp,
                "compute the target in both situations: per-row bit identity, ULP distance and "
                "error against FP64 golden (default: the schedules only)");
  cmd->add_option("--input", opt->input,
                  "HDF5 dump whose sequence --seq holds the target's tokens (implies --ulp)")
      ->check(non_empty());
  cmd->add_option("--group", opt->group, "the dump's layer group")->check(non_empty());
  cmd->add_option("--seq", opt->seq, "the dump's sequence (batch index) that is the target")
      ->default_val(0);
  CLI::Option* seed = cmd->add_option("--seed", opt->seed,
                                      "synthetic target's seed (--ulp without --input)")
                           ->default_val(0);
  CLI::Option* dist = cmd->add_option("--dist", opt->dist,
                                      "synthetic target's distribution (`--synthetic` of run: "
                                      "normal, uniform, kbias, outlier, peaked)")
                           ->default_val("normal");
  cmd->add_option("--csv", opt->csv,
                  "write CSV (atomic): per row with --ulp, else per n of the table")
      ->check(output_name());
  cmd->add_option("--rows", opt->rows, "differing rows printed at most")->default_val(10);
  cmd->add_flag("--quiet", opt->quiet, "print nothing but errors (the exit code answers)");
  cmd->callback([opt, seed, dist]() {
    opt->seed_given = seed->count() > 0;
    opt->dist_given = dist->count() > 0;
    run_invariance(*opt);
  });
}

}  // namespace attnsim
