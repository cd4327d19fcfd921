// Internal to numerics/mma_tile*.cpp: the plans the tile dispatcher (mma_tile.cpp) hands to the
// instruction-set kernels (mma_tile_avx512.cpp: the block FMA; int_mma_tile_x86.cpp: the integer
// products), as plain structs of raw pointers (no STL container crosses into a function compiled
// for another instruction set).
#pragma once

#include <cstddef>
#include <cstdint>

#include "numerics/block_fma.hpp"
#include "numerics/mma_tile.hpp"

namespace attnsim::mma_tile_detail {

// Exponents the packed operands carry besides each element's value: the unit-bit exponent of a
// finite non-zero element (formats/exmy.hpp decompose: exp + man bits, not renormalised: a
// subnormal has 1 − bias), kNoVote for a zero (it takes no part in a block's alignment,
// block_fma.cpp), kSpecial for Inf/NaN (every sum with one leaves the kernel's exact range, so
// the block goes to the reference). kNoVote + kSpecial (Inf·0) is out of range too.
inline constexpr std::int32_t kNoVote = -20000;
inline constexpr std::int32_t kSpecial = 30000;
// The packed exponents are 16-bit (FloatTilePlan::be; ae holds each twice, in both halves of a
// 32-bit word).
static_assert(kNoVote >= -32768 && kSpecial <= 32767 && kNoVote + kSpecial > kNoVote / 2);

// How a block's exact sum is rounded (BlockFmaParams out_man / out_rne / acc_fp16).
enum class BlockOut : std::uint8_t {
  kF32Rz,   // 23 fraction bits, RZ, FP32 (HMMA/HGMMA .F32)
  kFp22,    // 13 fraction bits, RZ, FP32 register (QGMMA .F32, sm_89 QMMA .F32)
  kF16Rne,  // fp16, round to nearest even (HMMA/HGMMA/QGMMA .F16, sm_89 QMMA .F16)
};

// How an operand's elements become (value, exponent) pairs in the packed layout: encodings of
// fp16 or bf16 decoded arithmetically, FP8 encodings by table, or values (MmaTile::a_values /
// b_values) whose exponent is their FP32 one floored at the format's emin (a subnormal of the
// format has the unit-bit exponent 1 − bias).
enum class DecodeKind : std::uint8_t { kFp16, kBf16, kTable8, kValue };

struct FloatTilePlan {
  // The model.
  int block = 16;      // products per block (16 or 32)
  int kw = 25;         // 23 + neab: the window's fraction bits
  int min_exp = -133;  // the alignment floor
  BlockOut out = BlockOut::kF32Rz;
  bool acc_fp16 = false;
  bool via_hmma = false;        // sm_90 FP8 mma.sync: per 32 k, two blocks from zero, then C added
  int promote = 0;              // > 0: chunks of this many elements from zero, FADD.RN into FP32
  int lo = 0, hi = 0;           // alignment exponents the kernel computes exactly; others: fallback
  bool check_overflow = false;  // products + C may leave int32 (HMMA: 16 · 2^27 + 2^26)
  // The operands, packed (mma_tile.cpp): values exact in FP32, exponents as above in 16 bits
  // (every one fits: |e| <= 30000), so the kernel's first pass adds and compares 32 exponent
  // pairs per instruction; A's exponent twice per 32-bit word (e in both 16-bit halves), so that
  // its broadcast to 32 lanes is a plain 32-bit broadcast load (vpbroadcastd m32: no shuffle uop,
  // where vpbroadcastw m16 takes one). A is [rows][n], B [n][np] with np = cols rounded up to 32
  // (padding: value 0, exponent kNoVote).
  // For via_hmma the reduction is permuted within every 32 elements so that each 16 of the
  // packed order is one HMMA (numerics/mma.cpp fp8_via_hmma).
  int rows = 0, cols = 0, n = 0, np = 0;
  const float* av = nullptr;
  const std::uint32_t* ae = nullptr;
  const float* bv = nullptr;
  const std::int16_t* be = nullptr;
  const std::uint32_t* c = nullptr;
  std::ptrdiff_t ldc = 0;
  std::uint32_t* d = nullptr;
  std::ptrdiff_t ldd = 0;
  // For the reference's blocks (float_block_fallback).
  const MmaTile* tile = nullptr;
  Encoding a_enc = Encoding::kFp16, b_enc = Encoding::kFp16;  // the operands' formats
  Encoding block_in = Encoding::kFp16;  // the block FMA's input format (fp16 for via_hmma)
  BlockFmaParams params{};
  const std::uint16_t* widen = nullptr;  // via_hmma: FP8 byte -> fp16 bits (exact)
};

// The packing of one operand: how to decode, and for kTable8 the 256-entry tables.
struct PackSpec {
  DecodeKind kind = DecodeKind::kFp16;
  const float* table_value = nullptr;
  const std::int32_t* table_exp = nullptr;
  int emin = 0;            // kValue: the format's unit-bit exponent floor
  bool permute32 = false;  // via_hmma's order within every 32 elements
};

// The block of packed positions [kp0, kp0 + block) of output (i, j) by block_fma_ref, from the
// original encodings; p_bits is the incoming C as an FP32 register (an fp16 accumulator's value
// widened), and so is the result. Called by the kernels for blocks outside their exact range.
std::uint32_t float_block_fallback(const FloatTilePlan& pl, int i, int j, int kp0,
                                   std::uint32_t p_bits);

// The source k of packed position p under via_hmma's order.
inline int via_hmma_source(int p) {
  const int g = p & 31, base = p & ~31;
  return g < 16 ? base + (g >> 1) * 4 + (g & 1) : base + ((g - 16) >> 1) * 4 + 2 + (g & 1);
}

// AVX-512 (mma_tile_avx512.cpp).
// The encoding of A(i, k) / B(k, j) at instruction position k (values encoded exactly).
std::uint32_t tile_a_bits(const MmaTile& t, Encoding e, int i, int k);
std::uint32_t tile_b_bits(const MmaTile& t, Encoding e, int k, int j);

void pack_a_avx512(const PackSpec& s, const MmaTile& t, float* av, std::uint32_t* ae);
void pack_b_avx512(const PackSpec& s, const MmaTile& t, int np, float* bv, std::int16_t* be);
void float_tile_avx512(const FloatTilePlan& pl);

// Portable packing into the same layout (mma_tile.cpp), for the kernels of other instruction sets.
void pack_a_plain(const PackSpec& s, const MmaTile& t, float* av, std::uint32_t* ae);
void pack_b_plain(const PackSpec& s, const MmaTile& t, int np, float* bv, std::int16_t* be);

// AVX2 + FMA + F16C (mma_tile_avx2.cpp): the same blocks, 8 columns per register.
void float_tile_avx2(const FloatTilePlan& pl);
void pack_a_avx2(const PackSpec& s, const MmaTile& t, float* av, std::uint32_t* ae);
void pack_b_avx2(const PackSpec& s, const MmaTile& t, int np, float* bv, std::int16_t* be);

// The integer instructions (int_mma_tile_x86.cpp). Elements as integers: s8 and u8 bytes, s4
// nibbles sign-extended to bytes, or values (exact integers in FP32).
enum class ElemKind : std::uint8_t { kS8, kU8, kS4, kValue };

struct IntTilePlan {
  const MmaTile* tile = nullptr;
  ElemKind a_kind = ElemKind::kS8, b_kind = ElemKind::kS8;
  bool a_signed = true, b_signed = true;
  bool satfinite = false;  // clamp once per instruction (chunks of k_instr elements)
  // The bytes the kernels multiply: AMX takes the values as they are (tdpb{s,u}{s,u}d); VNNI's
  // vpdpbusd takes B unsigned and A signed, so a signed B is stored XOR 0x80 (b + 128) and an
  // unsigned A XOR 0x80 (a − 128), the offsets b_off / a_off (128 or 0) corrected afterwards.
  int a_xor = 0, b_xor = 0, a_off = 0, b_off = 0;
  int rows_pad = 0;  // rows packed (AMX: a multiple of 32)
};

// The packed operands: A bytes [rows_pad][n8], B in the VNNI layout [n8 / 4][np] (int32 = the
// bytes of 4 consecutive k of one column), n8 the reduction rounded up to 64 (zero elements),
// np the columns rounded up to 64; per-row and per-column sums of the values over every `chunk`
// elements (rsum [rows_pad][n8 / chunk], csum [n8 / chunk][np]).
struct IntPacked {
  const std::uint8_t* a8 = nullptr;
  const std::int32_t* b4 = nullptr;
  const std::int32_t* rsum = nullptr;
  const std::int32_t* csum = nullptr;
  int n8 = 0, np = 0, chunk = 0;
};

void pack_int_a(const IntTilePlan& pl, std::uint8_t* a8, int n8, std::int32_t* rsum, int chunk);
void pack_int_b(const IntTilePlan& pl, std::int32_t* b4, int n8, int np, std::int32_t* csum,
                int chunk);
void int_tile_vnni(const IntTilePlan& pl, const IntPacked& pk);

// AVX2 (int_mma_tile_avx2.cpp): vpmaddwd on 16-bit values (an s8/u8/s4 product pair's sum is exact
// in int32), so no byte offsets. A as int16 [rows][n], B as int32 words [n / 2][np] each holding
// B(2g, j) in the low and B(2g + 1, j) in the high 16 bits (np = cols rounded up to 16); n is a
// multiple of the instruction's k, `chunk` its k under .satfinite, else n. Packed portably
// (mma_tile.cpp).
struct Int16Packed {
  const std::int16_t* a16 = nullptr;
  const std::int32_t* b2 = nullptr;
  int np = 0, chunk = 0;
};
void pack_int16_a(const IntTilePlan& pl, std::int16_t* a16);
void pack_int16_b(const IntTilePlan& pl, int np, std::int32_t* b2);
void int_tile_avx2(const IntTilePlan& pl, const Int16Packed& pk);
// pack_int16_b for a B whose columns are contiguous rows (b_k == 1, no k_index; n a multiple of
// 16, np of 8): the AVX2 form (int_mma_tile_avx2.cpp).
void pack_int16_b_rows_avx2(const IntTilePlan& pl, int np, std::int32_t* b2);
// ... and for a B whose rows are contiguous (b_n == 1, no k_index; np a multiple of 8).
void pack_int16_b_cols_avx2(const IntTilePlan& pl, int np, std::int32_t* b2);
// Wrapping models only (the sign variants are the tile instructions'); cbuf: 32 × 32 int32.
void int_tile_amx(const IntTilePlan& pl, const IntPacked& pk, std::int32_t* cbuf);

}  // namespace attnsim::mma_tile_detail
