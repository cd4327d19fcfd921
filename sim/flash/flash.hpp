// FlashAttention-2 forward as the attention pipeline's default: Pipeline{} is FA2's arithmetic
// (sim/flash/README.md names the kernel line behind every stage), so a FlashAttention variant is a
// Pipeline with some stages changed (method strings `flash:...`, sim/pipeline/options.hpp).
#pragma once

#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

// FA2 with Q, K, V and P stored in `storage` (cast once, RNE: CUDA cvt.rn, fp8 cvt.rn.satfinite)
// and O written in `out`: the kernel's fp16/bf16 instantiations (and fp8 ones for study).
Pipeline flash_pipeline(Encoding storage, Encoding out);

}  // namespace attnsim
