// The sdpa and fa3 presets (sim/sdpa, sim/fa3) against a sample of the H100 recordings
// (data/hw/h100/sdpa, data/hw/h100/fa3): per backend a few small cases that cover its kernel
// choices (cuDNN's 128-key tiles with causal and Lq != Lk, FA2's non-split and split-KV kernels
// with the combine, the CUTLASS 64x64, 64x128 and 32x128_gmem kernels, math's FFMA-chain GEMMs
// and warp softmax, FA3 in fp16/bf16/e4m3 with and without splits), bit for bit on every row
// digest, stored element and LSE; and negative controls (one stage choice swapped for its nearest
// neighbour must break exactness: the recordings can tell them apart). sdpa_h100_long_test.cpp
// replays every recorded case and holds the measured floors of the parts no model reproduces.
#include <gtest/gtest.h>

#include <string>

#include "tests/hw/sdpa_check.hpp"

namespace attnsim {
namespace {

using hwtest::find_case;
using hwtest::SdpaCase;
using hwtest::Tally;

void expect_exact(SdpaBackend b, const char* name, const char* dt) {
  const H5Reader r(hwtest::kSdpaFile);
  bool recorded = false;
  const Tally t = hwtest::check_sdpa(r, b, find_case(hwtest::sdpa_cases(), name), dt, &recorded);
  ASSERT_TRUE(recorded) << name << " " << dt;
  EXPECT_GT(t.rows, 0);
  EXPECT_TRUE(t.exact()) << "sdpa:backend=" << sdpa_backend_name(b) << " " << name << " " << dt
                         << ": " << t.text();
}

TEST(SdpaH100, CudnnSampleBitForBit) {
  for (const char* dt : {"fp16", "bf16"}) {
    expect_exact(SdpaBackend::kCudnn, "r77_d64", dt);
    expect_exact(SdpaBackend::kCudnn, "r333x200_d64_causal", dt);  // Lq > Lk, top-left causal
  }
  expect_exact(SdpaBackend::kCudnn, "exp2_d64", "fp16");  // the exp and the LSE form
}

TEST(SdpaH100, FlashSampleBitForBit) {
  for (const char* dt : {"fp16", "bf16"}) expect_exact(SdpaBackend::kFlash, "r77_d64", dt);
  expect_exact(SdpaBackend::kFlash, "r512_h1_d128", "fp16");  // 4 splits and the combine
}

TEST(SdpaH100, EfficientSampleBitForBit) {
  for (const char* dt : {"fp16", "bf16"}) expect_exact(SdpaBackend::kEfficient, "r77_d64", dt);
  expect_exact(SdpaBackend::kEfficient, "cancel300_d64", "fp16");
}

TEST(SdpaH100, MathSampleBitForBit) {
  for (const char* dt : {"fp16", "bf16"}) expect_exact(SdpaBackend::kMath, "r77_d64", dt);
  expect_exact(SdpaBackend::kMath, "r333_d64_causal", "bf16");
}

TEST(SdpaH100, SplitCountsAreTheKernels) {
  // flash_api.cpp num_splits_heuristic as the recordings' kernel names show it
  // (data/hw/h100/sdpa/README.md) and the replays select: 8 for r1000_d128, 33 for dec4097_d128
  // (8 items, 33 blocks of 128 keys: a split per block fills the 264 slots), 4 for r512_h1_d128,
  // 2 for r512_h16_d128, 1 for 32 heads of 77 rows.
  SdpaOptions o;
  o.backend = SdpaBackend::kFlash;
  auto splits = [&](const char* n) {
    const SdpaCase& c = find_case(hwtest::sdpa_cases(), n);
    return sdpa_num_splits(o, AttentionShape{c.b, c.hq, c.hkv, c.lq, c.lk, c.d, c.d});
  };
  EXPECT_EQ(splits("r1000_d128"), 8);
  EXPECT_EQ(splits("dec4097_d128"), 33);
  EXPECT_EQ(splits("r512_h1_d128"), 4);
  EXPECT_EQ(splits("r512_h16_d128"), 2);
  EXPECT_EQ(splits("r77_b4h32_d64_causal"), 1);
  o.backend = SdpaBackend::kCudnn;
  EXPECT_EQ(splits("r1000_d128"), 1);
}

TEST(SdpaH100, EfficientWideHeadsBitForBit) {
  // fmha_cutlassF_*_64x128_rf_sm80 (d 96, 128; exp2_d128: the score scaled first, then log2 e, and
  // the LSE) and the 32x128_gmem kernel (d 256: the FP32 output buffer's epilogue per block).
  expect_exact(SdpaBackend::kEfficient, "r200_d96", "fp16");
  expect_exact(SdpaBackend::kEfficient, "exp2_d128", "fp16");
  for (const char* dt : {"fp16", "bf16"}) expect_exact(SdpaBackend::kEfficient, "r200_d256_causal", dt);
}

TEST(Fa3H100, SampleBitForBit) {
  const H5Reader r(hwtest::kFa3File);
  const SdpaCase& c = find_case(hwtest::fa3_cases(), "r200_d64_causal");
  for (const char* dt : {"fp16", "bf16", "e4m3"})
    for (const char* sp : {"nosplit", "split3"}) {
      const Tally t = hwtest::check_fa3(r, c, dt, sp);
      EXPECT_GT(t.rows, 0) << dt << " " << sp;
      EXPECT_TRUE(t.exact()) << c.name << " " << dt << " " << sp << ": " << t.text();
    }
  const Tally t = hwtest::check_fa3(r, find_case(hwtest::fa3_cases(), "r77x333_d64_causal"), "e4m3",
                                    "nosplit");  // bottom-right causal, Lq < Lk
  EXPECT_TRUE(t.exact()) << t.text();
}

// Negative controls: the nearest alternative of each new stage choice, run on a recorded case,
// must miss (the recordings select the choice; a test that passed for either could not fail).
Tally run_with(SdpaBackend b, const char* name, const char* dt, void (*change)(Pipeline&)) {
  const H5Reader r(hwtest::kSdpaFile);
  const SdpaCase& c = find_case(hwtest::sdpa_cases(), name);
  SdpaOptions o;
  o.backend = b;
  o.dtype = hwtest::dtype_enc(dt);
  const std::string g = std::string(name) + "/" + dt;
  const AttentionInput in = hwtest::case_input(r, g, c, o.dtype);
  Pipeline p = sdpa_pipeline(o, in.shape);
  change(p);
  const PipelineResult res = sdpa_attention(in, o, p);
  const std::string bn = sdpa_backend_name(b);
  return hwtest::compare_output(r, g + "/o_" + bn + "_rows", g + "/o_" + bn,
                                b == SdpaBackend::kMath ? "" : g + "/lse_" + bn, c, o.dtype, res.o,
                                res.lse);
}

TEST(SdpaH100, NegativeControlsMiss) {
  // cuDNN's row sum (per-lane block partial, then fma(alpha, l, b)) vs FA2's fused form.
  EXPECT_FALSE(run_with(SdpaBackend::kCudnn, "r333x200_d64", "fp16", [](Pipeline& p) {
                 p.softmax.row_sum = RowSum::kQuadFma;
               }).exact());
  // cuDNN's LSE (one FFMA) vs the unfused natural form.
  EXPECT_FALSE(run_with(SdpaBackend::kCudnn, "exp2_d64", "fp16", [](Pipeline& p) {
                 p.softmax.lse = LseModel::kNatural;
               }).exact());
  // The CUTLASS kernel's m16n8k8 blocks vs m16n8k16 ones.
  EXPECT_FALSE(run_with(SdpaBackend::kEfficient, "r77_d64", "fp16", [](Pipeline& p) {
                 p.qk.dot.instr = p.pv.dot.instr = MmaInstr::kHmmaF16F32;
               }).exact());
  // The CUTLASS kernel's score fl(acc·scale) then ·log2 e vs one coefficient fl(scale·log2 e).
  EXPECT_FALSE(run_with(SdpaBackend::kEfficient, "exp2_d128", "fp16", [](Pipeline& p) {
                 p.softmax.scale_log2 = ScaleLog2::kDeviceFloat;
               }).exact());
  // The 32x128_gmem kernel's output-buffer epilogue vs the register-file kernels' O·alpha + P·V.
  EXPECT_FALSE(run_with(SdpaBackend::kEfficient, "r200_d256_causal", "fp16", [](Pipeline& p) {
                 p.pv.acc = PvAccumulate::kIntoC;
                 p.pv.chunk_add = ChunkAdd::kFadd;
                 p.rescale.fused = false;
                 p.normalize.kind = Normalize::kRcp;
               }).exact());
  // Its D = fma(a, chunk, fl(beta·O)) vs the chunk added to the rescaled O (no FMA, no division
  // folded into the last block).
  EXPECT_FALSE(run_with(SdpaBackend::kEfficient, "r200_d256_causal", "fp16", [](Pipeline& p) {
                 p.pv.chunk_add = ChunkAdd::kFadd;
                 p.rescale.fused = false;
                 p.normalize.kind = Normalize::kRcp;
               }).exact());
  // math: the FFMA-chain GEMM vs products rounded then added.
  EXPECT_FALSE(run_with(SdpaBackend::kMath, "r77_d64", "fp16", [](Pipeline& p) {
                 p.qk.dot = p.pv.dot = DotModel{DotModel::kFp32};
               }).exact());
  // FA2 built with UNFUSE_FMA vs the contracted exponent.
  EXPECT_FALSE(run_with(SdpaBackend::kFlash, "r77_d64", "fp16", [](Pipeline& p) {
                 p.softmax.fma = true;
               }).exact());
}

}  // namespace
}  // namespace attnsim
