// The pipeline's validity rules in one table: the rules of one stage and the couplings between
// stages (an instruction model needs its operands' formats; a scaled integer P needs chunked P·V;
// a rescale hook needs an FP32 state; ...). validate() checks every entry; error attribution's
// counterfactuals (sim/pipeline/attribution.hpp) read the same entries to switch a coupled stage
// along when one stage alone cannot change.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

// The pipeline's stages as units (error attribution, couplings, the option table's groups).
enum class Stage {
  kQ,          // Q's preparation: input rounding, cast / quantization, mean, prescale  (Pipeline::q)
  kK,          // K's preparation                                                       (::k)
  kV,          // V's preparation                                                       (::v)
  kQk,         // the QKᵀ product and its int32 -> FP32 conversion                      (::qk)
  kSoftmax,    // the state arithmetic, the exponent's argument, max, row sum, LSE       (::softmax)
  kExp,        // the exp function                                                      (::exp)
  kP,          // P's cast before P·V                                                   (::p)
  kPv,         // the P·V product and how it reaches O                                  (::pv)
  kRescale,    // the rescale of O and the snapped max it needs                         (::rescale)
  kNormalize,  // the epilogue's O / l                                                  (::normalize)
  kOut,        // the output format                                                     (::out)
};

struct StageInfo {
  Stage stage;
  const char* name;  // the CSV/table spelling (a contract: `attnsim attribute --out` columns)
  const char* what;
};
const std::vector<StageInfo>& pipeline_stages();
const char* stage_name(Stage s);

// One rule: the stages it reads (in the order a counterfactual switches them along to satisfy
// it) and its check (the one-line reason when the pipeline breaks it).
struct Coupling {
  const char* name;
  std::vector<Stage> stages;
  std::optional<std::string> (*check)(const Pipeline& p);
};
const std::vector<Coupling>& pipeline_couplings();

// The first rule `p` breaks, if any (validate() throws its reason).
const Coupling* violated_coupling(const Pipeline& p, std::string* why = nullptr);

}  // namespace attnsim
