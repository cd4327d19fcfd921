// Bit-exact models of tensor-core matrix instructions (mma.sync HMMA/IMMA, FP8 wgmma QGMMA,
// f16/bf16 wgmma HGMMA, INT8 wgmma IGMMA, the compiler-emulated FP8 and INT4 mma.sync of sm_90),
// one parameterised block-FMA model underneath for the floating-point ones; plus UNVERIFIED sm_89
// (Ada) FP8 mma.sync configurations from public data only. FP8 wgmma with FP16 accumulation
// (QGMMA .F16) is a configuration of the same block FMA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnsim {

// The block fused multiply-add of NVIDIA tensor cores (Fasi et al. 2021; Khattak & Mikaitis 2025;
// shared/research/tensor-core-numerics.md section 6): within a block of `block` products plus the
// incoming C, every product is exact; all terms are aligned to the largest exponent (floored at
// `min_exp`) in a fixed-point window of 23 + neab fraction bits, each term truncated toward zero
// (no sticky bit); the terms are summed exactly; the sum is normalised once and rounded to
// `out_man` fraction bits (RZ, or RNE for FP16 outputs) in the accumulator format.
struct BlockFmaParams {
  int block;      // products per block
  int neab;       // extra alignment bits (negative: window narrower than FP32, the FP22 path)
  int out_man;    // fraction bits kept in each block result: 23 (fp32), 13 (fp22), 10 (fp16)
  bool out_rne;   // false: truncate (RZ); true: round to nearest even
  int min_exp;    // floor of the alignment exponent
  bool acc_fp16;  // accumulator (C and D) in fp16 instead of fp32
};

// Input element formats.
enum class MmaIn { kFp16, kBf16, kE4m3, kE5m2, kS8, kU8, kS4 };

enum class MmaInstr {
  kHmmaF16F32,      // sm90.hmma.f16.f32       mma.sync m16n8k16 .f32.f16.f16.f32  -> HMMA.16816.F32
  kHmmaBf16F32,     // sm90.hmma.bf16.f32      mma.sync m16n8k16 .f32.bf16.bf16.f32 ->
                    // HMMA.16816.F32.BF16
  kHmmaF16F16,      // sm90.hmma.f16.f16       mma.sync m16n8k16 .f16.f16.f16.f16  -> HMMA.16816.F16
  kMmaSyncE4m3F32,  // sm90.mma_sync.e4m3.f32  mma.sync m16n8k32 .f32.e4m3 (emulated, see mma.cpp)
  kMmaSyncE5m2F32,  // sm90.mma_sync.e5m2.f32
  kWgmmaE4m3F32,    // sm90.wgmma.e4m3.f32     wgmma m64nNk32 .f32.e4m3 -> QGMMA (FP22)
  kWgmmaE5m2F32,    // sm90.wgmma.e5m2.f32
  kWgmmaE4m3F16,  // sm90.wgmma.e4m3.f16     wgmma m64nNk32 .f16.e4m3 -> QGMMA.64xNx32.F16.E4M3.E4M3
  kWgmmaE5m2F16,  // sm90.wgmma.e5m2.f16     wgmma m64nNk32 .f16.e5m2 -> QGMMA.64xNx32.F16.E5M2.E5M2
  kWgmmaF16F32,   // sm90.wgmma.f16.f32      wgmma m64nNk16 .f32.f16.f16 -> HGMMA.64xNx16.F32
  kWgmmaBf16F32,  // sm90.wgmma.bf16.f32     wgmma m64nNk16 .f32.bf16.bf16 -> HGMMA.64xNx16.F32.BF16
  kImmaS8,        // sm90.imma.s8.s32        mma.sync m16n8k32 .s32.s8.s8.s32 (wraps mod 2^32)
  kImmaS8Sat,     // sm90.imma.s8.s32.satfinite
  kImmaS4,      // sm90.imma.s4.s32        mma.sync m16n8k64 .s32.s4.s4.s32 (emulated by 2 IMMA.S8)
  kWgmmaS8,     // sm90.wgmma.s8.s32       wgmma m64nNk32 .s32.s8.s8 -> IGMMA.64xNx32.S8.S8 (wraps)
  kWgmmaS8Sat,  // sm90.wgmma.s8.s32.satfinite  wgmma m64nNk32 .s32.s8.s8.satfinite -> IGMMA ...
                // .SAT
  kWgmmaU8,     // sm90.wgmma.u8.s32       wgmma m64nNk32 .s32.u8.u8 -> IGMMA.64xNx32.U8.U8
  kWgmmaS8U8,  // sm90.wgmma.s8.u8.s32    wgmma m64nNk32 .s32.s8.u8 (A s8, B u8) -> IGMMA ... .S8.U8
  kWgmmaU8S8,  // sm90.wgmma.u8.s8.s32    wgmma m64nNk32 .s32.u8.s8 (A u8, B s8) -> IGMMA ... .U8.S8
  // UNVERIFIED (no Ada GPU here): sm_89 native FP8 mma.sync (QMMA.16832), parameters from public
  // data only (shared/research/tensor-core-numerics.md sections 3, 5.3, 6.1).
  kSm89MmaSyncE4m3F16,  // sm89.mma_sync.e4m3.f16  mma.sync m16n8k32 .f16.e4m3.e4m3.f16
                        // (SageAttention2++ fp16 acc.)
  kSm89MmaSyncE5m2F16,  // sm89.mma_sync.e5m2.f16
  kSm89MmaSyncE4m3F32,  // sm89.mma_sync.e4m3.f32  mma.sync m16n8k32 .f32.e4m3.e4m3.f32 (FP22, 2 x
                        // 16 blocks)
  kSm89MmaSyncE5m2F32,  // sm89.mma_sync.e5m2.f32
};

struct MmaInstrInfo {
  MmaInstr instr;
  const char* name;   // the `attnsim mma --instr` spelling
  int m, n, k;        // instruction shape (m is informative; the model works per output element)
  MmaIn in;           // A's element format (and B's, except for the mixed INT8 wgmma: see in_b)
  int in_bits;        // 16, 8 or 4 bits per A/B element
  int acc;            // 0: f32 bits, 1: f16 bits, 2: s32
  const char* model;  // one line: parameters
  const char* evidence;
  bool unverified =
      false;           // true: not checked against any recording of ours (public information only)
  bool mixed = false;  // A and B differ in signedness (wgmma .s8.u8 / .u8.s8): B is the other one
};

// B's element format: `in`, or for the mixed-signedness INT8 wgmma the other of kS8/kU8.
MmaIn mma_in_b(const MmaInstrInfo& info);

const std::vector<MmaInstrInfo>& mma_instructions();
std::optional<MmaInstr> parse_mma_instr(const std::string& name);
const MmaInstrInfo& mma_info(MmaInstr instr);

// One block: sum_i a[i]*b[i] + c, where a/b are encodings of `in` (n <= params.block, a missing
// tail counts as zeros) and c, the result are accumulator bits (fp32, or fp16 in the low 16 bits).
// Special operands (recorded on the H100, data/hw/h100/mma_h100_special.h5): any NaN operand or C
// (whatever its payload or sign), Inf*0 or +Inf together with -Inf gives the canonical NaN
// 0x7FFFFFFF (0x7FFF); otherwise an Inf operand or C gives that Inf; a finite sum beyond the format
// overflows to Inf even though the rounding is RZ; a zero result is always +0 (never -0, also for
// C = -0 and for negative sums that round to zero); subnormal operands and C take part exactly.
std::uint32_t block_fma(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                        std::uint32_t c, const BlockFmaParams& p);

// The same block FMA by its straightforward formulation (decode, collect terms, align, sum), with
// no fast path: block_fma takes a branch-free path when no operand is Inf or NaN and must agree
// with this on every input (tests/numerics/mma_test.cpp).
std::uint32_t block_fma_ref(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                            std::uint32_t c, const BlockFmaParams& p);

// One output element of an instruction chain: K (a multiple of the instruction's k) elements of a
// row of A and a row of Bt, as encodings (fp16/bf16 bits, fp8 bytes, s8 bytes, s4 nibbles),
// instructions chained in natural k order with the D of one the C of the next.
std::uint32_t mma_dot(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b, int K,
                      std::uint32_t c);

// The two-level accumulation of DeepSeek-V3 (§3.3.2, "promotion to CUDA cores" every N_C = 128
// elements) and SageAttention2/2++ (§4.3 and the "fp32+fp16" / "fp22+fp32" variants): the
// instruction chain runs over `every` elements (a multiple of the instruction's k) from a zero
// accumulator, and each chunk's D is added to an FP32 register with FADD (IEEE binary32, round to
// nearest even, the canonical NaN 0x7FFFFFFF as the GPU writes it); c_f32 and the result are FP32
// bits whatever the instruction's own accumulator (fp16 chunk results are widened exactly). The
// per-chunk dequantisation scales of those kernels multiply outside this model. Floating-point
// instructions only (integer accumulation is exact). every = K is one chunk: fadd(c, chain(0)).
// Recorded on the H100 for the e4m3 QGMMA chains, FP32 and f16, every 32/64/128 elements
// (data/hw/h100/mma_h100_f16acc.h5, groups *_promote*: 0 mismatches).
std::uint32_t mma_dot_promoted(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b,
                               int K, std::uint32_t c_f32, int every);

// D = A·B + C for one problem: A is M x K row-major encodings, Bt is N x K row-major, C and D
// M x N row-major accumulator bits. Element encodings as in the raw files of `attnsim mma`:
// u16 per 16-bit element, u8 per 8-bit element, 4-bit elements packed two per byte (element 0 in
// the low nibble).
// promote_every > 0: mma_dot_promoted per element (C and D are then FP32 bits).
void mma_gemm(MmaInstr instr, int M, int N, int K, const std::uint8_t* A, const std::uint8_t* Bt,
              const std::uint32_t* C, std::uint32_t* D, int promote_every = 0);

// Element j of a row of raw encodings with `bits` bits per element.
std::uint32_t mma_element(const std::uint8_t* row, int bits, int j);

}  // namespace attnsim
