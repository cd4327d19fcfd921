// The stages of a Pipeline as units of error attribution: each stage's exact choice, and the two
// counterfactual pipelines `attnsim attribute` runs per stage (the method with only that stage made
// exact; everything exact except that stage), coupled stages switched along by the rules of
// couplings.hpp.
#pragma once

#include <string>

#include "sim/pipeline/couplings.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

// The exact choice of every stage: FP32 operands as given (no input rounding, cast, scale or
// mean), FP64 products (exact products, FP64 sums), an FP64 state with the raw max, the input's
// softmax scale and the natural LSE, exp evaluated in FP64, P unrounded, multiply rescale, IEEE
// division, FP64 output. The tiles (sizes, KV order, causal alignment), the P·V accumulation
// structure and the exponent's base stay the method's (they fix the operation order, which FP64
// makes irrelevant to the error, and some operands need them).
Pipeline exact_pipeline(const Pipeline& method);

// dst's `stage` replaced by src's (one assignment).
void copy_stage(Pipeline& dst, const Pipeline& src, Stage stage);
// Whether a and b differ in `stage` (one comparison of canonical values).
bool stage_differs(const Pipeline& a, const Pipeline& b, Stage stage);
// The method's choice for a stage as method-string options (the stage's keys that differ from
// FlashAttention-2's, values resolved), for tables.
std::string stage_choice(const Pipeline& p, Stage stage);

// The two counterfactuals of a stage. A stage's exact choice can be impossible next to another
// stage's inexact one (a coupling of couplings.hpp): the coupled stage is then switched along,
// and `note` says which and why.
struct Counterfactual {
  Pipeline pipeline;
  std::string note;  // empty, or which coupled stages were switched along and why
};
Counterfactual only_stage_exact(const Pipeline& method, Stage stage);
Counterfactual only_stage_inexact(const Pipeline& method, Stage stage);

}  // namespace attnsim
