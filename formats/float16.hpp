// 16-bit floating point: bf16 (bfloat16) and fp16 (IEEE binary16).
#pragma once

#include "formats/exmy.hpp"
#include "formats/float32.hpp"

namespace attnsim {

// bf16: 1-8-7, the upper half of an FP32; same exponent range, so FP32 subnormals map to bf16
// subnormals (kept, not flushed: IEEE and CUDA cvt.rn.bf16.f32; some x86 paths flush, see
// numerics-anchors.md 3.2).
using bf16 = FloatFormat<8, 7, Specials::kIeee>;
// fp16: IEEE binary16, 1-5-10, max 65504.
using fp16 = FloatFormat<5, 10, Specials::kIeee>;

static_assert(bf16::kMaxFinite == 0x7F7F && bf16::kQuietNan == 0x7FC0);
static_assert(fp16::kMaxFinite == 0x7BFF && fp16::kInf == 0x7C00 && fp16::kQuietNan == 0x7E00);

}  // namespace attnsim
