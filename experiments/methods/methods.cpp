// The registry of attention methods and their configuration strings.
#include "experiments/methods/methods.hpp"

#include <algorithm>
#include <limits>

#include "experiments/common/error.hpp"
#include "experiments/common/names.hpp"

namespace attnsim {

const std::vector<MethodSpec>& method_registry() {
  static const std::vector<MethodSpec> registry = [] {
    std::vector<MethodSpec> r;
    register_golden_methods(r);
    register_flash_methods(r);
    register_sage_methods(r);
    register_amla_methods(r);
    register_lean_methods(r);
    register_turbo_methods(r);
    return r;
  }();
  return registry;
}

std::string MethodConfig::canonical() const {
  std::string s = spec->name;
  for (std::size_t i = 0; i < spec->params.size(); ++i) {
    const auto& p = spec->params[i];
    s += (i == 0 ? ":" : ",") + p.key + "=" + values.at(p.key);
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
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw UsageError("method option '" + abbreviate(item) + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto p = std::find_if(it->params.begin(), it->params.end(),
                          [&](const MethodParam& m) { return m.key == key; });
    if (p == it->params.end()) {
      std::vector<std::string> keys;
      for (const auto& m : it->params) keys.push_back(m.key);
      throw UsageError("method '" + name + "' has no option '" + abbreviate(key) + "'" +
                       (keys.empty() ? std::string(" (it takes none)")
                                     : " (allowed: " + join_choices(keys) + ")"));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw UsageError("method option '" + key + "' given twice in '" + abbreviate(text) + "'");
    }
    seen.push_back(key);
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
                       ")");
    }
    cfg.values[key] = value;
  }
  if (cfg.spec->check) cfg.spec->check(cfg.values);
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
    if (item.empty()) continue;
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
