// The method-string options of every pipeline stage (sim/pipeline): one table shared by every
// preset, so any method string can set any stage ("composition across papers"), each preset only
// choosing its defaults.
#pragma once

#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

// Every stage option, with the given defaults (key -> value) replacing the table's own, in the
// table's order: first the keys the flash method had before the pipeline (qkv p out acc exp fma
// bq bk, so its existing labels stay what they were), then one group per stage.
std::vector<MethodParam> pipeline_params(const MethodValues& defaults = {});

// The pipeline a fully resolved option set describes. Values were checked against the choices by
// parse_method; combinations the pipeline cannot run throw UsageError with the pipeline's reason.
Pipeline pipeline_from_options(const MethodValues& values);

// A method's run: the pipeline of the values over the input, O in the output format. Errors that
// depend on the input (scale groups that split KV blocks, ...) become one-line UsageErrors.
MethodOutput run_pipeline_method(const AttentionInput& in, const MethodValues& values);

// The stage each option key belongs to, for `attnsim methods` ("operands", "qk", ...).
std::string pipeline_option_group(const std::string& key);

}  // namespace attnsim
