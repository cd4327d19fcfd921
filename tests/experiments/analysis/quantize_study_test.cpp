// experiments/analysis/quantize_study: granularity parsing and the error figures of
// `attnsim quantize`, against values worked out by hand (not against the quantizers themselves).
#include "experiments/analysis/quantize_study.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "experiments/common/error.hpp"

namespace attnsim {
namespace {

TEST(QuantizeStudy, ParsesGranularities) {
  EXPECT_EQ(parse_granularity("per_block:64").kind, Granularity::kPerBlock);
  EXPECT_EQ(parse_granularity("per_block:64").block, 64);
  EXPECT_EQ(parse_granularity("per_warp:16").kind, Granularity::kPerWarp);
  EXPECT_EQ(parse_granularity("per_channel").kind, Granularity::kPerChannel);
  EXPECT_EQ(parse_granularity("sage_sm90_k_per_thread").kind, Granularity::kSagePerThreadK);
  EXPECT_EQ(parse_granularity("sage_sm90_k_per_thread").block, 128);
  for (const char* bad :
       {"per_block:", "per_block:0", "per_block:x", "per_block:64x", "tile", ""}) {
    EXPECT_THROW(parse_granularity(bad), UsageError) << bad;
  }
  EXPECT_THROW(quantization_error(nullptr, 0, 0, "int3", parse_granularity("per_tensor"), false),
               UsageError);
}

// 2 tokens × 2 channels, x = [[127, 1.4], [-63.5, 0]], symmetric INT8 per tensor: scale = 1,
// q = [127, 1, -64 (ties to even of -63.5), 0] → errors [0, -0.4, -0.5, 0].
TEST(QuantizeStudy, Int8PerTensorByHand) {
  const std::vector<float> x{127.0f, 1.4f, -63.5f, 0.0f};
  const QuantError e =
      quantization_error(x.data(), 2, 2, "symmetric_int8", parse_granularity("per_tensor"), false);
  const double d1 = 0.4 + 0.5, x1 = 127 + 1.4 + 63.5;
  EXPECT_NEAR(e.rel_l1, d1 / x1, 1e-7);
  EXPECT_NEAR(e.max_abs, 0.5, 1e-7);
  EXPECT_NEAR(e.rel_fro, std::sqrt((0.16 + 0.25) / (127.0 * 127 + 1.96 + 63.5 * 63.5)), 1e-7);
  EXPECT_EQ(e.groups, 1);
}

// Per-channel scales make a tensor whose channels are each ±a power-of-two pattern exact, where
// per-tensor scaling cannot represent the small channel: channel 1 holds 1/64 ≪ channel 0's 100.
TEST(QuantizeStudy, PerChannelBeatsPerTensorOnChannelOutliers) {
  std::vector<float> x;
  for (int t = 0; t < 8; ++t) {
    x.push_back(t % 2 ? 100.0f : -100.0f);
    x.push_back(t % 3 ? 0.015625f : -0.015625f);
  }
  const QuantError tensor =
      quantization_error(x.data(), 8, 2, "symmetric_int8", parse_granularity("per_tensor"), false);
  const QuantError channel =
      quantization_error(x.data(), 8, 2, "symmetric_int8", parse_granularity("per_channel"), false);
  // Per tensor: scale 100/127, 1/64 rounds to 0 → the small channel is lost entirely.
  EXPECT_NEAR(tensor.max_abs, 0.015625, 1e-9);
  EXPECT_EQ(channel.max_abs, 0.0);  // ±amax quantizes to ±127 exactly
  EXPECT_EQ(channel.groups, 2);
}

// Smooth-K: a channel offset (the per-channel bias of real K) dominates amax; subtracting the
// mean (exact here: the mean is representable) leaves ±1, which INT8 per-tensor holds exactly.
TEST(QuantizeStudy, SmoothingRemovesChannelBias) {
  std::vector<float> x;
  for (int t = 0; t < 4; ++t) {
    x.push_back(1000.0f + (t % 2 ? 1.0f : -1.0f));
    x.push_back(t % 2 ? -1.0f : 1.0f);
  }
  const GroupMap g = parse_granularity("per_tensor");
  const QuantError raw = quantization_error(x.data(), 4, 2, "symmetric_int8", g, false);
  const QuantError smooth = quantization_error(x.data(), 4, 2, "symmetric_int8", g, true);
  EXPECT_GT(raw.max_abs, 0.5);  // scale 1001/127 ≈ 7.9: ±1 rounds to 0
  EXPECT_EQ(smooth.max_abs, 0.0);
  EXPECT_TRUE(std::isinf(smooth.sqnr_db));
}

// FP8 per token: values that are e4m3 codes times a power of two round-trip exactly when the
// scale amax/448 is that power of two; e5m2 (2 mantissa bits) rounds 1.375 (1.011b) to 1.5 (tie
// to even: 1.01|1 → 1.10).
TEST(QuantizeStudy, Fp8RoundTrip) {
  const std::vector<float> x{448.0f, 1.375f, -0.5f, 3.0f};  // one token
  const GroupMap tok = parse_granularity("per_token");
  EXPECT_EQ(quantization_error(x.data(), 1, 4, "e4m3fn", tok, false).max_abs, 0.0);
  const std::vector<float> y{57344.0f, 1.375f};
  const QuantError e = quantization_error(y.data(), 1, 2, "e5m2", tok, false);
  EXPECT_NEAR(e.max_abs, 0.125, 1e-12);
}

}  // namespace
}  // namespace attnsim
