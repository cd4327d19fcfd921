// The registry of attention methods and their configuration strings, e.g.
// "flash:qkv=bf16,p=bf16,acc=fp32,bq=64,bk=64", "sage2:arch=sm90,exp=exp2.exact" or "golden".
// Every pipeline method takes its own options and, on top of its preset, every stage key of the
// pipeline's vocabulary (sim/pipeline/options.hpp).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "experiments/common/error.hpp"
#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct MethodParam {
  std::string key;
  std::vector<std::string> choices;  // empty: an integer >= min_int (or a number, `number`)
  std::string default_value;         // "" for a stage override that is not set
  std::string help;
  int min_int = 1;
  bool number = false;  // any decimal number (and -inf/inf)
  // canonical() shows the option only when it differs from its default: stage overrides of a
  // preset, and keys added after a method's strings were first recorded (their spelling stays).
  bool sparse = false;
  // A key of the pipeline's vocabulary: its value is applied to the preset's pipeline. A method's
  // own option of the same name shadows it (its own choices are the method's; the vocabulary's
  // other choices are accepted and applied as the stage override).
  bool stage = false;
  bool shadows = false;                  // a method's own option with a stage key's name ...
  std::vector<std::string> own_choices = {};  // ... and its own choices (empty: an integer)
  // Free text that the method's `check` validates (no choices, no integer): e.g. turbo's
  // head_bits=42/24.
  bool text = false;
};

// What a method returns: the output tensor [batch, heads_q, len_q, head_dim_v] as the values it
// stores (already rounded to `format`), that format's name (fp64 fp32 bf16 fp16), the LSE per row
// where the method has one (natural log; empty otherwise), and the values it resolved from
// "auto"/0 options (resolved option -> value, e.g. splits=4; written with the results).
struct MethodOutput {
  std::vector<double> o;
  std::string format;
  std::vector<double> lse;
  std::map<std::string, std::string> resolved;
};

using MethodValues = std::map<std::string, std::string>;

struct MethodSpec {
  std::string name;
  std::string help;
  std::vector<MethodParam> params;  // the method's own options
  // A method that is no pipeline (golden): its whole run.
  std::function<MethodOutput(const AttentionInput&, const MethodValues&)> run;
  // Optional: rejects a combination of values the method cannot run (a UsageError naming why),
  // called by parse_method, so a bad method string fails before any computation.
  std::function<void(const MethodValues&)> check;
  // A pipeline method: its preset's pipeline for an input (presets choose tiles and formats from
  // the input's shape and dtype), before stage overrides ...
  std::function<Pipeline(const MethodValues&, const AttentionInput&)> preset;
  // ... and its run on a given pipeline: the technique's schedule (split partitions, decode over a
  // cache, input transforms) around that pipeline. `attnsim attribute` runs its counterfactual
  // pipelines through it, so what it attributes is what the method computes.
  std::function<MethodOutput(const AttentionInput&, const MethodValues&, const Pipeline&)> run_with;
  // The technique's own steps outside the pipeline for these values and input (each one line:
  // what it is and why no stage holds it); empty when the method is its pipeline.
  std::function<std::vector<std::string>(const MethodValues&, const AttentionInput&)> outside;
  // Optional: what the method computes on this input that no hardware recording verifies (each
  // one line, saying what runs instead); MethodConfig::run prints each once per process on
  // stderr, `methods --describe` lists them. Empty when every part is verified.
  std::function<std::vector<std::string>(const MethodValues&, const AttentionInput&)> notes;
  // Optional: the method's own problem options (flex:window=W,softcap=C: a sliding window, a score
  // softcap) applied to an input. MethodConfig::run and run_with compute on the result, and golden
  // measures the output against the same problem (MethodConfig::problem).
  std::function<void(const MethodValues&, AttentionInput&)> problem;
  // Optional: a split schedule's CTAs per output row (output order; the CTAs whose partial
  // results the row merges, in split order), for `attnsim verify`'s concentration table.
  std::function<std::vector<std::vector<int>>(const MethodValues&, const AttentionInput&)> row_ctas;
  // Optional: the schedule the kernel's host code chooses for the launch `in` runs in
  // (AttentionInput::launch, or its own batch; sim/launch.hpp): `attnsim schedule` and
  // `attnsim invariance`. `in` may hold no data (its shape, mask, dtype and launch only). A
  // method without it has no modelled launch-time schedule.
  std::function<KernelSchedule(const MethodValues&, const AttentionInput&)> schedule;
};

// A method with every parameter resolved (defaults filled in).
struct MethodConfig {
  const MethodSpec* spec = nullptr;
  MethodValues values;
  // "name:key=value,..." with every non-sparse key and the sparse ones that are set, in the
  // registry's order: the name a results file uses.
  std::string canonical() const;
  // Only the options that differ from their defaults: "flash:qkv=bf16,p=bf16" (for tables).
  std::string short_name() const;
  bool is_pipeline() const { return bool(spec->preset); }
  // The pipeline the method runs on an input: its preset with the stage overrides applied
  // (validated: a UsageError names what cannot be combined).
  Pipeline pipeline(const AttentionInput& in) const;
  // The stage overrides given (key -> value), applied by pipeline().
  std::map<std::string, std::string> stage_overrides() const;
  MethodOutput run(const AttentionInput& in) const;
  // The method's run with another pipeline in place of its own (attribution's counterfactuals).
  MethodOutput run_with(const AttentionInput& in, const Pipeline& p) const;
  std::vector<std::string> outside(const AttentionInput& in) const;
  std::vector<std::string> notes(const AttentionInput& in) const;
  // The causal mask's alignment the method applies (its pipeline's TileStage::causal; golden's
  // `causal` option): the golden its output is measured against uses the same.
  CausalAlign causal_align(const AttentionInput& in) const;
  // The problem the method solves on `in`: `in` with the method's own window/softcap options
  // (MethodSpec::problem), what golden must compute to measure it. `in` itself when it has none.
  bool changes_problem() const { return bool(spec->problem); }
  AttentionInput problem(const AttentionInput& in) const;
};

// golden's `causal` option as an alignment.
CausalAlign golden_causal_align(const MethodValues& values);

const std::vector<MethodSpec>& method_registry();
// Parses "name[:key=value,...]"; unknown methods, keys or values are UsageErrors that list what
// is allowed.
MethodConfig parse_method(const std::string& text);
// Splits a --methods list on commas that start a new method ("a:x=1,y=2,b" -> "a:x=1,y=2", "b").
std::vector<std::string> split_method_list(const std::string& text);

// What `attnsim methods --describe` prints for a method on an input: the canonical method string
// of the pipeline it runs (pasted back into --method it gives bit-identical output: `flash:` and
// every stage key when the method is its pipeline, else the method's own options with every stage
// key spelled out), the stages that differ from FlashAttention-2's, and the steps outside.
struct MethodDescription {
  std::string method;                  // the canonical method string of the pipeline it runs
  std::vector<std::string> differences;  // "key=value (flash: value)" per differing stage key
  std::vector<std::string> outside;      // the technique's steps outside the pipeline
  std::vector<std::string> notes;        // parts of this input no recording verifies
};
MethodDescription describe_method(const MethodConfig& m, const AttentionInput& in);

// A pipeline run as a method's output (O in the output format, the LSE).
MethodOutput pipeline_output(PipelineResult r, const Pipeline& p);

// Helpers of the preset registrations (methods_*.cpp).
// f() with a simulator's one-line refusal (std::invalid_argument) turned into a UsageError.
template <class F>
auto usage_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}
// The input's shape, or `fallback` for a preset asked about before any input (parse-time checks).
inline AttentionShape shape_or(const AttentionInput& in, const AttentionShape& fallback) {
  return in.shape.valid() ? in.shape : fallback;
}
// The batch a dense-batch kernel's launch heuristics see for `in` (its own shape, or its launch's
// sequences: sim/problem.hpp dense_launch_shape), a UsageError for a launch of mixed lengths.
inline AttentionShape launch_shape_or(const AttentionInput& in, const AttentionShape& fallback,
                                      const std::string& kernel) {
  return usage_errors(
      [&] { return dense_launch_shape(shape_or(in, fallback), in.launch.get(), kernel); });
}
// A dtype=auto|fp16|bf16 option: auto is a 16-bit dump's own dtype, else bf16 (an FP32 input is
// rounded to it, RNE).
inline Encoding dtype_option(const std::string& v, const std::string& dump_dtype) {
  if (v == "fp16") return Encoding::kFp16;
  if (v == "bf16") return Encoding::kBf16;
  return dump_dtype == "float16" ? Encoding::kFp16 : Encoding::kBf16;
}

// Registration hooks, one per simulator file (methods_*.cpp).
void register_golden_methods(std::vector<MethodSpec>& registry);
void register_flash_methods(std::vector<MethodSpec>& registry);
void register_sage_methods(std::vector<MethodSpec>& registry);
void register_amla_methods(std::vector<MethodSpec>& registry);
void register_lean_methods(std::vector<MethodSpec>& registry);
void register_turbo_methods(std::vector<MethodSpec>& registry);
void register_sdpa_methods(std::vector<MethodSpec>& registry);
void register_flex_methods(std::vector<MethodSpec>& registry);
void register_vllm_methods(std::vector<MethodSpec>& registry);

}  // namespace attnsim
