// Command-line spellings of formats, rounding modes, overflow policies and NaN encodings.
#include "experiments/common/names.hpp"

#include <iterator>

#include "experiments/common/error.hpp"

namespace attnsim {

// The spellings are formats/policy.hpp's tables (one spelling per policy everywhere).
const std::vector<std::string>& round_names() {
  static const std::vector<std::string> k(std::begin(kRoundNames), std::end(kRoundNames));
  return k;
}
const std::vector<std::string>& overflow_names() {
  static const std::vector<std::string> k(std::begin(kOverflowNames), std::end(kOverflowNames));
  return k;
}
const std::vector<std::string>& nan_encoding_names() {
  static const std::vector<std::string> k(std::begin(kNanEncodingNames),
                                          std::end(kNanEncodingNames));
  return k;
}
const std::vector<std::string>& convert_format_names() {
  static const std::vector<std::string> k{"e4m3fn", "e5m2", "bf16", "fp16", "int8", "int4", "int2"};
  return k;
}

std::string join_choices(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? " or " : ", ";
    out += names[i];
  }
  return out;
}

template <class E>
static E parse_enum(const std::string& s, const std::vector<std::string>& names, const char* what) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return static_cast<E>(i);
  }
  throw UsageError(std::string("unknown ") + what + " '" + s + "' (expected " +
                   join_choices(names) + ")");
}

// Enum order matches the name tables above (policy.hpp).
Round parse_round(const std::string& s) {
  return parse_enum<Round>(s, round_names(), "rounding mode");
}
Overflow parse_overflow(const std::string& s) {
  static_assert(int(Overflow::kSaturate) == 0 && int(Overflow::kSaturateFinite) == 1 &&
                int(Overflow::kNaN) == 2 && int(Overflow::kInf) == 3);
  return parse_enum<Overflow>(s, overflow_names(), "overflow policy");
}
NanEncoding parse_nan_encoding(const std::string& s) {
  return parse_enum<NanEncoding>(s, nan_encoding_names(), "NaN encoding");
}
std::string round_name(Round r) { return round_names()[std::size_t(r)]; }
std::string overflow_name(Overflow o) { return overflow_names()[std::size_t(o)]; }
std::string nan_encoding_name(NanEncoding n) { return nan_encoding_names()[std::size_t(n)]; }

}  // namespace attnsim
