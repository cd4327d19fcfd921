// Integer quantizers as the papers and public kernels define them: symmetric INT8/INT4 with each
// implementation's scale, epsilon and rounding; TurboAttention's progressive INT8 -> INT4/INT2.
#pragma once

#include <string_view>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "numerics/groups.hpp"

namespace attnsim {

// How x becomes an integer once the scale is known.
enum class QuantRounding {
  kRneSat,        // cvt.rni.sat: nearest even, saturate to the integer range (SageAttention CUDA
                  // QuantInt8Kernel, float_to_int8_rn; proven on the H100, data/hw)
  kHalfAwayFp32,  // Triton: v += 0.5 * sign(v) in FP32 (itself rounded: 0.49999997f + 0.5f ==
                  // 1.0f), then .to(int8) truncates (cvt.rzi, saturating) (SageAttention
                  // quant_per_thread.py / quant_per_block.py)
  kNearestEven,   // round to nearest even, saturating (TurboAttention Alg. 2 "⌈x/s⌋")
  kCeil,          // ceiling, saturating (TurboAttention Alg. 1 as printed, "⌈x/s⌉")
};

// Where the 1e-7 of the public kernels goes.
enum class ScaleEpsilon {
  kNone,   // scale = amax / qmax; an all-zero group gives 0/0 = NaN -> q = 0 (Triton per_block)
  kFloor,  // amax = max(amax, 1e-7f) (CUDA QuantInt8Kernel: `float amax_val = 0.0000001f`)
  kAdd,    // scale = amax / qmax + 1e-7f (Triton per_thread)
};

// How the scale is applied.
enum class ScaleApply {
  kDivide,              // v = x / scale, IEEE division
  kMultiplyReciprocal,  // v = x * (qmax / amax), the reciprocal rounded on its own (CUDA kernel)
  kDivFull,             // v = div.full.f32(x, scale): Triton's fp32 `/` as ptxas compiles it
                        // (numerics/special.hpp div_full; SASS of SageAttention's Triton kernels)
  kMultiplyRcpApprox,   // v = x ×ftz (rcp.approx.ftz(amax) ×ftz qmax): `qmax / amax` under
                        // --use_fast_math (SageAttention fused.cu QuantInt8Kernel SASS: MUFU.RCP,
                        // FMUL.FTZ by 127, FMUL.FTZ by x)
};

// How the scale itself is computed from amax.
enum class ScaleCompute {
  kDivide,              // amax / qmax (IEEE), then + 1e-7 when the epsilon is kAdd
  kReciprocalConstant,  // amax × fl(1/qmax), one rounding; with kAdd fused into one FFMA
                        // fma(amax, fl(1/qmax), 1e-7): ptxas turns Triton's div.full by the
                        // constant into a multiply by its rounded reciprocal (0x3C010204 for 127)
                        // and contracts the add (SageAttention quant_per_thread.py / per_block.py
                        // SASS on the H100, data/hw/h100/sage/README.md)
};

struct SymmetricQuantizer {
  const char* name;
  int bits;    // 8, 4 or 2 (signed)
  float qmax;  // divisor of amax: 127, 7, or TurboAttention's 119
  QuantRounding rounding;
  ScaleEpsilon epsilon;
  ScaleApply apply;
  ScaleCompute scale_compute = ScaleCompute::kDivide;

  // Named configurations are equal when their names are (every name is one configuration).
  bool operator==(const SymmetricQuantizer& o) const { return std::string_view(name) == o.name; }
};

// Named configurations (numerics/README.md cites each source).
// Textbook symmetric quantization, scale = amax / (2^(b−1) − 1), nearest even, no epsilon.
inline constexpr SymmetricQuantizer kSymmetricInt8{
    "symmetric_int8",   8, 127.0f, QuantRounding::kNearestEven, ScaleEpsilon::kNone,
    ScaleApply::kDivide};
inline constexpr SymmetricQuantizer kSymmetricInt4{
    "symmetric_int4",   4, 7.0f, QuantRounding::kNearestEven, ScaleEpsilon::kNone,
    ScaleApply::kDivide};
// Two-bit symmetric: levels −1, 0, 1 (scale = amax); s2's −2 is never produced.
inline constexpr SymmetricQuantizer kSymmetricInt2{
    "symmetric_int2",   2, 1.0f, QuantRounding::kNearestEven, ScaleEpsilon::kNone,
    ScaleApply::kDivide};
inline constexpr SymmetricQuantizer kSageCudaInt8{"sage_cuda_int8",
                                                  8,
                                                  127.0f,
                                                  QuantRounding::kRneSat,
                                                  ScaleEpsilon::kFloor,
                                                  ScaleApply::kMultiplyReciprocal};
// The same CUDA QuantInt8Kernel as the H100 runs it, built with SageAttention's --use_fast_math
// (SASS of _fused.so on the H100): scale = amax ×ftz fl(1/127), v = x ×ftz (rcp.approx.ftz(amax)
// ×ftz 127), cvt.rni.sat (F2I.S8.NTZ). Checked against the per_warp recordings of
// data/hw/h100/sage (the entry points' qk_quant_gran="per_warp").
inline constexpr SymmetricQuantizer kSageCudaInt8FastMath{
    "sage_cuda_int8_fastmath", 8, 127.0f, QuantRounding::kRneSat, ScaleEpsilon::kFloor,
    ScaleApply::kMultiplyRcpApprox, ScaleCompute::kReciprocalConstant};
// SageAttention's Triton quantizers as the H100 runs them (the SASS of quant_per_thread.py and
// quant_per_block.py, Triton 3.6): scale = fma(amax, fl(1/qmax), 1e-7) (per_thread) or
// amax × fl(1/qmax) (per_block), x / scale by div.full, ±0.5 added in FP32, truncated.
// Recorded outputs: data/hw/h100/sage. The INT4 variant is compiled by no public path; it is
// assumed to follow the INT8 kernel's instruction sequence with fl(1/7).
inline constexpr SymmetricQuantizer kSageTritonInt8{
    "sage_triton_int8", 8, 127.0f, QuantRounding::kHalfAwayFp32, ScaleEpsilon::kAdd,
    ScaleApply::kDivFull, ScaleCompute::kReciprocalConstant};
inline constexpr SymmetricQuantizer kSageTritonInt4{
    "sage_triton_int4", 4, 7.0f, QuantRounding::kHalfAwayFp32, ScaleEpsilon::kAdd,
    ScaleApply::kDivFull, ScaleCompute::kReciprocalConstant};
inline constexpr SymmetricQuantizer kSageTritonPerBlockInt8{
    "sage_triton_per_block_int8", 8, 127.0f, QuantRounding::kHalfAwayFp32, ScaleEpsilon::kNone,
    ScaleApply::kDivFull, ScaleCompute::kReciprocalConstant};
// TurboAttention Alg. 1/2 write s = max|X| / 119 (the main text's Eq. 4 gives 2^(b-1) - 2 = 126).
inline constexpr SymmetricQuantizer kTurboInt8Alg{
    "turbo_int8_119",   8, 119.0f, QuantRounding::kNearestEven, ScaleEpsilon::kNone,
    ScaleApply::kDivide};
inline constexpr SymmetricQuantizer kTurboInt8Eq4{
    "turbo_int8_126",   8, 126.0f, QuantRounding::kNearestEven, ScaleEpsilon::kNone,
    ScaleApply::kDivide};
inline constexpr SymmetricQuantizer kTurboInt8AlgCeil{
    "turbo_int8_119_ceil", 8, 119.0f, QuantRounding::kCeil, ScaleEpsilon::kNone,
    ScaleApply::kDivide};

// Every named symmetric quantizer above, for lookup by name (method strings, tables).
inline constexpr const SymmetricQuantizer* kSymmetricQuantizers[] = {
    &kSymmetricInt8,  &kSymmetricInt4,   &kSymmetricInt2,          &kSageCudaInt8,
    &kSageCudaInt8FastMath,
    &kSageTritonInt8, &kSageTritonInt4,  &kSageTritonPerBlockInt8, &kTurboInt8Alg,
    &kTurboInt8Eq4,   &kTurboInt8AlgCeil};

// A quantized [tokens, channels] tensor: integers, one scale per group (and a zero point for
// asymmetric groups).
struct QuantizedTensor {
  int tokens = 0, channels = 0, bits = 8;
  GroupMap map;
  std::vector<std::int32_t> q;  // [tokens, channels]
  std::vector<float> scale;     // [groups]
  // x̂ = float(q) * scale, one FP32 multiply (the dequantisation kernels apply).
  std::vector<float> dequantize() const;
};

// amax of each group, as the kernels reduce it (max is exact and order-independent).
std::vector<float> group_amax(const float* x, int tokens, int channels, const GroupMap& map);
QuantizedTensor quantize_symmetric(const float* x, int tokens, int channels, const GroupMap& map,
                                   const SymmetricQuantizer& qz);
// One value with a known scale (and the reciprocal the CUDA kernel uses): exposed for tests.
std::int32_t quantize_value(float x, float scale, float inv, const SymmetricQuantizer& qz);
// quantize_value of x[0, n) with one scale and reciprocal: q[i] = quantize_value(x[i], scale,
// inv, qz). The scale application runs element by element (the same IEEE operations), the
// rounding to integers through numerics/convert_array's round_to_int_array (vector kernels by
// numerics/isa.hpp), bit-identical to the `_ref` loop (tests/numerics/quantize_test.cpp).
void quantize_values(const float* x, std::size_t n, float scale, float inv,
                     const SymmetricQuantizer& qz, std::int32_t* q);
void quantize_values_ref(const float* x, std::size_t n, float scale, float inv,
                         const SymmetricQuantizer& qz, std::int32_t* q);

// TurboAttention BPQ stage 2 (main text §3.1 Eq. 10; Alg. 1's two "(channelwise)" lines; Alg. 2's
// dequantisation): the INT8 tensor of stage 1 compressed per (block, channel) group to unsigned
// 4 or 2 bits with an INT8 integer scale s and zero point z, in integer arithmetic only.
// The paper's printings disagree, so each reading is a configuration (numerics/README.md):
//  * the range divisor: 2^b − 1 (the main text's copy of Alg. 1, arXiv 2412.08585: "max − min over
//    2^{bit} − 1"; Eq. 3/4's asymmetric row) or 2^(b−1) (the appendix copy:
//    "2^{bit−1}"),
//  * the brackets: ⌈·⌉ (ceiling) or ⌈·⌋ (round to nearest; the main-text copy prints ⌈·⌋ for K's
//    s and z and ⌈·⌉ for V's, the same formula),
//  * the zero point: in units of s, z = R(min/s), q = R(q1/s) − z, q̂1 = (q + z)·s (Alg. 1), or in
//    INT8 units, z = min, q = R((q1 − z)/s), q̂1 = q·s + z (Eq. 3, Eq. 7, and Alg. 2's decode
//    "K^{q1} = K^{q2}·s^{int} + z", which Alg. 1's scaled z does not satisfy).
// Rounding is on the exact rational (integer division). q is clamped to [0, 2^b − 1] (readings
// whose range can overflow need it); s is at least 1.
enum class IntRound { kNearestEven, kCeil };
enum class RangeDivisor { kFull, kHalf };       // 2^b − 1, 2^(b−1)
enum class ZeroPointForm { kScaled, kOffset };  // z in units of s (Alg. 1), z = min (Eq. 3)

struct ProgressiveQuantizer {
  const char* name;
  RangeDivisor divisor;
  IntRound scale_round;  // s = R((max − min) / divisor)
  ZeroPointForm zero;
  IntRound zero_round;   // kScaled only: z = R(min / s)
  IntRound value_round;  // q = R(q1 / s) − z, or R((q1 − z) / s)
};

// The project's reading (defensible: every value in range without clamping, error <= s/2, and
// Alg. 2's integer dequantisation q·s + z holds as written): full range, ceiling scale, z = min,
// nearest-even values.
inline constexpr ProgressiveQuantizer kBpqOffset{"bpq_offset",           RangeDivisor::kFull,
                                                 IntRound::kCeil,        ZeroPointForm::kOffset,
                                                 IntRound::kNearestEven, IntRound::kNearestEven};
// Eq. 3 read literally: the same as kBpqOffset but Q(x) = ⌈(x − z)/s⌉ with a ceiling (the PDF's
// bracket may be a lost ⌈·⌋). Never clamps (⌈(max − min)/s⌉ <= 2^b − 1 since s >= (max − min) /
// (2^b − 1)); reconstructs with an upward bias in [0, s).
inline constexpr ProgressiveQuantizer kBpqEq3Ceil{"bpq_eq3_ceil",  RangeDivisor::kFull,
                                                  IntRound::kCeil, ZeroPointForm::kOffset,
                                                  IntRound::kCeil, IntRound::kCeil};
// Alg. 1 as the appendix copy prints it: 2^(b−1), ⌈·⌉ scale and zero point; the value bracket
// "[·]" read as nearest. Uses about half of the b-bit range.
inline constexpr ProgressiveQuantizer kBpqAlg1Appendix{"bpq_alg1_appendix", RangeDivisor::kHalf,
                                                       IntRound::kCeil,     ZeroPointForm::kScaled,
                                                       IntRound::kCeil,     IntRound::kNearestEven};
// Alg. 1 as the main-text copy prints it for K: 2^b − 1, ⌈·⌋ scale and zero point, ⌈·⌉ value
// (ceil(q1/s) − ceil-or-round(min/s)); the nearest scale can overflow the range (clamped).
inline constexpr ProgressiveQuantizer kBpqAlg1MainText{
    "bpq_alg1_main",        RangeDivisor::kFull,    IntRound::kNearestEven,
    ZeroPointForm::kScaled, IntRound::kNearestEven, IntRound::kCeil};
// Alg. 1 with every bracket a ceiling and the full range: never clamps (ceil(max/s) −
// ceil(min/s) <= ceil((max − min)/s)), but reconstructs with an upward bias in [0, s).
inline constexpr ProgressiveQuantizer kBpqAlg1Ceil{"bpq_alg1_ceil", RangeDivisor::kFull,
                                                   IntRound::kCeil, ZeroPointForm::kScaled,
                                                   IntRound::kCeil, IntRound::kCeil};

// A quantized tensor with integer scale and zero point per group, on top of a symmetric one.
struct ProgressiveTensor {
  QuantizedTensor stage1;  // the INT8 symmetric tensor it came from (scales kept)
  GroupMap map;            // stage-2 groups
  int bits = 4;
  ProgressiveQuantizer config = kBpqOffset;
  std::vector<std::int32_t> q;      // unsigned b-bit values, [tokens, channels]
  std::vector<std::int32_t> s_int;  // per stage-2 group
  std::vector<std::int32_t> z_int;  // per stage-2 group (in units of s for ZeroPointForm::kScaled)
  std::vector<std::int32_t> dequantize_int8() const;  // the reconstructed INT8 tensor
  std::vector<float> dequantize() const;              // float(q1̂) * stage-1 scale
};

ProgressiveTensor quantize_progressive(const QuantizedTensor& int8, const GroupMap& map, int bits,
                                       const ProgressiveQuantizer& config);

// Exact nearest-even rounding of a / b for integers (b > 0).
std::int64_t div_round_nearest_even(std::int64_t a, std::int64_t b);
// Exact ceiling of a / b (b > 0).
std::int64_t div_ceil(std::int64_t a, std::int64_t b);
// Exact R(a / b) for b > 0.
std::int64_t div_round(std::int64_t a, std::int64_t b, IntRound r);

}  // namespace attnsim
