// KV-cache memory accounting (sim/turbo/memory.hpp) against hand-computed bit counts (spec §5):
// every expected value below is written out as the sum it stands for.
#include "sim/turbo/memory.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace attnsim {
namespace {

constexpr double kFp16Token128 = 2 * 128 * 16;  // K and V, d = 128

TEST(TurboMemoryTest, BitsPerTokenD128) {
  // 4-bit: 128·4 codes + 128·(8 + 8)/64 s^int, z^int + 16/64 stage-1 scale, for K and for V.
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 4), 512 + 32 + 0.25);
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 4, 4), 1088.5);
  EXPECT_NEAR(kFp16Token128 / 1088.5, 3.763, 5e-4);
  // 2-bit: 2·(256 + 32 + 0.25).
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 2, 2), 576.5);
  EXPECT_NEAR(kFp16Token128 / 576.5, 7.105, 5e-4);
  // Half the caches at 2 bits (§5.2): (1088.5 + 576.5) / 2.
  EXPECT_DOUBLE_EQ(turbo_mixed_bits_per_token(128, 128, 0.5), 832.5);
  EXPECT_NEAR(kFp16Token128 / 832.5, 4.920, 5e-4);
  // FP16 s and z: 2·(512 + 128·32/64 + 0.25) = 1152.5; mixed (1152.5 + 640.5) / 2 = 896.5.
  TurboMemoryFormat f16;
  f16.sz_bits = 16;
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 4, 4, f16), 1152.5);
  EXPECT_DOUBLE_EQ(turbo_mixed_bits_per_token(128, 128, 0.5, f16), 896.5);
  EXPECT_NEAR(kFp16Token128 / 896.5, 4.569, 5e-4);
  // FP32 stage-1 scales: 32/64 per token and cache instead of 16/64.
  TurboMemoryFormat f32;
  f32.scale_bits = 32;
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 4, 4, f32), 1089.0);
  // Codes only (no metadata): 4.000× and 5.333×.
  TurboMemoryFormat bare;
  bare.sz_bits = 0;
  bare.scale_bits = 0;
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 4, 4, bare), 1024.0);
  EXPECT_DOUBLE_EQ(turbo_mixed_bits_per_token(128, 128, 0.5, bare), 768.0);
}

TEST(TurboMemoryTest, BitsPerTokenD64) {
  // d = 64 (SmolLM2): 4-bit 2·(256 + 16 + 0.25) = 544.5, 2-bit 2·(128 + 16 + 0.25) = 288.5.
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(64, 64, 4, 4), 544.5);
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(64, 64, 2, 2), 288.5);
  EXPECT_NEAR(2048 / 544.5, 3.761, 5e-4);
  EXPECT_NEAR(2048 / turbo_mixed_bits_per_token(64, 64, 0.5), 4.917, 5e-4);
}

TEST(TurboMemoryTest, HeadBitsAverage) {
  // Three heads: (4,4), (2,4), (2,2) -> (1088.5 + 832.5 + 576.5) / 3; K at 2 and V at 4 costs
  // 288.25 + 544.25 = 832.5.
  const HeadBits hb{{4, 2, 2}, {4, 4, 2}};
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, 2, 4), 832.5);
  EXPECT_DOUBLE_EQ(turbo_bits_per_token(128, 128, hb), (1088.5 + 832.5 + 576.5) / 3);
  EXPECT_THROW(turbo_bits_per_token(128, 128, HeadBits{{4, 3}, {4, 4}}), std::invalid_argument);
  EXPECT_THROW(turbo_bits_per_token(128, 128, HeadBits{{4}, {4, 4}}), std::invalid_argument);
  EXPECT_THROW(turbo_mixed_bits_per_token(128, 128, 1.5), std::invalid_argument);
}

TEST(TurboMemoryTest, WholeCacheWithBuffer) {
  // Two heads, one at 4 and one at 2 bits, 1024 tokens: 16 blocks, an empty buffer, the two
  // universal scales (FP16) of each head.
  const HeadBits mixed{{4, 2}, {4, 2}};
  CacheMemory m = turbo_cache_memory(1024, 128, 128, mixed);
  EXPECT_DOUBLE_EQ(m.codes, 1024.0 * (2 * 128 * 4 + 2 * 128 * 2));
  EXPECT_DOUBLE_EQ(m.metadata, 2 * 16.0 * (2 * 128 * 16 + 2 * 16));  // per block: s,z of 256 ch.
  EXPECT_DOUBLE_EQ(m.residual, 2 * 2 * 16.0);
  EXPECT_DOUBLE_EQ(m.fp16, 2 * 1024.0 * 4096);
  EXPECT_DOUBLE_EQ(m.total(), 1024 * (1088.5 + 576.5) + 64);
  EXPECT_NEAR(m.ratio(), 4.920, 5e-4);
  // 1560 tokens (AQuA 1304 + 256): 24 blocks, 24 INT8 tokens in the buffer of each head.
  m = turbo_cache_memory(1560, 128, 128, mixed);
  EXPECT_DOUBLE_EQ(m.total(), 1536 * (1088.5 + 576.5) + 2 * (24.0 * 256 * 8 + 32));
  EXPECT_NEAR(m.ratio(), 4.812, 5e-4);
  // Fewer tokens than a block: everything in the buffer (INT8: 2× FP16 minus the scales).
  m = turbo_cache_memory(10, 1, 128, 128, 4);
  EXPECT_DOUBLE_EQ(m.codes, 0.0);
  EXPECT_DOUBLE_EQ(m.metadata, 0.0);
  EXPECT_DOUBLE_EQ(m.residual, 10.0 * 256 * 8 + 32);
  // Uniform 4-bit at 4096 tokens approaches the per-token 3.763.
  m = turbo_cache_memory(4096, 8, 128, 128, 4);
  EXPECT_DOUBLE_EQ(m.total(), 8 * (4096 * 1088.5 + 32));
  EXPECT_THROW(turbo_cache_memory(-1, 1, 128, 128, 4), std::invalid_argument);
  EXPECT_THROW(turbo_cache_memory(64, 1, 128, 128, 3), std::invalid_argument);
}

TEST(KiviMemoryTest, BitsPerToken) {
  // K: 128·4 codes + 128 channels · (16 + 16) / 64 tokens; V: 128·4 + 2 groups · (16 + 16).
  EXPECT_DOUBLE_EQ(kivi_bits_per_token(128, 128), 512 + 64 + 512 + 64);
  EXPECT_NEAR(kFp16Token128 / 1152, 3.556, 5e-4);
  KiviMemoryFormat k2;
  k2.bits = 2;
  EXPECT_DOUBLE_EQ(kivi_bits_per_token(128, 128, k2), 256 + 64 + 256 + 64);
  EXPECT_DOUBLE_EQ(kFp16Token128 / 640, 6.4);
  KiviMemoryFormat g32;
  g32.group = 32;
  g32.residual = 64;
  EXPECT_DOUBLE_EQ(kivi_bits_per_token(128, 128, g32), 512 + 128 + 512 + 128);
}

TEST(KiviMemoryTest, WholeCacheWithResidual) {
  // The spec's count (kWindow): 64 FP16 tokens of K and V, the rest at 1152 bits.
  KiviMemoryFormat w;
  w.residual_count = KiviResidualCount::kWindow;
  CacheMemory m = kivi_cache_memory(1024, 1, 128, 128, w);
  EXPECT_DOUBLE_EQ(m.total(), 960 * 1152.0 + 64 * 4096.0);
  EXPECT_NEAR(m.ratio(), 3.066, 5e-4);
  m = kivi_cache_memory(4096, 1, 128, 128, w);
  EXPECT_NEAR(m.ratio(), 3.419, 5e-4);
  // llama_kivi.py's state between steps at 1024 tokens: K has no tail (1024 = 16·64), V keeps 64.
  m = kivi_cache_memory(1024, 1, 128, 128);
  EXPECT_DOUBLE_EQ(m.codes, 1024 * 512.0 + 960 * 512.0);
  EXPECT_DOUBLE_EQ(m.metadata, 1024 * 64.0 + 960 * 64.0);  // 128·32/64 (K), 2·32 (V) per token
  EXPECT_DOUBLE_EQ(m.residual, 64 * 128 * 16.0);
  EXPECT_DOUBLE_EQ(m.total(), 1024 * 576.0 + 960 * 576.0 + 131072);
  EXPECT_NEAR(m.ratio(), 3.293, 5e-4);
  // At 1000 tokens: K quantizes 960 (15 chunks), keeps 40; V quantizes 936, keeps 64.
  m = kivi_cache_memory(1000, 2, 128, 128);
  EXPECT_DOUBLE_EQ(m.codes, 2 * (960 * 512.0 + 936 * 512.0));
  EXPECT_DOUBLE_EQ(m.residual, 2 * (40 + 64) * 128 * 16.0);
  // Fewer tokens than R: all FP16.
  m = kivi_cache_memory(50, 1, 128, 128);
  EXPECT_DOUBLE_EQ(m.codes + m.metadata, 0.0);
  EXPECT_DOUBLE_EQ(m.ratio(), 1.0);
  KiviMemoryFormat bad;
  bad.residual = 96;
  EXPECT_THROW(kivi_cache_memory(64, 1, 128, 128, bad), std::invalid_argument);
  EXPECT_THROW(kivi_cache_memory(64, 1, 128, 40), std::invalid_argument);  // V groups of 64
}

}  // namespace
}  // namespace attnsim
