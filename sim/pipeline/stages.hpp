// The stages of a Pipeline as units of error attribution: which fields each stage owns, its exact
// choice, and the two counterfactual pipelines `attnsim attribute` runs per stage (the method with
// only that stage made exact; everything exact except that stage).
#pragma once

#include <string>
#include <vector>

#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

enum class Stage {
  kQ,          // Q's preparation: cast / quantization / mean / prescale   (Pipeline::q)
  kK,          // K's preparation                                         (Pipeline::k)
  kV,          // V's preparation                                         (Pipeline::v)
  kQk,         // the QKᵀ product and its int32 -> FP32 conversion         (qk, int_cvt)
  kSoftmax,    // the state arithmetic and the exponent's argument: FP32 or FP64 state, max
               // domain and offset, dequantization order, FMA, row-sum lanes, mask value
  kExp,        // the exp function                                         (exp_fn, hook)
  kP,          // P's cast before P·V                                      (p, p_cast, p_scale)
  kPv,         // the P·V product                                          (pv)
  kRescale,    // the rescale of O and l and the snapped max it needs      (rescale, max_round)
  kNormalize,  // the epilogue's O / l                                     (normalize)
  kOut,        // the output format                                        (out, out_cast)
};

struct StageInfo {
  Stage stage;
  const char* name;  // the CSV/table spelling
  const char* what;
};
const std::vector<StageInfo>& pipeline_stages();

// The exact choice of every stage: FP32 operands as given (no cast, no scale, no mean), FP64
// products (exact products, FP64 sums), an FP64 state with the raw max, exp evaluated in FP64,
// P unrounded, multiply rescale, IEEE division, FP64 output. The tiling, the KV order, the P·V
// accumulation structure and the exponent's base are the method's (they fix the operation order,
// which FP64 makes irrelevant to the error, and some operands need them).
Pipeline exact_pipeline(const Pipeline& method);

// dst's fields of `stage` replaced by src's.
void copy_stage(Pipeline& dst, const Pipeline& src, Stage stage);
// Whether a and b differ in the fields of `stage`.
bool stage_differs(const Pipeline& a, const Pipeline& b, Stage stage);
// The method's choice for a stage, in words (describe()'s fragment), for tables.
std::string stage_choice(const Pipeline& p, Stage stage);

// The two counterfactuals of a stage. A stage's exact choice can be impossible next to another
// stage's inexact one (an instruction model needs its operand formats; a scaled integer P needs
// chunked P·V): the coupled stage is then switched along, and `note` says so.
struct Counterfactual {
  Pipeline pipeline;
  std::string note;  // empty, or which coupled stage was switched along and why
};
Counterfactual only_stage_exact(const Pipeline& method, Stage stage);
Counterfactual only_stage_inexact(const Pipeline& method, Stage stage);

}  // namespace attnsim
