// The registry of attention methods and their configuration strings, e.g.
// "flash:qkv=bf16,p=bf16,acc=fp32,bq=64,bk=64" or "golden".
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct MethodParam {
  std::string key;
  std::vector<std::string> choices;  // empty: an integer >= min_int
  std::string default_value;
  std::string help;
  int min_int = 1;
};

// What a method returns: the output tensor [batch, heads_q, len_q, head_dim_v] as the values it
// stores (already rounded to `format`), and that format's name (fp64 fp32 bf16 fp16).
struct MethodOutput {
  std::vector<double> o;
  std::string format;
  // The values the method resolved from "auto" options for this input (key -> value, e.g.
  // splitkv's splits=0 -> the split count that ran, turbo's mode=auto -> decode), reported in
  // the output's attributes and the results' `resolved` column. (The initializer keeps
  // MethodOutput{o, format} free of -Wmissing-field-initializers.)
  std::map<std::string, std::string> resolved = {};
};

using MethodValues = std::map<std::string, std::string>;

struct MethodSpec {
  std::string name;
  std::string help;
  std::vector<MethodParam> params;
  std::function<MethodOutput(const AttentionInput&, const MethodValues&)> run;
  // Optional: rejects a combination of values the method cannot run (a UsageError naming why),
  // called by parse_method, so a bad method string fails before any computation.
  std::function<void(const MethodValues&)> check;
  // The pipeline a pipeline-based method runs on an input (sim/pipeline; presets choose tiles and
  // formats from the input's shape and dtype), for stage-level tools such as `attnsim
  // attribute`; empty for methods that are not pipelines (golden).
  std::function<Pipeline(const MethodValues&, const AttentionInput&)> pipeline;
};

// A method with every parameter resolved (defaults filled in).
struct MethodConfig {
  const MethodSpec* spec = nullptr;
  MethodValues values;
  // "name:key=value,..." with every key, in the registry's order: the name a results file uses.
  std::string canonical() const;
  // Only the options that differ from their defaults: "flash:qkv=bf16,p=bf16" (for tables).
  std::string short_name() const;
  MethodOutput run(const AttentionInput& in) const { return spec->run(in, values); }
};

const std::vector<MethodSpec>& method_registry();
// Parses "name[:key=value,...]"; unknown methods, keys or values are UsageErrors that list what
// is allowed.
MethodConfig parse_method(const std::string& text);
// Splits a --methods list on commas that start a new method ("a:x=1,y=2,b" -> "a:x=1,y=2", "b").
std::vector<std::string> split_method_list(const std::string& text);

// Registration hooks, one per simulator file (methods_*.cpp).
void register_golden_methods(std::vector<MethodSpec>& registry);
void register_flash_methods(std::vector<MethodSpec>& registry);
void register_sage_methods(std::vector<MethodSpec>& registry);
void register_amla_methods(std::vector<MethodSpec>& registry);
void register_lean_methods(std::vector<MethodSpec>& registry);
void register_turbo_methods(std::vector<MethodSpec>& registry);

}  // namespace attnsim
