// Bit-exact models of tensor-core matrix instructions (mma.sync HMMA/IMMA, FP8 wgmma QGMMA,
// f16/bf16 wgmma HGMMA, INT8 wgmma IGMMA, the compiler-emulated FP8 and INT4 mma.sync of sm_90),
// each floating-point one a configuration or a short composition of the block FMA of
// numerics/block_fma.hpp; plus UNVERIFIED sm_89 (Ada) FP8 mma.sync configurations from public data
// only. This file holds the instruction table and the chains over K.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/block_fma.hpp"

namespace attnsim {

// Each enumerator: its `attnsim mma --instr` name, the PTX instruction and what ptxas makes of it.
enum class MmaInstr {
  // sm90.hmma.f16.f32: mma.sync m16n8k16 .f32.f16.f16.f32 -> HMMA.16816.F32
  kHmmaF16F32,
  // sm90.hmma.bf16.f32: mma.sync m16n8k16 .f32.bf16.bf16.f32 -> HMMA.16816.F32.BF16
  kHmmaBf16F32,
  // sm90.hmma.f16.f16: mma.sync m16n8k16 .f16.f16.f16.f16 -> HMMA.16816.F16
  kHmmaF16F16,
  // sm90.mma_sync.e4m3.f32: mma.sync m16n8k32 .f32.e4m3.e4m3.f32 (emulated: see kFp8ViaHmma)
  kMmaSyncE4m3F32,
  // sm90.mma_sync.e5m2.f32: the same with e5m2 inputs
  kMmaSyncE5m2F32,
  // sm90.wgmma.e4m3.f32: wgmma m64nNk32 .f32.e4m3.e4m3 -> QGMMA.64xNx32.F32.E4M3.E4M3 (FP22)
  kWgmmaE4m3F32,
  // sm90.wgmma.e5m2.f32: wgmma m64nNk32 .f32.e5m2.e5m2 -> QGMMA.64xNx32.F32.E5M2.E5M2 (FP22)
  kWgmmaE5m2F32,
  // sm90.wgmma.e4m3.f16: wgmma m64nNk32 .f16.e4m3.e4m3 -> QGMMA.64xNx32.F16.E4M3.E4M3
  kWgmmaE4m3F16,
  // sm90.wgmma.e5m2.f16: wgmma m64nNk32 .f16.e5m2.e5m2 -> QGMMA.64xNx32.F16.E5M2.E5M2
  kWgmmaE5m2F16,
  // sm90.wgmma.f16.f32: wgmma m64nNk16 .f32.f16.f16 -> HGMMA.64xNx16.F32
  kWgmmaF16F32,
  // sm90.wgmma.bf16.f32: wgmma m64nNk16 .f32.bf16.bf16 -> HGMMA.64xNx16.F32.BF16
  kWgmmaBf16F32,
  // sm90.imma.s8.s32: mma.sync m16n8k32 .s32.s8.s8.s32 -> IMMA.16832.S8.S8 (wraps mod 2^32)
  kImmaS8,
  // sm90.imma.s8.s32.satfinite: mma.sync m16n8k32 .satfinite.s32.s8.s8.s32 -> IMMA.16832.S8.S8.SAT
  kImmaS8Sat,
  // sm90.imma.s4.s32: mma.sync m16n8k64 .s32.s4.s4.s32 (emulated by two IMMA.16832.S8.S8)
  kImmaS4,
  // sm90.wgmma.s8.s32: wgmma m64nNk32 .s32.s8.s8 -> IGMMA.64xNx32.S8.S8 (wraps)
  kWgmmaS8,
  // sm90.wgmma.s8.s32.satfinite: wgmma m64nNk32 .s32.s8.s8.satfinite -> IGMMA.64xNx32.S8.S8.SAT
  kWgmmaS8Sat,
  // sm90.wgmma.u8.s32: wgmma m64nNk32 .s32.u8.u8 -> IGMMA.64xNx32.U8.U8
  kWgmmaU8,
  // sm90.wgmma.s8.u8.s32: wgmma m64nNk32 .s32.s8.u8 (A s8, B u8) -> IGMMA.64xNx32.S8.U8
  kWgmmaS8U8,
  // sm90.wgmma.u8.s8.s32: wgmma m64nNk32 .s32.u8.s8 (A u8, B s8) -> IGMMA.64xNx32.U8.S8
  kWgmmaU8S8,
  // UNVERIFIED (no Ada GPU here): sm_89 native FP8 mma.sync (QMMA.16832), parameters from public
  // data only (Khattak & Mikaitis arXiv 2512.07004; SageAttention2 arXiv 2411.10958 §3.4;
  // huweim/emulation_sys bit_width_test_/README.md).
  // sm89.mma_sync.e4m3.f16: mma.sync m16n8k32 .f16.e4m3.e4m3.f16 (SageAttention2++'s fp16 acc.)
  kSm89MmaSyncE4m3F16,
  // sm89.mma_sync.e5m2.f16: the same with e5m2 inputs
  kSm89MmaSyncE5m2F16,
  // sm89.mma_sync.e4m3.f32: mma.sync m16n8k32 .f32.e4m3.e4m3.f32 (FP22, two 16-product blocks)
  kSm89MmaSyncE4m3F32,
  // sm89.mma_sync.e5m2.f32: the same with e5m2 inputs
  kSm89MmaSyncE5m2F32,
  // sm90.mma_sync.e4m3.f16: mma.sync m16n8k32 .f16.e4m3.e4m3.f16 as ptxas emulates it on sm_90
  // (SASS of SageAttention's sm89 kernel built for sm_90a): two HMMA.16816.F16 over interleaved k,
  // the first from zero, the second onto it, then an HADD2 of C. Not probed instruction by
  // instruction; checked end to end by the SageAttention recordings (data/hw/h100/sage).
  kMmaSyncE4m3F16,
  // sm90.mma_sync.e5m2.f16: the same with e5m2 inputs
  kMmaSyncE5m2F16,
  // sm90.wgmma.f16.f16: wgmma m64nNk16 .f16.f16.f16 -> HGMMA.64xNx16.F16, modelled as
  // HMMA.16816.F16 (HGMMA with an FP32 accumulator was proven equal to HMMA); checked end to end by
  // the SageAttention 1 recordings (its P·V).
  kWgmmaF16F16,
  // sm90.hmma1688.f16.f32: mma.sync m16n8k8 .f32.f16.f16.f32 -> HMMA.1688.F32 (8-product blocks;
  // fit end to end by PyTorch's efficient SDPA backend, data/hw/h100/sdpa)
  kHmma1688F16F32,
  // sm90.hmma1688.bf16.f32: mma.sync m16n8k8 .f32.bf16.bf16.f32 -> HMMA.1688.F32.BF16
  kHmma1688Bf16F32,
};

// How an instruction is built from block FMAs (numerics/block_fma.hpp).
enum class MmaComposition : std::uint8_t {
  // k / params.block blocks in natural k order, the D of one the C of the next, so a chain over K
  // is one chain of blocks: HMMA, HGMMA and QGMMA (one block per instruction), sm_89 QMMA (two).
  kBlockChain,
  // sm_90 FP8 mma.sync as ptxas emulates it: the operands widened exactly to fp16, two HMMA blocks
  // (params) over interleaved k, the first from zero, the second onto it, then an FADD of C.
  kFp8ViaHmma,
  // The exact integer dot product of the instruction's k pairs plus C, wrapped modulo 2^32.
  kIntegerWrap,
  // The same, the exact sum clamped once per instruction to [INT32_MIN, INT32_MAX] (.satfinite).
  kIntegerSat,
};

struct MmaInstrInfo {
  MmaInstr instr;
  const char* name;  // the `attnsim mma --instr` spelling
  int m, n, k;       // instruction shape (m is informative; the model works per output element)
  Encoding in;       // A's element format (and B's, except for the mixed INT8 wgmma: see mma_in_b)
  int in_bits;       // bits per A/B element: encoding_traits(in).bits
  int acc;           // 0: f32 bits, 1: f16 bits, 2: s32
  MmaComposition composition;
  BlockFmaParams params;  // the block FMA's parameters; all zero for the integer instructions
  const char* model;      // one line: parameters
  const char* evidence;
  bool unverified = false;  // true: not checked against any recording of ours (public data only)
  bool mixed = false;  // A and B differ in signedness (wgmma .s8.u8 / .u8.s8): B is the other one
};

// B's element format: `in`, or for the mixed-signedness INT8 wgmma the other of kS8/kU8.
Encoding mma_in_b(const MmaInstrInfo& info);

const std::vector<MmaInstrInfo>& mma_instructions();
std::optional<MmaInstr> parse_mma_instr(const std::string& name);
const MmaInstrInfo& mma_info(MmaInstr instr);

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
