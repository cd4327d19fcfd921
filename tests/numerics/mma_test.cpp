// numerics/block_fma and numerics/mma: the fast block FMA against its reference formulation on
// random and adversarial blocks (and the generator of those blocks against its own claims), and
// the two-level (promoted) accumulation against hand-derived values and against an independent
// composition with the host's FP32 addition. (The instruction models themselves are checked
// against the H100 recordings in tests/hw/mma_h100_test.cpp.)
#include "numerics/mma.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/block_fma.hpp"

namespace attnsim {
namespace {

// A block FMA configuration: an input format and a parameter set.
struct Cfg {
  Encoding in;
  BlockFmaParams p;
};

// The (format, parameters) pairs of the instruction models (numerics/mma.cpp's table: one per
// block chain, fp16 for the two HMMAs of the emulated FP8 mma.sync), plus a run-time block size
// (kHopperHmmaF32 with blocks of 8 bf16 products: block_fma's path for n other than 16 and 32).
std::vector<Cfg> block_configs() {
  std::vector<Cfg> cfgs;
  auto add = [&cfgs](Encoding in, const BlockFmaParams& p) {
    for (const Cfg& c : cfgs) {
      if (c.in == in && std::memcmp(&c.p, &p, sizeof p) == 0) return;
    }
    cfgs.push_back({in, p});
  };
  for (const MmaInstrInfo& i : mma_instructions()) {
    if (i.composition == MmaComposition::kBlockChain) add(i.in, i.params);
    if (i.composition == MmaComposition::kFp8ViaHmma) add(Encoding::kFp16, i.params);
  }
  BlockFmaParams eight = kHopperHmmaF32;
  eight.block = 8;
  add(Encoding::kBf16, eight);
  return cfgs;
}

// Operands drawn to stress the fast path, for any float format of at most 16 bits, the field
// widths taken from the format's traits:
//   mode 0: any encoding (specials included, so both paths are taken);
//   mode 1: finite, exponent field within a band of 4 around the bias (values in [2^-1, 2^3):
//           cancellation, ties at the window edge);
//   mode 2: zeros and subnormals only (exponent field 0).
std::uint32_t draw(std::mt19937& rng, Encoding fmt, int mode) {
  const EncodingTraits& t = encoding_traits(fmt);
  const std::uint32_t sign = 1u << (t.bits - 1), man_mask = (1u << t.man_bits) - 1;
  const int bias = (1 << (t.exp_bits - 1)) - 1;
  std::uint32_t x = rng() & ((1u << t.bits) - 1);
  if (mode == 1) {
    const std::uint32_t e = std::uint32_t(bias - 1) + rng() % 4;
    x = (x & (sign | man_mask)) | (e << t.man_bits);
  } else if (mode == 2) {
    x = (rng() % 3 == 0) ? (x & sign) : (x & (sign | man_mask));
  }
  return x;
}

// The generator does what its comments say, for every float format of at most 16 bits, checked
// on the decoded values (formats/encoding.hpp), not on the masks draw uses.
TEST(MmaBlockFma, GeneratorModesDrawWhatTheyClaim) {
  std::mt19937 rng(1);
  for (int e = 0; e < kEncodingCount; ++e) {
    const EncodingTraits t = encoding_traits(Encoding(e));
    if (!t.is_float || t.bits > 16) continue;
    const int bias = (1 << (t.exp_bits - 1)) - 1;
    const float min_normal = std::ldexp(1.0f, 1 - bias);
    int zeros = 0, subnormals = 0, exps_seen = 0, specials = 0;
    for (int i = 0; i < 20000; ++i) {
      const std::uint32_t x0 = draw(rng, t.enc, 0);
      EXPECT_EQ(x0 >> t.bits, 0u) << t.name;
      const float v0 = decode_float_bits(t.enc, x0);
      specials += !std::isfinite(v0);

      const std::uint32_t x1 = draw(rng, t.enc, 1);
      const float v1 = std::fabs(decode_float_bits(t.enc, x1));
      ASSERT_TRUE(v1 >= 0.5f && v1 < 8.0f) << t.name << " mode 1: 0x" << std::hex << x1;
      exps_seen |= 1 << (std::ilogb(v1) + 1);

      const std::uint32_t x2 = draw(rng, t.enc, 2);
      const float v2 = std::fabs(decode_float_bits(t.enc, x2));
      ASSERT_TRUE(v2 < min_normal) << t.name << " mode 2: 0x" << std::hex << x2;
      zeros += v2 == 0.0f;
      subnormals += v2 != 0.0f;
    }
    EXPECT_EQ(exps_seen, 0xF) << t.name << ": mode 1 covers the 4 exponents 2^-1 .. 2^2";
    EXPECT_GT(zeros, 4000) << t.name;
    EXPECT_GT(subnormals, 4000) << t.name;
    EXPECT_GT(specials, 0) << t.name << ": mode 0 draws Inf/NaN encodings too";
  }
}

TEST(MmaBlockFma, FastPathEqualsReference) {
  std::mt19937 rng(2024);
  long compared = 0;
  const std::vector<Cfg> cfgs = block_configs();
  for (const Cfg& cfg : cfgs) {
    const int n = cfg.p.block;
    std::vector<std::uint32_t> a(n), b(n);
    for (int trial = 0; trial < 60000; ++trial) {
      const int mode = trial % 4;
      for (int i = 0; i < n; ++i) {
        a[i] = draw(rng, cfg.in, mode == 3 ? 0 : mode);
        b[i] = draw(rng, cfg.in, mode == 3 ? 1 : mode);
      }
      std::uint32_t c;
      if (cfg.p.acc_fp16) {
        c = draw(rng, Encoding::kFp16, trial % 3);
      } else {
        c = rng();
        if (trial % 3 == 1) c &= 0x807FFFFFu;                     // subnormal or zero C
        if (trial % 3 == 2) c = (c & 0x83FFFFFFu) | 0x3C000000u;  // C near 1, the usual chain case
      }
      ASSERT_EQ(block_fma(cfg.in, a.data(), b.data(), n, c, cfg.p),
                block_fma_ref(cfg.in, a.data(), b.data(), n, c, cfg.p))
          << encoding_name(cfg.in) << " block " << n << " neab " << cfg.p.neab << " trial "
          << trial;
      ++compared;
    }
  }
  EXPECT_GE(cfgs.size(), 12u);  // 11 instruction parameter sets and the run-time block size
  EXPECT_EQ(compared, long(cfgs.size()) * 60000);
}

// Whole chains (the batched path of mma_dot: blocks decoded ahead of the serial C dependency,
// batches of 8 and a remainder) against block_fma_ref applied block by block, with
// occasional special operands so a batch mixes fast and general blocks; every instruction that
// is a chain of blocks (HMMA, HGMMA, QGMMA, sm_89 QMMA), parameters from its table row.
TEST(MmaBlockFma, ChainsEqualReferenceBlockByBlock) {
  std::mt19937 rng(77);
  int chains = 0;
  for (const MmaInstrInfo& info : mma_instructions()) {
    if (info.composition != MmaComposition::kBlockChain) continue;
    ++chains;
    const int n = info.params.block;
    for (int trial = 0; trial < 3000; ++trial) {
      const int blocks = 1 + trial % 21;  // 1..21: full batches of 8 and remainders
      const int K = ((blocks * n + info.k - 1) / info.k) * info.k;
      std::vector<std::uint32_t> a(K), b(K);
      for (int i = 0; i < K; ++i) {
        const bool special_ok = trial % 5 == 0;
        a[i] = draw(rng, info.in, special_ok ? 0 : 1 + (i % 7 == 0));
        b[i] = draw(rng, info.in, special_ok ? 0 : 1);
      }
      const std::uint32_t c0 = info.params.acc_fp16 ? draw(rng, Encoding::kFp16, 1)
                                                    : ((rng() & 0x83FFFFFFu) | 0x3C000000u);
      std::uint32_t want = c0;
      for (int k0 = 0; k0 < K; k0 += n)
        want = block_fma_ref(info.in, a.data() + k0, b.data() + k0, n, want, info.params);
      ASSERT_EQ(mma_dot(info.instr, a.data(), b.data(), K, c0), want)
          << info.name << " trial " << trial;
    }
  }
  EXPECT_EQ(chains, 16);  // hmma x3, wgmma fp8 x4, hgmma x3, sm89 x4, hmma1688 x2
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
        a[i] = draw(rng, info.in, 1);
        b[i] = draw(rng, info.in, 1);
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

// The emulated FP8 mma.sync with an fp16 accumulator (SageAttention's sm89 kernel on sm_90a, read
// off its SASS): per k32, HMMA.F16 over k in {4t, 4t+1, 16+4t, 17+4t} from zero, HMMA.F16 over
// the other 16 onto it, then an HADD2 of C; composed here from block_fma_ref on operands widened by
// formats/, and an fp16 addition through FP64.
TEST(MmaFp8Emulation, F16AccumulatorIsTwoHmmaF16PlusHadd) {
  std::mt19937 rng(9);
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  for (MmaInstr instr : {MmaInstr::kMmaSyncE4m3F16, MmaInstr::kMmaSyncE5m2F16}) {
    const MmaInstrInfo& info = mma_info(instr);
    std::vector<std::uint32_t> a(64), b(64);
    for (int trial = 0; trial < 4000; ++trial) {
      for (int i = 0; i < 64; ++i) {
        a[i] = draw(rng, info.in, trial % 3);
        b[i] = draw(rng, info.in, 1);
      }
      std::uint32_t want = draw(rng, Encoding::kFp16, 1);
      const std::uint32_t c0 = want;
      for (int k0 = 0; k0 < 64; k0 += 32) {
        std::uint32_t lo_a[16], lo_b[16], hi_a[16], hi_b[16];
        int nl = 0, nh = 0;
        for (int k = 0; k < 32; ++k) {
          const std::uint32_t wa = encode_float_bits(Encoding::kFp16,
                                                     decode_float_bits(info.in, a[k0 + k]), kRne);
          const std::uint32_t wb = encode_float_bits(Encoding::kFp16,
                                                     decode_float_bits(info.in, b[k0 + k]), kRne);
          if ((k & 3) < 2) {
            lo_a[nl] = wa;
            lo_b[nl++] = wb;
          } else {
            hi_a[nh] = wa;
            hi_b[nh++] = wb;
          }
        }
        const std::uint32_t lo = block_fma_ref(Encoding::kFp16, lo_a, lo_b, 16, 0u, kHopperHmmaF16);
        const std::uint32_t h = block_fma_ref(Encoding::kFp16, hi_a, hi_b, 16, lo, kHopperHmmaF16);
        const double sum = double(decode_float_bits(Encoding::kFp16, want)) +
                           double(decode_float_bits(Encoding::kFp16, h));
        want = sum != sum ? 0x7FFFu : encode_float_bits(Encoding::kFp16, sum, kRne);
      }
      ASSERT_EQ(mma_dot(instr, a.data(), b.data(), 64, c0), want) << info.name << " " << trial;
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
