// The pipeline's one vocabulary: every stage choice as a method-string key with its choices (one
// name table per enum drives the parser, the help, describe() and the CSV), the complete option
// list of a Pipeline (describe(): pasted after `flash:` it runs the same pipeline), and the
// application of options on top of a preset's pipeline (every preset accepts every stage key).
// Techniques plug their own arithmetic in as hooks with keys of their own (HookRegistry).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/pipeline/couplings.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

using OptionMap = std::map<std::string, std::string>;

// One key of the vocabulary.
struct OptionKey {
  enum Kind { kChoice, kInteger, kNumber };
  std::string key;
  std::string group;  // tiles, operands, qk, softmax, exp, p, pv, rescale, normalize, out
  Kind kind = kChoice;
  std::vector<std::string> choices;  // kChoice
  int min_int = 0;                   // kInteger: the smallest value
  std::string default_value;         // FlashAttention-2's (the spelling of Pipeline{})
  std::string help;
  // A key added after `flash:` method strings were first recorded: a method's canonical string
  // shows it only when it is set (so existing strings keep their spelling).
  bool sparse = false;
  bool hook = false;  // a hook's own key: it applies only with its hook chosen
};

// A technique's exp function as a hook: its name (the `exp=` choice), its keys, and how its
// options make one.
struct ExpHookSpec {
  std::string name;
  std::string help;
  ExpKind base = ExpKind::kExp;  // the exponential the hook evaluates
  std::vector<OptionKey> keys;
  std::function<HookRef<ExpHook>(const OptionMap& values)> make;  // values: every key of `keys`
};
// A technique's rescale as a hook (a `rescale=` choice).
struct RescaleHookSpec {
  std::string name;
  std::string help;
  std::vector<OptionKey> keys;
  std::function<HookRef<RescaleHook>(const OptionMap& values)> make;
};
// One key of a hook (a choice with its default), in the vocabulary's group of the hook's stage.
OptionKey hook_key(const char* key, const char* group, std::vector<std::string> choices,
                   const char* default_value, const char* help);

struct HookRegistry {
  std::vector<ExpHookSpec> exp;
  std::vector<RescaleHookSpec> rescale;
};

// Every key, in the vocabulary's order: first the keys of the original `flash` method (qkv p out
// acc exp fma bq bk, so existing labels stay what they were), then one group per stage, then the
// hooks' keys. Defaults are FlashAttention-2's (Pipeline{}).
std::vector<OptionKey> pipeline_keys(const HookRegistry& hooks);

// The complete, canonical option list of a pipeline: every vocabulary key with its value, and the
// chosen hooks' keys. Throws std::logic_error for a pipeline no string can spell (a float scale
// target or static scale outside the vocabulary's numbers).
OptionList pipeline_options(const Pipeline& p);

// Applies `given` (a subset of the keys, values checked against pipeline_keys) on top of `p`, in
// the vocabulary's order, with the keys' relative meanings: `qkv` sets the operands whose own key
// is not given (or says qkv), `cvt8`/`cvt16` set the cast of every site of their class whose
// `*_cvt` key is not given (or says auto), `qk_dot=acc` follows the state, `p_quant=same` is the
// symmetric quantizer of P's width. Throws std::invalid_argument with one line for a value no
// key takes or a hook key without its hook. The result is canonical() but not validated.
void apply_options(Pipeline& p, const OptionMap& given, const HookRegistry& hooks);

// The options of one stage, values resolved (no relative spellings: `q=bf16`, not `q=qkv`;
// `q_cvt=rne/inf`, not `auto`), in the vocabulary's order; irrelevant relative keys left out.
OptionList stage_options(const Pipeline& p, Stage s);

// The shortest decimal that reads back as x ("8.807", "-5000000", "-inf").
std::string number_text(double x);

}  // namespace attnsim
