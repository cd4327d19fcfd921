// The UNVERIFIED sm_89 (Ada) FP8 mma.sync configurations: their designed behaviour only. There is
// no Ada recording here, so these tests say that the model does what the published parameters
// describe (two 16-product blocks in natural k order, 13-bit window, RNE to fp16 per block / RZ to
// FP22), with expected bit patterns worked out by hand from that description
// (Khattak & Mikaitis, arXiv 2512.07004; huweim/emulation_sys), never by running the model; they
// claim nothing about the hardware.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/mma.hpp"

namespace attnsim {
namespace {

// e4m3fn encodings used below (bias 7; exponent field 0 = subnormal, m * 2^-9).
constexpr std::uint32_t kOne = 0x38, kMinusOne = 0xB8, k448 = 0x7E, kM448 = 0xFE;
constexpr std::uint32_t kP5 = 0x10;     // 2^-5
constexpr std::uint32_t kP6 = 0x08;     // 2^-6 (smallest normal)
constexpr std::uint32_t kP7 = 0x04;     // 2^-7 (subnormal 4 * 2^-9)
constexpr std::uint32_t kP8 = 0x02;     // 2^-8 (subnormal 2 * 2^-9)
constexpr std::uint32_t k1p5P6 = 0x0C;  // 1.5 * 2^-6
constexpr std::uint32_t kP4 = 0x18;     // 2^-4

// D of one m16n8k32 instruction on one row of A and one column of B (k -> (a, b)), C bits.
std::uint32_t one_instr(
    MmaInstr instr, const std::vector<std::pair<int, std::pair<std::uint32_t, std::uint32_t>>>& t,
    std::uint32_t c) {
  std::vector<std::uint32_t> a(32, 0u), b(32, 0u);
  for (const auto& [k, ab] : t) {
    a[k] = ab.first;
    b[k] = ab.second;
  }
  return mma_dot(instr, a.data(), b.data(), 32, c);
}

constexpr MmaInstr kF16 = MmaInstr::kSm89MmaSyncE4m3F16;
constexpr MmaInstr kF32 = MmaInstr::kSm89MmaSyncE4m3F32;

TEST(MmaSm89Unverified, ListedAsUnverified) {
  for (const char* name : {"sm89.mma_sync.e4m3.f16", "sm89.mma_sync.e5m2.f16",
                           "sm89.mma_sync.e4m3.f32", "sm89.mma_sync.e5m2.f32"}) {
    const auto instr = parse_mma_instr(name);
    ASSERT_TRUE(instr.has_value()) << name;
    const MmaInstrInfo& info = mma_info(*instr);
    EXPECT_TRUE(info.unverified) << name;
    EXPECT_NE(std::string(info.model).find("UNVERIFIED"), std::string::npos) << name;
    EXPECT_NE(std::string(info.evidence).find("UNVERIFIED"), std::string::npos) << name;
    EXPECT_EQ(info.k, 32);
  }
  // Every H100 instruction is recorded except the e5m2 form of the fp16-accumulating FP8
  // mma.sync (built by analogy with the recorded e4m3 one: SageAttention never issues it).
  for (const auto& i : mma_instructions()) {
    if (std::string(i.name).rfind("sm90.", 0) == 0) {
      EXPECT_EQ(i.unverified, std::string(i.name) == "sm90.mma_sync.e5m2.f16") << i.name;
    }
  }
}

TEST(MmaSm89Unverified, Fp16AccumulatorPassesC) {
  // A = B = 0: an fp16 C has 10 fraction bits, inside the 13-bit window: D = C.
  EXPECT_EQ(one_instr(kF16, {}, 0x3C01u), 0x3C01u);  // 1 + 2^-10
  EXPECT_EQ(one_instr(kF16, {}, 0xD555u), 0xD555u);
  EXPECT_EQ(one_instr(kF16, {}, 0x0001u), 0x0001u);  // smallest fp16 subnormal
}

TEST(MmaSm89Unverified, Fp16ThirteenBitWindowTruncatesTerms) {
  // 1 + 2^-11 + 2^-14 + 2^-14: exact 1 + 2^-11 + 2^-13 rounds up to 1 + 2^-10 (0x3C01); in the
  // 13-bit window below 2^0 the two 2^-14 products are truncated to 0, leaving the tie
  // 1 + 2^-11, which RNE sends to 1.0.
  EXPECT_EQ(
      one_instr(kF16, {{0, {kOne, kOne}}, {1, {kP6, kP5}}, {2, {kP7, kP7}}, {3, {kP7, kP7}}}, 0u),
      0x3C00u);
}

TEST(MmaSm89Unverified, Fp16RoundsToNearestEven) {
  EXPECT_EQ(one_instr(kF16, {{0, {kOne, kOne}}, {1, {kP6, kP5}}}, 0u),
            0x3C00u);  // 1 + 2^-11: tie, even
  EXPECT_EQ(one_instr(kF16, {{0, {kOne, kOne}}, {1, {k1p5P6, kP4}}}, 0u),
            0x3C02u);  // 1 + 1.5 * 2^-10: tie, up
}

TEST(MmaSm89Unverified, TwoBlocksInNaturalKOrder) {
  // +1 and -1 in k 0-15 cancel; 2^-16 at k = 16 is alone in the second block: 2^-16 = fp16 0x0100.
  // (One 32-product block would truncate it to 0 in the window of 2^0.)
  EXPECT_EQ(one_instr(kF16, {{0, {kOne, kOne}}, {1, {kOne, kMinusOne}}, {16, {kP8, kP8}}}, 0u),
            0x0100u);
  // Reversed: 2^-16 first (block 1 gives 0x0100), then +1 - 1 with that C: C is truncated in the
  // window of 2^0, so D = +0.
  EXPECT_EQ(one_instr(kF16, {{0, {kP8, kP8}}, {16, {kOne, kOne}}, {17, {kOne, kMinusOne}}}, 0u),
            0x0000u);
  // The same pair inside one block (k 15 and 0) leaves 2^-16 truncated: +0.
  EXPECT_EQ(one_instr(kF16, {{0, {kOne, kOne}}, {15, {kOne, kMinusOne}}, {8, {kP8, kP8}}}, 0u),
            0x0000u);
}

TEST(MmaSm89Unverified, Fp16RoundsBetweenTheBlocks) {
  // 2^-11 in each block on top of 1: each block's tie goes to 1.0, so D = 1.0; an FP32
  // intermediate would give 1 + 2^-10 (0x3C01).
  EXPECT_EQ(one_instr(kF16, {{0, {kOne, kOne}}, {1, {kP6, kP5}}, {16, {kP6, kP5}}}, 0u), 0x3C00u);
}

TEST(MmaSm89Unverified, Fp16OverflowAndSpecials) {
  EXPECT_EQ(one_instr(kF16, {{0, {k448, k448}}}, 0u), 0x7C00u);  // 200704 -> +Inf
  EXPECT_EQ(one_instr(kF16, {{0, {kM448, k448}}}, 0u), 0xFC00u);
  EXPECT_EQ(one_instr(kF16, {{0, {k448, k448}}, {1, {k448, kM448}}}, 0u),
            0x0000u);                                             // exact cancellation
  EXPECT_EQ(one_instr(kF16, {{0, {0x7Fu, kOne}}}, 0u), 0x7FFFu);  // e4m3 NaN
  EXPECT_EQ(one_instr(kF16, {}, 0x8000u),
            0x0000u);  // C = -0 gives +0 (assumed as recorded on sm_90)
  EXPECT_EQ(one_instr(kF16, {}, 0xFC00u), 0xFC00u);
}

TEST(MmaSm89Unverified, Fp32IsFp22WithTwoBlocks) {
  // FP22: C = 1 + 2^-23 with A = B = 0 loses its low 10 bits (SageAttention2's test).
  EXPECT_EQ(one_instr(kF32, {}, 0x3F800001u), 0x3F800000u);
  EXPECT_EQ(one_instr(kF32, {}, 0x3F802000u), 0x3F802000u);  // 1 + 2^-10: kept
  // Natural halves: 2^-16 alone in the second block survives (0x37800000 = 2^-16).
  EXPECT_EQ(one_instr(kF32, {{0, {kOne, kOne}}, {1, {kOne, kMinusOne}}, {16, {kP8, kP8}}}, 0u),
            0x37800000u);
  // RZ: 1 + 2^-14 + 2^-14 in one block: both below the window of 2^0 (LSB 2^-13), D = 1.0.
  EXPECT_EQ(one_instr(kF32, {{0, {kOne, kOne}}, {1, {kP7, kP7}}, {2, {kP7, kP7}}}, 0u),
            0x3F800000u);
}

TEST(MmaSm89Unverified, E5m2Fp16) {
  // e5m2: 1.0 = 0x3C, 2^-5 = 0x28, 2^-6 = 0x24. 1 + 2^-11 ties to 1.0.
  EXPECT_EQ(
      one_instr(MmaInstr::kSm89MmaSyncE5m2F16, {{0, {0x3Cu, 0x3Cu}}, {1, {0x24u, 0x28u}}}, 0u),
      0x3C00u);
  EXPECT_EQ(
      one_instr(MmaInstr::kSm89MmaSyncE5m2F16, {{0, {0x7Cu, 0x3Cu}}, {1, {0xFCu, 0x3Cu}}}, 0u),
      0x7FFFu);
}

}  // namespace
}  // namespace attnsim
