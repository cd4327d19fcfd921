// The techniques' hooks into the pipeline's vocabulary (sim/pipeline/options.hpp): TurboAttention's
// SAS as `exp=sas`, AMLA's integer-add step as `rescale=amla_paper|amla_cann`.
#pragma once

#include "sim/pipeline/options.hpp"

namespace attnsim {

const HookRegistry& technique_hooks();

}  // namespace attnsim
