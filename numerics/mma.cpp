// Bit-exact models of tensor-core matrix instructions: the instruction table and the chains over K
// (see mma.hpp and numerics/README.md; the block FMA itself is numerics/block_fma.cpp).
#include "numerics/mma.hpp"

#include <array>
#include <stdexcept>

#include "formats/float16.hpp"
#include "formats/float32.hpp"

namespace attnsim {

namespace {

using Comp = MmaComposition;
constexpr BlockFmaParams kNoBlockFma{};  // the integer instructions' (unused) parameters

// The instruction table, in MmaInstr order.
constexpr MmaInstrInfo kInstrTable[] = {
    {MmaInstr::kHmmaF16F32, "sm90.hmma.f16.f32", 16, 8, 16, Encoding::kFp16, 16, 0,
     Comp::kBlockChain, kHopperHmmaF32,
     "block FMA: 16 products + C per k16, window 23+2 bits, truncated terms, FP32 RZ",
     "H100 recordings data/hw/h100/mma_h100.h5 (designed + random, K=16 and chained K=128) and mma_h100_special.h5 (NaN/Inf/overflow/signed-zero/subnormal operands)"},
    {MmaInstr::kHmmaBf16F32, "sm90.hmma.bf16.f32", 16, 8, 16, Encoding::kBf16, 16, 0,
     Comp::kBlockChain, kHopperHmmaF32, "as sm90.hmma.f16.f32 with bf16 inputs",
     "H100 recordings (K=16, K=128)"},
    {MmaInstr::kHmmaF16F16, "sm90.hmma.f16.f16", 16, 8, 16, Encoding::kFp16, 16, 1,
     Comp::kBlockChain, kHopperHmmaF16,
     "block FMA: 16 products + fp16 C, window 23+2 bits, FP16 RNE, alignment floor 2^-21",
     "H100 recordings (K=16, K=128)"},
    {MmaInstr::kMmaSyncE4m3F32, "sm90.mma_sync.e4m3.f32", 16, 8, 32, Encoding::kE4m3fn, 8, 0,
     Comp::kFp8ViaHmma, kHopperHmmaF32,
     "ptxas emulation: P1 = HMMA(k in {4t,4t+1,16+4t,16+4t+1}, C=0); P2 = HMMA(other 16 k, C=P1); D = fadd.rn(C, P2)",
     "SASS F2FP.F16.E4M3.UNPACK_B + 2x HMMA.16816.F32 + FADD (data/hw/h100/mma_probe_sass.txt.gz); H100 recordings"},
    {MmaInstr::kMmaSyncE5m2F32, "sm90.mma_sync.e5m2.f32", 16, 8, 32, Encoding::kE5m2, 8, 0,
     Comp::kFp8ViaHmma, kHopperHmmaF32, "as sm90.mma_sync.e4m3.f32 with e5m2 inputs",
     "SASS F2FP.F16.E5M2.UNPACK_B + 2x HMMA + FADD; H100 recordings"},
    {MmaInstr::kWgmmaE4m3F32, "sm90.wgmma.e4m3.f32", 64, 8, 32, Encoding::kE4m3fn, 8, 0,
     Comp::kBlockChain, kHopperQgmmaF32,
     "block FMA: 32 products + C, window 13 bits (FP22), truncated terms, result RZ to 13 bits",
     "SASS QGMMA.64x8x32.F32.E4M3.E4M3; H100 recordings"},
    {MmaInstr::kWgmmaE5m2F32, "sm90.wgmma.e5m2.f32", 64, 8, 32, Encoding::kE5m2, 8, 0,
     Comp::kBlockChain, kHopperQgmmaF32, "as sm90.wgmma.e4m3.f32 with e5m2 inputs",
     "SASS QGMMA.64x8x32.F32.E5M2.E5M2; H100 recordings"},
    {MmaInstr::kWgmmaE4m3F16, "sm90.wgmma.e4m3.f16", 64, 8, 32, Encoding::kE4m3fn, 8, 1,
     Comp::kBlockChain, kHopperQgmmaF16,
     "block FMA: 32 products + fp16 C, window 13 bits, truncated terms, FP16 RNE, floor 2^-21 (any <= 2^-19 is equivalent for FP8)",
     "SASS QGMMA.64x8x32.F16.E4M3.E4M3; H100 recordings data/hw/h100/mma_h100_f16acc.h5 (small-integer layout check, designed window/tie/overflow/subnormal/block-membership probes, random K=32/256, special operands); RZ, 16- or 8-product blocks, 11/12/14/15/25-bit windows disagree"},
    {MmaInstr::kWgmmaE5m2F16, "sm90.wgmma.e5m2.f16", 64, 8, 32, Encoding::kE5m2, 8, 1,
     Comp::kBlockChain, kHopperQgmmaF16,
     "as sm90.wgmma.e4m3.f16 with e5m2 inputs (floor 2^-18 and above disagree)",
     "SASS QGMMA.64x8x32.F16.E5M2.E5M2; H100 recordings"},
    {MmaInstr::kWgmmaF16F32, "sm90.wgmma.f16.f32", 64, 8, 16, Encoding::kFp16, 16, 0,
     Comp::kBlockChain, kHopperHmmaF32,
     "block FMA: 16 products + C per k16, window 23+2 bits, truncated terms, FP32 RZ (as HMMA)",
     "SASS HGMMA.64x8x16.F32; H100 recordings data/hw/h100/mma_h100_special.h5 (small-integer layout check, designed F1-F12, block-membership and window probes, random K=16/128, special operands)"},
    {MmaInstr::kWgmmaBf16F32, "sm90.wgmma.bf16.f32", 64, 8, 16, Encoding::kBf16, 16, 0,
     Comp::kBlockChain, kHopperHmmaF32, "as sm90.wgmma.f16.f32 with bf16 inputs",
     "SASS HGMMA.64x8x16.F32.BF16; H100 recordings"},
    {MmaInstr::kImmaS8, "sm90.imma.s8.s32", 16, 8, 32, Encoding::kS8, 8, 2, Comp::kIntegerWrap,
     kNoBlockFma, "exact integer dot product plus C, wrapping modulo 2^32",
     "SASS IMMA.16832.S8.S8; H100 recordings"},
    {MmaInstr::kImmaS8Sat, "sm90.imma.s8.s32.satfinite", 16, 8, 32, Encoding::kS8, 8, 2,
     Comp::kIntegerSat, kNoBlockFma,
     "exact integer dot product plus C, clamped to [INT32_MIN, INT32_MAX]",
     "SASS IMMA.16832.S8.S8.SAT; H100 recordings"},
    {MmaInstr::kImmaS4, "sm90.imma.s4.s32", 16, 8, 64, Encoding::kS4, 4, 2, Comp::kIntegerWrap,
     kNoBlockFma,
     "ptxas emulation: s4 widened to s8, two IMMA.16832 from zero, integer adds: exact, wrapping",
     "SASS 2x IMMA.16832.S8.S8 ... RZ in the helper routine; H100 recordings"},
    {MmaInstr::kWgmmaS8, "sm90.wgmma.s8.s32", 64, 8, 32, Encoding::kS8, 8, 2, Comp::kIntegerWrap,
     kNoBlockFma, "exact integer dot product of 32 s8 pairs plus C, wrapping modulo 2^32 (as IMMA)",
     "SASS IGMMA.64x8x32.S8.S8; H100 recordings data/hw/h100/mma_h100_igmma.h5 (small-integer layout check, designed int32-limit and partial-sum-order patterns, random, all-extreme operands; K=32 and chained K=256)"},
    {MmaInstr::kWgmmaS8Sat, "sm90.wgmma.s8.s32.satfinite", 64, 8, 32, Encoding::kS8, 8, 2,
     Comp::kIntegerSat, kNoBlockFma,
     "exact integer dot product plus C, clamped once per instruction to [INT32_MIN, INT32_MAX] (no clamp of partial sums; a chain clamps after every instruction)",
     "SASS IGMMA.64x8x32.S8.S8.SAT; H100 recordings (wrapping, clamping per product or only at the chain's end each miss hundreds)"},
    {MmaInstr::kWgmmaU8, "sm90.wgmma.u8.s32", 64, 8, 32, Encoding::kU8, 8, 2, Comp::kIntegerWrap,
     kNoBlockFma, "exact integer dot product of 32 u8 pairs plus C, wrapping modulo 2^32",
     "SASS IGMMA.64x8x32.U8.U8; H100 recordings"},
    {MmaInstr::kWgmmaS8U8, "sm90.wgmma.s8.u8.s32", 64, 8, 32, Encoding::kS8, 8, 2,
     Comp::kIntegerWrap, kNoBlockFma,
     "exact integer dot product, A s8 and B u8, plus C, wrapping modulo 2^32",
     "SASS IGMMA.64x8x32.S8.U8; H100 recordings", false, true},
    {MmaInstr::kWgmmaU8S8, "sm90.wgmma.u8.s8.s32", 64, 8, 32, Encoding::kU8, 8, 2,
     Comp::kIntegerWrap, kNoBlockFma,
     "exact integer dot product, A u8 and B s8, plus C, wrapping modulo 2^32",
     "SASS IGMMA.64x8x32.U8.S8; H100 recordings", false, true},
    {MmaInstr::kSm89MmaSyncE4m3F16, "sm89.mma_sync.e4m3.f16", 16, 8, 32, Encoding::kE4m3fn, 8, 1,
     Comp::kBlockChain, kAdaQmmaF16,
     "UNVERIFIED: two 16-product blocks in natural k order (k0-15 + fp16 C, then k16-31), window 13 bits, truncated terms, each block RNE to fp16, floor 2^-20 (assumed)",
     "UNVERIFIED, public information only (no Ada GPU): fit of the research note (tensor-core-numerics.md 5.3) to Khattak & Mikaitis' published Ada fp8->f16 outputs; special operands assumed as on sm_90",
     true},
    {MmaInstr::kSm89MmaSyncE5m2F16, "sm89.mma_sync.e5m2.f16", 16, 8, 32, Encoding::kE5m2, 8, 1,
     Comp::kBlockChain, kAdaQmmaF16, "UNVERIFIED: as sm89.mma_sync.e4m3.f16 with e5m2 inputs",
     "UNVERIFIED, public information only (as sm89.mma_sync.e4m3.f16)", true},
    {MmaInstr::kSm89MmaSyncE4m3F32, "sm89.mma_sync.e4m3.f32", 16, 8, 32, Encoding::kE4m3fn, 8, 0,
     Comp::kBlockChain, kAdaQmmaF32,
     "UNVERIFIED: two 16-product blocks in natural k order (C in the first), window 13 bits, truncated terms, RZ to 13 bits (FP22), floor 2^-132",
     "UNVERIFIED, public information only (no Ada GPU): Khattak & Mikaitis AdaTC/L40STC parameters, re-checked by the research note on their published Ada/L40S outputs (C = 0)",
     true},
    {MmaInstr::kSm89MmaSyncE5m2F32, "sm89.mma_sync.e5m2.f32", 16, 8, 32, Encoding::kE5m2, 8, 0,
     Comp::kBlockChain, kAdaQmmaF32, "UNVERIFIED: as sm89.mma_sync.e4m3.f32 with e5m2 inputs",
     "UNVERIFIED, public information only (as sm89.mma_sync.e4m3.f32)", true},
    {MmaInstr::kMmaSyncE4m3F16, "sm90.mma_sync.e4m3.f16", 16, 8, 32, Encoding::kE4m3fn, 8, 1,
     Comp::kFp8ViaHmma, kHopperHmmaF16,
     "ptxas emulation: P1 = HMMA.F16(k in {4t,4t+1,16+4t,16+4t+1}, C=0); P2 = HMMA.F16(other 16 k, C=P1); D = hadd2.rn(C, P2)",
     "SASS F2FP.F16.E4M3.UNPACK_B + 2x HMMA.16816.F16 + HADD2 (SageAttention sm89 kernel built for sm_90a); end to end: data/hw/h100/sage recordings"},
    {MmaInstr::kMmaSyncE5m2F16, "sm90.mma_sync.e5m2.f16", 16, 8, 32, Encoding::kE5m2, 8, 1,
     Comp::kFp8ViaHmma, kHopperHmmaF16, "as sm90.mma_sync.e4m3.f16 with e5m2 inputs",
     "UNVERIFIED: by analogy with sm90.mma_sync.e4m3.f16 (no recorded kernel compiles it)", true},
    {MmaInstr::kWgmmaF16F16, "sm90.wgmma.f16.f16", 64, 8, 16, Encoding::kFp16, 16, 1,
     Comp::kBlockChain, kHopperHmmaF16,
     "block FMA: 16 products + fp16 C per k16, window 23+2 bits, FP16 RNE, floor 2^-21 (as HMMA.F16)",
     "SASS HGMMA.64xNx16.F16 (SageAttention 1 Triton P·V); assumed equal to HMMA.16816.F16 as HGMMA.F32 is to HMMA.F32; end to end: data/hw/h100/sage recordings"},
};

constexpr int kInstrCount = int(sizeof(kInstrTable) / sizeof(kInstrTable[0]));

// The table is consistent with itself and with the block FMA: rows in enum order; in_bits the
// format's width; a floating-point instruction's k made of whole blocks whose (format, parameters)
// the block FMA's fast path covers (block_fma_fast_path_fits), so block_fma_chain never refuses a
// chain of mma_dot and the fast path needs no fallback for a parameter set outside its range.
constexpr bool instr_table_consistent() {
  for (int i = 0; i < kInstrCount; ++i) {
    const MmaInstrInfo& t = kInstrTable[i];
    if (int(t.instr) != i || t.in_bits != encoding_traits(t.in).bits) return false;
    const bool integer = t.composition == Comp::kIntegerWrap || t.composition == Comp::kIntegerSat;
    if (integer != (t.acc == 2) || integer == encoding_traits(t.in).is_float) return false;
    if (integer && (t.in_bits > 8 || t.k > 64)) return false;  // integer_instr's 16/32-bit lanes
    if (t.composition == Comp::kBlockChain) {
      if (t.k % t.params.block != 0 || (t.params.block != 16 && t.params.block != 32) ||
          !block_fma_fast_path_fits(t.in, t.params) || t.params.acc_fp16 != (t.acc == 1))
        return false;
    }
    // The emulated FP8 mma.sync: two HMMA blocks of 16 fp16 products (widened operands) per k32.
    if (t.composition == Comp::kFp8ViaHmma &&
        (t.k != 32 || t.params.block != 16 || !block_fma_fast_path_fits(Encoding::kFp16, t.params)))
      return false;
  }
  return true;
}
static_assert(instr_table_consistent());

// HADD2 on fp16 bits: the exact sum (in FP64, which holds any two fp16 values' sum) rounded once
// to fp16, nearest even, subnormals kept; NaN canonical 0x7FFF as the GPU writes it.
std::uint32_t hadd_rn(std::uint32_t x, std::uint32_t y) {
  const double s = double(decode_f32<fp16>(std::uint16_t(x))) + double(decode_f32<fp16>(std::uint16_t(y)));
  if (s != s) return 0x7FFFu;
  return encode<fp16>(s, kCudaRn);
}

std::uint32_t fadd_rn(std::uint32_t x, std::uint32_t y) {
  // FADD on the CUDA cores: IEEE binary32 addition, round to nearest even, subnormals kept.
  // The host's FP32 addition is exactly that (no -ffast-math, SSE arithmetic, no FTZ/DAZ).
  const std::uint32_t r = f32_bits(f32_from_bits(x) + f32_from_bits(y));
  if ((r & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFFFFFu;  // canonical NaN, as the GPU writes it
  return r;
}

// sm_90 has no FP8 mma.sync: ptxas widens each byte pair of the A/B registers to f16x2
// (F2FP.F16.E4M3.UNPACK_B; exact) and runs two HMMA.16816.F32. The first takes bytes 0-1 of every
// register, i.e. k = 4t, 4t+1 and 16+4t, 16+4t+1 for t = 0..3, from a zero accumulator; the second
// takes bytes 2-3 and accumulates onto the first; a separate FADD then adds the instruction's C
// (recorded SASS, data/hw/h100/mma_probe_sass.txt.gz).
std::uint32_t fp8_via_hmma(const MmaInstrInfo& info, const std::uint32_t* ak,
                           const std::uint32_t* bk, std::uint32_t c) {
  // Widen exactly to fp16 first: an e4m3 subnormal is an fp16 normal, and the block FMA aligns on
  // the (unnormalised) operand exponents, so the fp16 encoding is what counts.
  static const auto widen_tables = [] {
    std::array<std::array<std::uint16_t, 256>, kEncodingCount> t{};
    for (int e = 0; e < kEncodingCount; ++e) {
      const EncodingTraits f = encoding_traits(Encoding(e));
      if (!f.is_float || f.bits != 8) continue;
      for (std::uint32_t x = 0; x < 256; ++x)
        t[int(f.enc)][x] = round_pack<fp16>(decompose_bits(f.enc, x), kCudaRn);
    }
    return t;
  }();
  const std::array<std::uint16_t, 256>& wt = widen_tables[int(info.in)];
  // The first HMMA's 16 operands, then the second's: one chain of two blocks from zero.
  std::uint32_t aw[32], bw[32];
  int nl = 0, nh = 16;
  for (int k = 0; k < 32; ++k) {
    int& j = (k & 3) < 2 ? nl : nh;
    aw[j] = wt[ak[k] & 0xFFu];
    bw[j++] = wt[bk[k] & 0xFFu];
  }
  const std::uint32_t h = block_fma_chain(Encoding::kFp16, aw, bw, 32, 0u, info.params);
  if (info.acc == 1) return hadd_rn(c, h);  // HADD2 of the instruction's fp16 C
  return fadd_rn(c, h);
}

// An integer encoding's value from its low bits, branch-free so that the dot product vectorises:
// the field minus twice its sign bit (two's complement; an unsigned field has no sign bit).
struct IntDecode {
  std::uint32_t mask, sign;
};
constexpr IntDecode int_decode(Encoding e) {
  const EncodingTraits& t = encoding_traits(e);
  return {(1u << t.bits) - 1, t.is_signed ? 1u << (t.bits - 1) : 0u};
}
constexpr std::int32_t int_value(std::uint32_t x, IntDecode d) {
  return std::int32_t(x & d.mask) - std::int32_t((x & d.sign) << 1);
}
// The same values as formats/encoding.hpp's int_from_encoding for every input of the integer
// instructions.
constexpr bool int_value_matches_encoding() {
  for (Encoding e : {Encoding::kS8, Encoding::kU8, Encoding::kS4}) {
    for (std::uint32_t x = 0; x < 256; ++x) {
      if (int_value(x, int_decode(e)) != int_from_encoding(e, x)) return false;
    }
  }
  return true;
}
static_assert(int_value_matches_encoding());

// IMMA and IGMMA alike (data/hw/h100/mma_h100.h5, mma_h100_igmma.h5): the exact sum of the
// instruction's products plus C, then wrapped, or for .satfinite clamped once; the IGMMA
// recordings rule out clamping partial sums inside an instruction (C at INT32_MAX with +127·b
// before -127·b in k order keeps INT32_MAX) and clamping only at a chain's end.
std::uint32_t integer_instr(const MmaInstrInfo& info, const std::uint32_t* ak,
                            const std::uint32_t* bk, std::uint32_t c) {
  const IntDecode da = int_decode(info.in), db = int_decode(mma_in_b(info));
  // At most 64 products of operands of at most 8 bits: exact in 16-bit operand lanes and a 32-bit
  // sum (< 64 · 2^16), the widths that let the compiler vectorise the loop.
  std::int32_t sum = 0;
  for (int k = 0; k < info.k; ++k)
    sum += std::int32_t(std::int16_t(int_value(ak[k], da))) * std::int16_t(int_value(bk[k], db));
  std::int64_t s = sum;
  if (info.composition == Comp::kIntegerSat) {
    s += std::int64_t(std::int32_t(c));
    s = s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : s);
    return std::uint32_t(std::int32_t(s));
  }
  return std::uint32_t(std::uint64_t(s) + c);  // wraps modulo 2^32
}

}  // namespace

const std::vector<MmaInstrInfo>& mma_instructions() {
  static const std::vector<MmaInstrInfo> k(std::begin(kInstrTable), std::end(kInstrTable));
  return k;
}

std::optional<MmaInstr> parse_mma_instr(const std::string& name) {
  for (const MmaInstrInfo& i : kInstrTable) {
    if (name == i.name) return i.instr;
  }
  return std::nullopt;
}

const MmaInstrInfo& mma_info(MmaInstr instr) {
  if (int(instr) < 0 || int(instr) >= kInstrCount)
    throw std::logic_error("mma_info: unknown instruction");
  return kInstrTable[int(instr)];  // rows in enum order (static_assert above)
}

Encoding mma_in_b(const MmaInstrInfo& info) {
  if (!info.mixed) return info.in;
  return info.in == Encoding::kS8 ? Encoding::kU8 : Encoding::kS8;
}

std::uint32_t mma_dot(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b, int K,
                      std::uint32_t c) {
  const MmaInstrInfo& info = mma_info(instr);
  if (K % info.k != 0) throw std::invalid_argument("K is not a multiple of the instruction's k");
  switch (info.composition) {
    case Comp::kBlockChain:  // the whole chain of blocks in one call
      return block_fma_chain(info.in, a, b, K, c, info.params);
    case Comp::kFp8ViaHmma:
      for (int k0 = 0; k0 < K; k0 += info.k) c = fp8_via_hmma(info, a + k0, b + k0, c);
      return c;
    case Comp::kIntegerWrap:
    case Comp::kIntegerSat:
      for (int k0 = 0; k0 < K; k0 += info.k) c = integer_instr(info, a + k0, b + k0, c);
      return c;
  }
  throw std::logic_error("mma_dot: unknown composition");
}

std::uint32_t mma_dot_promoted(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b,
                               int K, std::uint32_t c_f32, int every) {
  const MmaInstrInfo& info = mma_info(instr);
  if (info.acc == 2)
    throw std::invalid_argument("promotion applies to floating-point accumulators only");
  if (every <= 0 || every % info.k != 0) {
    throw std::invalid_argument(
        "the promotion interval is not a positive multiple of the instruction's k");
  }
  if (K % every != 0) throw std::invalid_argument("K is not a multiple of the promotion interval");
  std::uint32_t acc = c_f32;
  for (int k0 = 0; k0 < K; k0 += every) {
    std::uint32_t part = mma_dot(instr, a + k0, b + k0, every, 0u);  // +0 in fp32 and in fp16
    if (info.acc == 1) part = convert<fp32, fp16>(std::uint16_t(part), kCudaRn);  // exact widening
    acc = fadd_rn(acc, part);
  }
  return acc;
}

std::uint32_t mma_element(const std::uint8_t* row, int bits, int j) {
  if (bits == 16) return std::uint32_t(row[2 * j]) | (std::uint32_t(row[2 * j + 1]) << 8);
  if (bits == 8) return row[j];
  return (row[j / 2] >> (4 * (j & 1))) & 0xFu;
}

void mma_gemm(MmaInstr instr, int M, int N, int K, const std::uint8_t* A, const std::uint8_t* Bt,
              const std::uint32_t* C, std::uint32_t* D, int promote_every) {
  const MmaInstrInfo& info = mma_info(instr);
  const std::size_t row_bytes = std::size_t(K) * info.in_bits / 8;
  std::vector<std::uint32_t> a(static_cast<std::size_t>(K), 0u), b(static_cast<std::size_t>(K), 0u);
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < K; ++j) a[j] = mma_element(A + m * row_bytes, info.in_bits, j);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < K; ++j) b[j] = mma_element(Bt + n * row_bytes, info.in_bits, j);
      const std::uint32_t c = C[std::size_t(m) * N + n];
      D[std::size_t(m) * N + n] =
          promote_every > 0 ? mma_dot_promoted(instr, a.data(), b.data(), K, c, promote_every)
                            : mma_dot(instr, a.data(), b.data(), K, c);
    }
  }
}

}  // namespace attnsim
