// The block fused multiply-add of NVIDIA tensor cores, the arithmetic under every floating-point
// instruction model of numerics/mma.hpp: its parameters, the parameter sets recorded on the H100
// (and the UNVERIFIED Ada ones), a straightforward reference and an integer fast path.
#pragma once

#include <cstdint>

#include "formats/encoding.hpp"

namespace attnsim {

// The block FMA (Fasi et al., PeerJ CS 7:e330, 2021; Khattak & Mikaitis, arXiv 2510.15884 and
// 2512.07004, model north-numerical-computing/MATLAB-tensor-core): within a block of `block` products plus the incoming C, every product is exact; all
// terms are aligned to the largest exponent (floored at `min_exp`) in a fixed-point window of
// 23 + neab fraction bits, each term truncated toward zero (no sticky bit); the terms are summed
// exactly; the sum is normalised once and rounded to `out_man` fraction bits (RZ, or RNE for FP16
// outputs) in the accumulator format.
struct BlockFmaParams {
  int block;      // products per block
  int neab;       // extra alignment bits (negative: window narrower than FP32, the FP22 path)
  int out_man;    // fraction bits kept in each block result: 23 (fp32), 13 (fp22), 10 (fp16)
  bool out_rne;   // false: truncate (RZ); true: round to nearest even
  int min_exp;    // floor of the alignment exponent
  bool acc_fp16;  // accumulator (C and D) in fp16 instead of fp32
};

// H100 parameters (tensor-core-numerics.md section 6.1, confirmed by data/hw/h100/mma_h100.h5).
// HMMA and HGMMA, f16/bf16 inputs: FP32 accumulator, and fp16 accumulator.
inline constexpr BlockFmaParams kHopperHmmaF32{16, 2, 23, false, -133, false};
inline constexpr BlockFmaParams kHopperHmmaF16{16, 2, 10, true, -21, true};
// HMMA.1688.F32 (mma.sync m16n8k8, f16/bf16 inputs): the same block with 8 products + C. Fit, not
// probed as an instruction: with it the CUTLASS fmha kernel of PyTorch's efficient SDPA backend
// (which issues HMMA.1688.F32, read off its sm_90 SASS) reproduces every recorded element of the
// d <= 64 cases, where 16-product blocks miss (data/hw/h100/sdpa, sim/sdpa/README.md).
inline constexpr BlockFmaParams kHopperHmma1688F32{8, 2, 23, false, -133, false};
// FP8 wgmma (QGMMA) with an FP32 accumulator: the FP22 path (13-bit window, RZ to 13 bits).
inline constexpr BlockFmaParams kHopperQgmmaF32{32, -10, 13, false, -133, false};
// FP8 wgmma with an fp16 accumulator (QGMMA.64xNx32.F16, data/hw/h100/mma_h100_f16acc.h5): the
// FP22 block of kHopperQgmmaF32 (32 products + C, 13-bit window, truncated terms) with the sum
// rounded to nearest even into fp16 instead of truncated to 13 bits. 0 of 565,760 recorded outputs
// missed; RZ, blocks of 16 or 8, windows of 11, 12, 14, 15 or 25 bits each miss hundreds to
// thousands (tests/hw/mma_h100_test.cpp). The floor is only bounded: every floor at or below 2^-19
// gives the same bits for every FP8 input (the smallest product, 2^-32, fits 13 bits below it),
// 2^-18 and above miss designed subnormal outputs; -21 is HMMA's fp16-accumulator floor.
inline constexpr BlockFmaParams kHopperQgmmaF16{32, -10, 10, true, -21, true};
// UNVERIFIED sm_89 (Ada) QMMA m16n8k32, from public information only (tensor-core-numerics.md):
// FP32 output: two chained 16-product blocks in natural k order (k 0-15 with C, then k 16-31),
// 13-bit window, RZ to 13 bits (FP22), floor as Ada HMMA (-132): Khattak & Mikaitis' AdaTC/L40STC
// parameters, which the note re-checked against their published Ada/L40S FP8 outputs (C = 0).
// FP16 output: the note's own fit to those authors' Ada fp8->f16 files (5,000/5,000): the same
// blocks and window, each block RNE to fp16 (the D of block 1 the fp16 C of block 2); the floor is
// an assumption (-20, as Ada's fp16->f16 HMMA; it only matters when every term is below 2^-20).
inline constexpr BlockFmaParams kAdaQmmaF32{16, -10, 13, false, -132, false};
inline constexpr BlockFmaParams kAdaQmmaF16{16, -10, 10, true, -20, true};

// Whether block_fma's integer fast path computes blocks of `n` products of `in` under `neab`. It
// shifts each exact significand product (2·man fraction bits, below 2^(2·man + 2)) left by
// lp = 23 + neab − 2·man to the window's 23 + neab fraction bits, where the reference shifts it to
// 23 fraction bits and then by neab, truncating for neab < 0: the two agree when lp >= 0 (no
// product bit falls below the window). The aligned products are then below 2^(25 + neab) and a
// block's sum is taken in 32-bit lanes: n · 2^(25 + neab) <= 2^31. Every parameter set above fits
// with the formats its instructions use (static_assert in block_fma.cpp and numerics/mma.cpp);
// block_fma takes the reference path for any other parameters (the negative controls of
// tests/hw/mma_h100_test.cpp use some).
constexpr bool block_fma_fast_path_fits(Encoding in, int neab, int n) {
  const EncodingTraits& t = encoding_traits(in);
  if (!t.is_float || t.bits > 16 || n < 1 || n > 64) return false;
  const int lp = 23 + neab - 2 * t.man_bits;
  return lp >= 0 && 25 + neab <= 31 && (std::int64_t{n} << (25 + neab)) <= (std::int64_t{1} << 31);
}
constexpr bool block_fma_fast_path_fits(Encoding in, const BlockFmaParams& p) {
  return block_fma_fast_path_fits(in, p.neab, p.block);
}

// One block: sum_i a[i]*b[i] + c, where a/b are encodings of `in` (fp16, bf16, e4m3fn or e5m2;
// n <= params.block, a missing tail counts as zeros) and c, the result are accumulator bits (fp32,
// or fp16 in the low 16 bits). Special operands (recorded on the H100,
// data/hw/h100/mma_h100_special.h5): any NaN operand or C (whatever its payload or sign), Inf*0 or
// +Inf together with -Inf gives the canonical NaN 0x7FFFFFFF (0x7FFF); otherwise an Inf operand or
// C gives that Inf; a finite sum beyond the format overflows to Inf even though the rounding is
// RZ; a zero result is always +0 (never -0, also for C = -0 and for negative sums that round to
// zero); subnormal operands and C take part exactly. Any parameters; the fast path where
// block_fma_fast_path_fits(in, p.neab, n), the reference path otherwise.
std::uint32_t block_fma(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int n,
                        std::uint32_t c, const BlockFmaParams& p);

// The same block FMA by its straightforward formulation (decode, collect terms, align, sum), with
// no fast path: block_fma takes a branch-free path when no operand is Inf or NaN and must agree
// with this on every input (tests/numerics/mma_test.cpp).
std::uint32_t block_fma_ref(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int n,
                            std::uint32_t c, const BlockFmaParams& p);

// K / p.block blocks in natural k order, the D of one the C of the next: the same bits as
// block_fma block by block, with the work that does not depend on C done ahead for a batch of
// blocks. p.block 8, 16 or 32 and block_fma_fast_path_fits(in, p), else std::invalid_argument; K a
// multiple of p.block.
std::uint32_t block_fma_chain(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int K,
                              std::uint32_t c, const BlockFmaParams& p);

}  // namespace attnsim
