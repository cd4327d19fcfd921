// The registry of attention methods and their configuration strings.
#include "experiments/methods/methods.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <limits>
#include <stdexcept>

#include "experiments/common/error.hpp"
#include "experiments/common/warning.hpp"
#include "experiments/common/names.hpp"
#include "sim/hooks.hpp"
#include "sim/pipeline/options.hpp"

namespace attnsim {

namespace {

// Every pipeline method takes the vocabulary's stage keys (sim/pipeline/options.hpp): flash with
// FlashAttention-2's values as defaults (it is the vocabulary), the presets as overrides that are
// unset by default. A method's own option of the same name shadows the stage key.
void add_stage_params(MethodSpec& m) {
  const bool flash = m.name == "flash";
  for (const OptionKey& k : pipeline_keys(technique_hooks())) {
    auto own = std::find_if(m.params.begin(), m.params.end(),
                            [&](const MethodParam& p) { return p.key == k.key; });
    if (own != m.params.end()) {
      own->stage = true;
      own->shadows = true;
      own->own_choices = own->choices;
      if (!own->choices.empty())
        for (const std::string& c : k.choices)
          if (std::find(own->choices.begin(), own->choices.end(), c) == own->choices.end())
            own->choices.push_back(c);
      continue;
    }
    MethodParam p;
    p.key = k.key;
    p.choices = k.kind == OptionKey::kChoice ? k.choices : std::vector<std::string>{};
    p.number = k.kind == OptionKey::kNumber;
    p.min_int = k.kind == OptionKey::kInteger ? k.min_int : 0;
    p.help = k.hook ? k.help + " (default " + k.default_value + ")" : k.help;
    p.stage = true;
    p.sparse = flash ? k.sparse : true;
    p.default_value = flash && !k.hook ? k.default_value : "";
    m.params.push_back(std::move(p));
  }
}

}  // namespace

const std::vector<MethodSpec>& method_registry() {
  static const std::vector<MethodSpec> registry = [] {
    std::vector<MethodSpec> r;
    register_golden_methods(r);
    register_flash_methods(r);
    register_sage_methods(r);
    register_amla_methods(r);
    register_lean_methods(r);
    register_turbo_methods(r);
    register_sdpa_methods(r);
    register_flex_methods(r);
    register_vllm_methods(r);
    for (MethodSpec& m : r)
      if (m.preset) add_stage_params(m);
    return r;
  }();
  return registry;
}

std::string MethodConfig::canonical() const {
  std::string s = spec->name;
  bool first = true;
  for (const auto& p : spec->params) {
    const std::string& v = values.at(p.key);
    if (p.sparse && v == p.default_value) continue;
    s += (first ? ":" : ",") + p.key + "=" + v;
    first = false;
  }
  return s;
}

std::string MethodConfig::short_name() const {
  std::string s = spec->name;
  bool first = true;
  for (const auto& p : spec->params) {
    if (values.at(p.key) == p.default_value) continue;
    s += (first ? ":" : ",") + p.key + "=" + values.at(p.key);
    first = false;
  }
  return s;
}

std::map<std::string, std::string> MethodConfig::stage_overrides() const {
  std::map<std::string, std::string> o;
  for (const auto& p : spec->params) {
    if (!p.stage) continue;
    const std::string& v = values.at(p.key);
    if (p.shadows) {
      // The method's own option: its own choices are the technique's; the vocabulary's others
      // are the stage override (an own integer option is always the technique's).
      if (!p.own_choices.empty() &&
          std::find(p.own_choices.begin(), p.own_choices.end(), v) == p.own_choices.end())
        o[p.key] = v;
      continue;
    }
    if (!v.empty()) o[p.key] = v;
  }
  return o;
}

Pipeline MethodConfig::pipeline(const AttentionInput& in) const {
  if (!spec->preset) throw UsageError("method '" + spec->name + "' is not a pipeline");
  Pipeline p;
  try {
    p = spec->preset(values, in);
    apply_options(p, stage_overrides(), technique_hooks());
    validate(p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return p;
}

namespace {

// Each distinct note once per process, on stderr (a sweep over many inputs says it once).
void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) note(n);  // once per message (common/warning.hpp)
}

}  // namespace

MethodOutput MethodConfig::run(const AttentionInput& in) const {
  print_notes(notes(in));
  if (!spec->preset) return spec->run(in, values);
  return run_with(in, pipeline(in));
}

AttentionInput MethodConfig::problem(const AttentionInput& in) const {
  AttentionInput r = in;
  if (spec->problem) spec->problem(values, r);
  return r;
}

std::vector<std::string> MethodConfig::notes(const AttentionInput& in) const {
  return spec->notes ? spec->notes(values, in) : std::vector<std::string>{};
}

MethodOutput MethodConfig::run_with(const AttentionInput& in, const Pipeline& p) const {
  try {
    if (spec->problem) return spec->run_with(problem(in), values, p);
    return spec->run_with(in, values, p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

CausalAlign MethodConfig::causal_align(const AttentionInput& in) const {
  if (is_pipeline()) return pipeline(in).tile.causal;
  if (spec->name == "golden") return golden_causal_align(values);
  return CausalAlign::kBottomRight;
}

std::vector<std::string> MethodConfig::outside(const AttentionInput& in) const {
  return spec->outside ? spec->outside(values, in) : std::vector<std::string>{};
}

MethodOutput pipeline_output(PipelineResult r, const Pipeline& p) {
  return MethodOutput{std::move(r.o), encoding_name(p.out.enc), std::move(r.lse), {}};
}

MethodDescription describe_method(const MethodConfig& m, const AttentionInput& in) {
  MethodDescription d;
  const Pipeline p = m.pipeline(in);
  d.outside = m.outside(in);
  d.notes = m.notes(in);
  const OptionList opts = pipeline_options(p);
  // A method with problem options (flex's window, softcap) keeps its name: `flash:` has no place
  // for them.
  if (d.outside.empty() && !m.changes_problem()) {
    d.method = "flash:";
    for (std::size_t i = 0; i < opts.size(); ++i)
      d.method += (i ? "," : "") + opts[i].first + "=" + opts[i].second;
  } else {
    // The method's own options, then every stage key it does not shadow, spelled out.
    d.method = m.spec->name;
    bool first = true;
    auto add = [&](const std::string& k, const std::string& v) {
      d.method += (first ? ":" : ",") + k + "=" + v;
      first = false;
    };
    for (const auto& prm : m.spec->params)
      if (!prm.stage || prm.shadows) add(prm.key, m.values.at(prm.key));
    for (const auto& kv : opts) {
      auto own = std::find_if(m.spec->params.begin(), m.spec->params.end(),
                              [&](const MethodParam& q) { return q.key == kv.first; });
      if (own != m.spec->params.end() && own->shadows) continue;
      add(kv.first, kv.second);
    }
  }
  const OptionList fa2 = pipeline_options(Pipeline{});
  for (const auto& [k, v] : opts) {
    std::string f = "(not in flash)";
    for (const auto& kv : fa2)
      if (kv.first == k) f = kv.second;
    if (f != v) d.differences.push_back(k + "=" + v + " (flash: " + f + ")");
  }
  return d;
}

namespace {

// An integer option's value: decimal digits, at least `min`, at most INT_MAX (the simulators
// take int). Whether a large legal value fits in memory is the memory estimate's question
// (experiments/methods/memory_estimate.hpp), not the grammar's.
enum class IntCheck { kOk, kNotInteger, kTooSmall, kTooLarge };
IntCheck check_int(const std::string& v, int min) {
  if (v.empty()) return IntCheck::kNotInteger;
  for (char c : v) {
    if (c < '0' || c > '9') return IntCheck::kNotInteger;
  }
  const std::size_t first = std::min(v.find_first_not_of('0'), v.size());
  if (v.size() - first > 10) return IntCheck::kTooLarge;
  const long long x = first == v.size() ? 0 : std::stoll(v.substr(first));
  if (x > std::numeric_limits<int>::max()) return IntCheck::kTooLarge;
  return x < min ? IntCheck::kTooSmall : IntCheck::kOk;
}

// Options renamed when the pipeline's vocabulary became every preset's (their old spelling names
// the new one).
std::string renamed_hint(const std::string& method, const std::string& key) {
  if (method != "amla") return "";
  const bool qk = key.rfind("qk_acc", 0) == 0, pv = key.rfind("pv_acc=", 0) == 0;
  const bool pv_old = pv && (key == "pv_acc=default" || key == "pv_acc=exact" ||
                             key == "pv_acc=fp32_seq" || key == "pv_acc=block16");
  if (qk) return "; amla's QK^T accumulation option is qk_sum";
  if (pv_old) return "; amla's P*V accumulation option is pv_sum (pv_acc is the pipeline's c|chunk)";
  return "";
}

// Stage overrides checked when the method is parsed, on a small input of a common shape (d 64,
// bf16), so a combination the pipeline cannot run fails before any computation; a shape-dependent
// problem is reported again with the real input.
void check_stage_overrides(const MethodConfig& cfg) {
  if (!cfg.is_pipeline() || cfg.stage_overrides().empty()) return;
  AttentionInput in;
  in.shape = {1, 1, 1, 16, 16, 64, 64};
  in.dtype = "bfloat16";
  in.q.assign(in.shape.q_size(), 0.0f);
  in.k.assign(in.shape.k_size(), 0.0f);
  in.v.assign(in.shape.v_size(), 0.0f);
  (void)cfg.pipeline(in);
}

}  // namespace

MethodConfig parse_method(const std::string& text) {
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const auto& reg = method_registry();
  auto it =
      std::find_if(reg.begin(), reg.end(), [&](const MethodSpec& m) { return m.name == name; });
  if (it == reg.end()) {
    std::vector<std::string> names;
    for (const auto& m : reg) names.push_back(m.name);
    throw UsageError("unknown method '" + abbreviate(name) + "' (expected " + join_choices(names) +
                     ")");
  }
  MethodConfig cfg;
  cfg.spec = &*it;
  for (const auto& p : it->params) cfg.values[p.key] = p.default_value;
  if (colon == std::string::npos) {
    if (cfg.spec->check) cfg.spec->check(cfg.values);
    return cfg;
  }
  // "flash:" (or "flash:,"): an option list that names no option is a slip, not the defaults.
  if (text.find_first_not_of(',', colon + 1) == std::string::npos)
    throw UsageError("method '" + abbreviate(text) +
                     "' has an empty option list after ':' (write '" + name +
                     "' for its defaults)");
  std::size_t pos = colon + 1;
  std::vector<std::string> seen;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty())
      throw UsageError("method '" + abbreviate(text) + "' has an empty option (a stray comma)");
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw UsageError("method option '" + abbreviate(item) + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto p = std::find_if(it->params.begin(), it->params.end(),
                          [&](const MethodParam& m) { return m.key == key; });
    if (p == it->params.end()) {
      std::vector<std::string> keys;
      bool stage_keys = false;
      for (const auto& m : it->params) {
        if (m.stage && !m.shadows && name != "flash") {
          stage_keys = true;
          continue;
        }
        keys.push_back(m.key);
      }
      throw UsageError("method '" + name + "' has no option '" + abbreviate(key) + "'" +
                       renamed_hint(name, key) +
                       (keys.empty() && !stage_keys ? std::string(" (it takes none)")
                        : " (allowed: " + join_choices(keys) +
                              (stage_keys ? ", and every pipeline stage key of `attnsim methods "
                                            "--stages`"
                                          : "") +
                              ")"));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw UsageError("method option '" + key + "' given twice in '" + abbreviate(text) + "'");
    }
    seen.push_back(key);
    if (p->text) {
      if (value.empty())
        throw UsageError("method '" + name + "' option " + key + "= is empty");
      cfg.values[key] = value;
      continue;
    }
    if (p->number) {
      char* end = nullptr;
      std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0')
        throw UsageError("method '" + name + "' option " + key + "=" + value +
                         " is not allowed (expected a number)");
      cfg.values[key] = value;
      continue;
    }
    const IntCheck ic = p->choices.empty() ? check_int(value, p->min_int) : IntCheck::kOk;
    if (ic == IntCheck::kTooLarge) {
      throw UsageError("method '" + name + "' option " + key + "=" + abbreviate(value) +
                       " is out of range (at most " +
                       std::to_string(std::numeric_limits<int>::max()) + ")");
    }
    if (p->choices.empty()
            ? ic != IntCheck::kOk
            : std::find(p->choices.begin(), p->choices.end(), value) == p->choices.end()) {
      throw UsageError("method '" + name + "' option " + key + "=" + abbreviate(value) +
                       " is not allowed (expected " +
                       (p->choices.empty() ? (p->min_int > 0 ? std::string("a positive integer")
                                                             : std::string("an integer >= 0"))
                                           : join_choices(p->choices)) +
                       ")" + renamed_hint(name, key + "=" + value));
    }
    cfg.values[key] = value;
  }
  if (cfg.spec->check) cfg.spec->check(cfg.values);
  check_stage_overrides(cfg);
  return cfg;
}

std::vector<std::string> split_method_list(const std::string& text) {
  // A comma starts a new method when the next item has no '=' (it is a method name, possibly
  // followed by ':'), otherwise it continues the current method's options.
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) {
      // After a method's options, the method's own parse says what is wrong ("flash:," names
      // the empty option list); elsewhere the list has a stray comma.
      if (out.empty() || out.back().find(':') == std::string::npos)
        throw UsageError("method list '" + abbreviate(text) + "' has an empty item (a stray comma)");
      out.back() += ",";
      continue;
    }
    const bool continues = !out.empty() && item.find('=') != std::string::npos &&
                           (item.find(':') == std::string::npos || item.find(':') > item.find('='));
    if (continues) {
      out.back() += "," + item;
    } else {
      out.push_back(item);
    }
  }
  return out;
}

}  // namespace attnsim
