// `attnsim compare` and `attnsim gate`: differences between two HDF5 files tensor by tensor and
// metric by metric, and the CI numeric regression gate with per-metric tolerances.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace attnsim {

struct CompareOptions {
  double atol = 0.0;  // elements differ when |a - b| > atol + rtol * |b| (b: the second file)
  double rtol = 0.0;
  int max_report = 10;               // detail lines per dataset
  std::vector<std::string> exclude;  // dataset names (or group prefixes ending in '/') to skip
};

// Prints a report to `out`; returns the number of datasets that differ beyond the tolerance
// (including datasets present in only one file, and shape or type mismatches).
int compare_files(const std::string& a, const std::string& b, const CompareOptions& opt,
                  std::FILE* out);

// One metric's tolerance. A change passes when |new − base| ≤ abs + rel·|base|, or when `ulp` is
// set and the two values are at most `ulp` FP64 units in the last place apart. With better =
// "lower" ("higher") a change beyond tolerance in the good direction is an improvement, not a
// regression; with "none" any change beyond tolerance is a regression.
struct GateRule {
  std::string metric;
  double abs = 0.0, rel = 0.0;
  double ulp = -1.0;
  std::string better = "none";
};

struct GateRules {
  std::vector<std::string> key{"method", "input", "seed"};  // columns that identify a row
  std::vector<GateRule> rules;
};

// TOML (toml++, experiments/io/toml_reader.hpp): `key = [...]` at the top, then one [METRIC]
// table per gated metric with `abs`, `rel`, `ulp` (numbers >= 0) and `better` (a string); rules in
// file order. Syntax errors, unknown keys and wrong types are UsageErrors naming FILE:LINE:COLUMN.
GateRules read_gate_rules(const std::string& path);

struct GateResult {
  int regressions = 0;  // rows × metrics beyond tolerance in the bad direction, plus missing rows
  int improvements = 0;
  int moved_within = 0;  // changed but within tolerance
  int rows = 0;
};

// Compares results against a baseline (both sweep results files) under `rules`, printing a
// readable report of what moved to `out`.
GateResult run_gate(const std::string& baseline, const std::string& results, const GateRules& rules,
                    std::FILE* out);

}  // namespace attnsim
