// KIVI's asymmetric per-group quantizer (jy-yuan/KIVI quant/new_pack.py,
// triton_quantize_and_pack_along_last_dim and unpack_and_dequant_*) in the FP16 arithmetic of
// the cache it quantizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnsim {

// One group's parameters, FP16 values held in floats (new_pack.py returns scale and mn in the
// cache dtype, FP16 in KIVI's runs).
struct KiviGroup {
  float scale = 0;
  float mn = 0;
};

// Every operation is one FP16 tensor operation of new_pack.py, i.e. the exact result rounded once
// to FP16 (RNE, overflow to ±Inf: PyTorch's half kernels compute in FP32 and round; for these
// operand widths that double rounding is innocuous, which the _ref below checks):
//   mn, mx  = min, max of the group (exact; a NaN anywhere makes both NaN, as torch.min/max)
//   scale   = fl16(fl16(mx − mn) / (2^b − 1))          `scale = (mx - mn) / (2 ** bit - 1)`
//   q       = round_half_even(clamp(fl16(fl16(x − mn) / scale), 0, 2^b − 1))
//                                                       `data - mn`, `div_`, `clamp_`, `round_`
//             a NaN (0/0 of a constant group, Inf/Inf) becomes q = 0 (`.to(torch.int32)`: CUDA's
//             cvt.rzi.s32.f32 gives 0 for NaN);
//   x̂       = fl16(fl16(q · scale) + mn)               `data.to(float16) * scale + mn`.
// The inputs x must be FP16 values (the cache's dtype: the caller rounds). b in 1..8 (KIVI's
// packer takes 2, 4 and 8; TurboAttention's Table 2 row KIVI-3 is 3).
// n elements x[0], x[stride], ..., x[(n − 1)·stride]; n >= 1.
KiviGroup kivi_group(const float* x, int n, std::ptrdiff_t stride, int bits);
std::uint8_t kivi_code(float x, const KiviGroup& g, int bits);
float kivi_dequantize(int q, const KiviGroup& g);
// A group's codes (q[i·q_stride]) and parameters.
KiviGroup kivi_quantize_group(const float* x, int n, std::ptrdiff_t stride, int bits,
                              std::uint8_t* q, std::ptrdiff_t q_stride);

// The reference of record, written independently: FP64 arithmetic with one explicit rounding to
// FP16 per operation through formats/ (encode<fp16> of the double), the clamp as range checks and
// the rounding to an integer by comparing the fraction with 1/2.
KiviGroup kivi_group_ref(const float* x, int n, std::ptrdiff_t stride, int bits);
std::uint8_t kivi_code_ref(float x, const KiviGroup& g, int bits);
float kivi_dequantize_ref(int q, const KiviGroup& g);

}  // namespace attnsim
