// numerics/mma: the fast block FMA against its reference formulation on random and adversarial
// blocks, and the two-level (promoted) accumulation against hand-derived values and against an
// independent composition with the host's FP32 addition. (The instruction models themselves are
// checked against the H100 recordings in tests/hw/mma_h100_test.cpp.)
#include "numerics/mma.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace attnsim {
namespace {

struct Cfg {
  MmaIn in;
  int bits;
  BlockFmaParams p;
};

// The parameter sets the instruction models use (numerics/mma.cpp) plus a run-time block size.
const Cfg kCfgs[] = {
    {MmaIn::kFp16, 16, {16, 2, 23, false, -133, false}},
    {MmaIn::kBf16, 16, {16, 2, 23, false, -133, false}},
    {MmaIn::kFp16, 16, {16, 2, 10, true, -21, true}},
    {MmaIn::kE4m3, 8, {32, -10, 13, false, -133, false}},
    {MmaIn::kE5m2, 8, {32, -10, 13, false, -133, false}},
    {MmaIn::kE4m3, 8, {16, -10, 10, true, -20, true}},
    {MmaIn::kE5m2, 8, {16, -10, 13, false, -132, false}},
    {MmaIn::kBf16, 16, {8, 2, 23, false, -133, false}},
    {MmaIn::kE4m3, 8, {32, -10, 10, true, -21, true}},
    {MmaIn::kE5m2, 8, {32, -10, 10, true, -21, true}},
};

// Operands drawn to stress the fast path: any encoding (specials included, so both paths are
// taken), narrow exponent bands (cancellation, ties at the window edge), zeros and subnormals.
std::uint32_t draw(std::mt19937& rng, int bits, int mode) {
  const std::uint32_t mask = (1u << bits) - 1;
  std::uint32_t x = rng() & mask;
  if (mode == 1) {  // finite, exponent field within a band of 4 around the middle
    const int man = bits == 16 ? 10 : 3, ebits = bits == 16 ? 5 : 4;
    const std::uint32_t e = ((1u << (ebits - 1)) - 2 + rng() % 4) & ((1u << ebits) - 1);
    x = (x & ((1u << man) - 1)) | (e << man) | (x & (1u << (bits - 1)));
  } else if (mode == 2) {  // zeros and subnormals
    const int man = bits == 16 ? 10 : 3;
    x = (rng() % 3 == 0) ? (x & (1u << (bits - 1)))
                         : (x & ((1u << man) - 1)) | (x & (1u << (bits - 1)));
  }
  return x;
}

TEST(MmaBlockFma, FastPathEqualsReference) {
  std::mt19937 rng(2024);
  long compared = 0;
  for (const Cfg& cfg : kCfgs) {
    const int n = cfg.p.block;
    std::vector<std::uint32_t> a(n), b(n);
    for (int trial = 0; trial < 60000; ++trial) {
      const int mode = trial % 4;
      for (int i = 0; i < n; ++i) {
        a[i] = draw(rng, cfg.bits, mode == 3 ? 0 : mode);
        b[i] = draw(rng, cfg.bits, mode == 3 ? 1 : mode);
      }
      std::uint32_t c;
      if (cfg.p.acc_fp16) {
        c = draw(rng, 16, trial % 3);
      } else {
        c = rng();
        if (trial % 3 == 1) c &= 0x807FFFFFu;                     // subnormal or zero C
        if (trial % 3 == 2) c = (c & 0x83FFFFFFu) | 0x3C000000u;  // C near 1, the usual chain case
      }
      ASSERT_EQ(block_fma(cfg.in, a.data(), b.data(), n, c, cfg.p),
                block_fma_ref(cfg.in, a.data(), b.data(), n, c, cfg.p))
          << "format " << int(cfg.in) << " block " << n << " trial " << trial;
      ++compared;
    }
  }
  EXPECT_EQ(compared, long(sizeof(kCfgs) / sizeof(kCfgs[0])) * 60000);
}

// Whole chains (the batched path of mma_dot: blocks decoded ahead of the serial C dependency,
// batches of 8 and a remainder) against block_fma_ref applied block by block, with
// occasional special operands so a batch mixes fast and general blocks.
TEST(MmaBlockFma, ChainsEqualReferenceBlockByBlock) {
  struct Chain {
    MmaInstr instr;
    MmaIn in;
    int bits;
    BlockFmaParams p;
  };
  const Chain chains[] = {
      {MmaInstr::kHmmaF16F32, MmaIn::kFp16, 16, {16, 2, 23, false, -133, false}},
      {MmaInstr::kHmmaBf16F32, MmaIn::kBf16, 16, {16, 2, 23, false, -133, false}},
      {MmaInstr::kHmmaF16F16, MmaIn::kFp16, 16, {16, 2, 10, true, -21, true}},
      {MmaInstr::kWgmmaE4m3F32, MmaIn::kE4m3, 8, {32, -10, 13, false, -133, false}},
      {MmaInstr::kWgmmaE5m2F32, MmaIn::kE5m2, 8, {32, -10, 13, false, -133, false}},
      {MmaInstr::kWgmmaE4m3F16, MmaIn::kE4m3, 8, {32, -10, 10, true, -21, true}},
      {MmaInstr::kWgmmaE5m2F16, MmaIn::kE5m2, 8, {32, -10, 10, true, -21, true}},
  };
  std::mt19937 rng(77);
  for (const Chain& ch : chains) {
    const int n = ch.p.block;
    for (int trial = 0; trial < 3000; ++trial) {
      const int blocks = 1 + trial % 21;  // 1..21: full batches of 8 and remainders
      const int K = blocks * n;
      std::vector<std::uint32_t> a(K), b(K);
      for (int i = 0; i < K; ++i) {
        const bool special_ok = trial % 5 == 0;
        a[i] = draw(rng, ch.bits, special_ok ? 0 : 1 + (i % 7 == 0));
        b[i] = draw(rng, ch.bits, special_ok ? 0 : 1);
      }
      const std::uint32_t c0 =
          ch.p.acc_fp16 ? draw(rng, 16, 1) : ((rng() & 0x83FFFFFFu) | 0x3C000000u);
      std::uint32_t want = c0;
      for (int k0 = 0; k0 < K; k0 += n)
        want = block_fma_ref(ch.in, a.data() + k0, b.data() + k0, n, want, ch.p);
      ASSERT_EQ(mma_dot(ch.instr, a.data(), b.data(), K, c0), want)
          << mma_info(ch.instr).name << " trial " << trial;
    }
  }
}

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// e4m3 2^-6 (0x08, smallest normal) times 2^-9 (0x01, smallest subnormal) = 2^-15 per product.
// One FP22 chain with C = 1.0 truncates every product (2^-15 lies below the 13-bit window under
// 1.0: ulp 2^-13), so D stays 1.0 over any K. Promoted every 32: each chunk sums 32 · 2^-15 =
// 2^-10 exactly from zero, and four FP32 adds give 1 + 4 · 2^-10 = 1 + 2^-8 exactly.
TEST(MmaPromotion, RescuesWhatTheFp22WindowDrops) {
  std::vector<std::uint32_t> a(128, 0x08u), b(128, 0x01u);
  const std::uint32_t one = bits_of(1.0f);
  EXPECT_EQ(mma_dot(MmaInstr::kWgmmaE4m3F32, a.data(), b.data(), 128, one), one);
  EXPECT_EQ(mma_dot_promoted(MmaInstr::kWgmmaE4m3F32, a.data(), b.data(), 128, one, 32),
            bits_of(1.0f + 0x1p-8f));
  EXPECT_EQ(
      mma_dot_promoted(MmaInstr::kWgmmaE4m3F32, a.data(), b.data(), 128, one, 128),
      bits_of(1.0f + 0x1p-8f));  // one chunk: 4 instructions from 0 sum 2^-8 exactly, then + 1
}

// FP16 accumulation promoted to FP32 (SageAttention2++ "fp32+fp16", sm_89 model, UNVERIFIED
// parameters but exact here): 16 products of 2^-4 · 2^-4 = 2^-8 in one block sum 2^-4 exactly,
// 32 per instruction = 2^-3; promoting every 32 over K = 256 adds eight 2^-3 chunks to C = 2048:
// in fp16 alone 2048 + 2^-3 is lost (fp16 ulp at 2048 is 2), in FP32 it is kept: 2049.
TEST(MmaPromotion, Fp16ChunksWidenExactly) {
  std::vector<std::uint32_t> a(256, 0x18u), b(256, 0x18u);  // e4m3 2^-4
  EXPECT_EQ(mma_dot_promoted(MmaInstr::kSm89MmaSyncE4m3F16, a.data(), b.data(), 256,
                             bits_of(2048.0f), 32),
            bits_of(2049.0f));
  const std::uint32_t fp16_2048 = 0x6800;
  EXPECT_EQ(mma_dot(MmaInstr::kSm89MmaSyncE4m3F16, a.data(), b.data(), 256, fp16_2048), fp16_2048);
}

// The promoted chain is chunk-wise instruction chains from +0 plus FP32 additions: compare with
// that composition written with the host's float addition (round to nearest even) on random data.
TEST(MmaPromotion, EqualsChunkChainsPlusHostFp32Adds) {
  std::mt19937 rng(5);
  for (MmaInstr instr : {MmaInstr::kWgmmaE4m3F32, MmaInstr::kWgmmaE5m2F32, MmaInstr::kHmmaF16F32,
                         MmaInstr::kHmmaBf16F32, MmaInstr::kMmaSyncE4m3F32}) {
    const MmaInstrInfo& info = mma_info(instr);
    const int K = 8 * info.k * 4;
    std::vector<std::uint32_t> a(K), b(K);
    for (int trial = 0; trial < 2000; ++trial) {
      for (int i = 0; i < K; ++i) {
        a[i] = draw(rng, info.in_bits, 1);
        b[i] = draw(rng, info.in_bits, 1);
      }
      const float c = std::ldexp(float(rng() % 2001) - 1000.0f, -int(rng() % 12));
      for (int every : {info.k, 4 * info.k, K}) {
        float acc = c;
        for (int k0 = 0; k0 < K; k0 += every) {
          acc = acc + std::bit_cast<float>(mma_dot(instr, a.data() + k0, b.data() + k0, every, 0u));
        }
        ASSERT_EQ(mma_dot_promoted(instr, a.data(), b.data(), K, bits_of(c), every), bits_of(acc))
            << info.name << " every " << every;
      }
    }
  }
}

TEST(MmaPromotion, RejectsBadIntervals) {
  std::vector<std::uint32_t> a(64, 0u), b(64, 0u);
  EXPECT_THROW(mma_dot_promoted(MmaInstr::kImmaS8, a.data(), b.data(), 64, 0u, 32),
               std::invalid_argument);
  EXPECT_THROW(mma_dot_promoted(MmaInstr::kWgmmaE4m3F32, a.data(), b.data(), 64, 0u, 16),
               std::invalid_argument);
  EXPECT_THROW(mma_dot_promoted(MmaInstr::kHmmaF16F32, a.data(), b.data(), 64, 0u, 48),
               std::invalid_argument);
  EXPECT_THROW(mma_dot_promoted(MmaInstr::kHmmaF16F32, a.data(), b.data(), 64, 0u, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace attnsim
