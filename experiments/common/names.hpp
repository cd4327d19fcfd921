// Command-line spellings of formats, rounding modes, overflow policies and NaN encodings.
#pragma once

#include <string>
#include <vector>

#include "formats/intn.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// The spellings are a contract (issue 2: `attnsim convert`): scripts check attnsim through them.
Round parse_round(const std::string& s);               // rne rna rz ru rd
Overflow parse_overflow(const std::string& s);         // saturate saturate-finite nan inf
NanEncoding parse_nan_encoding(const std::string& s);  // cuda ml_dtypes ieee
std::string round_name(Round r);
std::string overflow_name(Overflow o);
std::string nan_encoding_name(NanEncoding n);

const std::vector<std::string>& round_names();
const std::vector<std::string>& overflow_names();
const std::vector<std::string>& nan_encoding_names();
// Formats `attnsim convert --to` accepts.
const std::vector<std::string>& convert_format_names();

// "a, b or c" for error messages.
std::string join_choices(const std::vector<std::string>& names);

}  // namespace attnsim
