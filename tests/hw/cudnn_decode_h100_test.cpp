// cuDNN's decode kernel as the sdpa preset runs it for one query row (the sm80 flash_fprop_wmma
// 16x128 kernel, its split form and lean_reduction_kernel: sim/sdpa/README.md) against every
// recorded cuDNN decode output of the H100, bit for bit: the Lq = 1 cases of
// data/hw/h100/sdpa/sdpa_h100.h5 (every row digest, the outputs stored in full, every LSE) and the
// decode situations of the cuDNN sweeps of data/hw/h100/schedule/invariance_h100.h5 (split counts
// 32 to 1 by batch); and negative controls: the prefill kernel's arithmetic, other warp orders of
// the atomic row sum, one O for the 4 warps, the score rounded once, the prefill LSE form, a
// contiguous split partition and FA2's combine must each miss.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <string>

#include "sim/lean/lean.hpp"
#include "tests/hw/invariance_sweeps.hpp"
#include "tests/hw/sdpa_check.hpp"

namespace attnsim {
namespace {

using hwtest::SdpaCase;
using hwtest::Tally;

// Every recorded cuDNN decode case (Lq = 1) and dtype, run by `run` (the preset's pipeline, the
// input as prepared, the call's split count) and compared with the recording; `head_dim` 0: all.
Tally decode_cases(const std::function<PipelineResult(const PreparedInput&, const SdpaOptions&,
                                                      const Pipeline&, int)>& run,
                   const std::function<void(Pipeline&)>& change = {}, int head_dim = 0) {
  const H5Reader r(hwtest::kSdpaFile);
  Tally all;
  for (const SdpaCase& c : hwtest::sdpa_cases()) {
    if (c.lq != 1 || (head_dim && c.d != head_dim)) continue;
    for (const char* dt : {"fp16", "bf16"}) {
      const std::string g = std::string(c.name) + "/" + dt;
      if (!r.exists(g + "/o_cudnn_rows")) continue;
      SdpaOptions o;
      o.dtype = hwtest::dtype_enc(dt);
      const AttentionInput in = hwtest::case_input(r, g, c, o.dtype);
      Pipeline p = sdpa_pipeline(o, in.shape);
      if (change) change(p);
      validate(o, in);
      const PipelineResult res = run(prepare(in, p), o, p, sdpa_num_splits(o, in.shape));
      const Tally t = hwtest::compare_output(r, g + "/o_cudnn_rows", g + "/o_cudnn", g + "/lse_cudnn",
                                             c, o.dtype, res.o, res.lse);
      std::printf("[ cudnn decode ] %-16s %s splits %2d: %s\n", c.name, dt,
                  sdpa_num_splits(o, in.shape), t.text().c_str());
      all.add(t);
    }
  }
  return all;
}

PipelineResult preset_run(const PreparedInput& in, const SdpaOptions& o, const Pipeline& p, int) {
  return sdpa_attention(in, o, p);
}

TEST(CudnnDecodeH100, EveryRecordedRowAndLseBitForBit) {
  const Tally t = decode_cases(preset_run);
  // dec500_gqa_d128 (unsplit), dec4097_d128 and dec4097_gqa_d64 (32 splits), uniform4097_d64
  // (32 splits, stored in full), fp16 and bf16: 33 rows and LSE values per dtype.
  EXPECT_EQ(t.rows, 66);
  EXPECT_EQ(t.lse, 66);
  EXPECT_EQ(t.elems, 128);
  EXPECT_TRUE(t.exact()) << t.text();
}

TEST(CudnnDecodeH100, SplitCountsOfTheRecordedLaunches) {
  // The fit rule (sim/sdpa/README.md) on the launches the recordings show: lean_reduction ran for
  // the 4,097-key cases (32 splits), not for dec500 (4 tiles).
  SdpaOptions o;
  auto splits = [&](int b, int hq, int hkv, int lk) {
    return sdpa_num_splits(o, AttentionShape{b, hq, hkv, 1, lk, 128, 128});
  };
  EXPECT_EQ(splits(1, 8, 2, 500), 1);
  EXPECT_EQ(splits(2, 4, 4, 4097), 32);   // 8 units, 33 tiles
  EXPECT_EQ(splits(1, 16, 2, 4097), 32);  // 2 units
  EXPECT_EQ(splits(1, 32, 8, 4096), 32);  // the invariance sweep: 8 units per sequence
  EXPECT_EQ(splits(2, 32, 8, 4096), 16);
  EXPECT_EQ(splits(8, 32, 8, 4096), 4);
  EXPECT_EQ(splits(16, 32, 8, 4096), 1);  // 128 units: the unsplit kernel
  EXPECT_EQ(splits(1, 16, 16, 4096), 16);
  EXPECT_EQ(splits(16, 16, 16, 2048), 1);  // 256 units
  EXPECT_EQ(sdpa_num_splits(o, AttentionShape{1, 8, 8, 2, 4096, 128, 128}), 1);  // prefill kernel
}

TEST(CudnnDecodeH100, InvarianceSweepsDecodeSituationsBitForBit) {
  // A sample for the default suite: the 9 batch sizes of the fp16 d 64 decode sweep. All 21
  // situations (both decode sweeps and the prefill/decode sweep's decode batches 1, 8, 32; split
  // counts 32, 16, 8, 4 and 1) run in InvarianceH100Long (the exhaustive suite).
  hwtest::check_sweeps({"sdpa_cudnn_dec4096_fp16_d64"}, /*decode_only=*/true);
}

// Negative controls: each changed choice must miss somewhere on the recorded decode cases (a test
// that passed for either could not tell them apart).
TEST(CudnnDecodeH100, NegativeControlsMiss) {
  // The sm90 prefill kernel's arithmetic (what the preset ran before the decode kernel).
  EXPECT_FALSE(decode_cases(preset_run, [](Pipeline& p) {
                 SdpaOptions o;
                 o.dtype = p.out.enc;
                 p = sdpa_pipeline(o, AttentionShape{1, 1, 1, 2, 128, 128, 128});
               }).exact());
  // The atomic row sum's warp order: every other order of the 24 than the fit ones misses for
  // d 128 ({0, 2} first, then 1, then 3); the reverse order misses for d 64 too.
  for (const std::array<std::uint8_t, 4> w :
       {std::array<std::uint8_t, 4>{3, 1, 2, 0}, std::array<std::uint8_t, 4>{0, 1, 2, 3}})
    EXPECT_FALSE(decode_cases(preset_run, [w](Pipeline& p) { p.softmax.rowsum_order = w; }, 128)
                     .exact())
        << int(w[0]) << int(w[1]) << int(w[2]) << int(w[3]);
  EXPECT_FALSE(decode_cases(preset_run, [](Pipeline& p) {
                 p.softmax.rowsum_order = {0, 1, 2, 3};
               }, 64).exact());
  // One O for the 4 warps (P·V over the whole tile into one accumulator).
  EXPECT_FALSE(decode_cases(preset_run, [](Pipeline& p) { p.pv.warps = 1; }).exact());
  // The score scaled once by fl(scale·log2 e) (the prefill kernel's form).
  EXPECT_FALSE(decode_cases(preset_run, [](Pipeline& p) {
                 p.softmax.scale_log2 = ScaleLog2::kDeviceFloat;
               }).exact());
  // The prefill kernel's LSE form fma(m, ln2, fl(lg2(l)·ln2)).
  EXPECT_FALSE(decode_cases(preset_run, [](Pipeline& p) {
                 p.softmax.lse = LseModel::kNaturalFma;
               }).exact());
  // Contiguous split ranges (FA2's) instead of the strided tiles.
  EXPECT_FALSE(decode_cases([](const PreparedInput& in, const SdpaOptions&, const Pipeline& p,
                               int splits) {
                 return split_kv_attention(in, p, splits, SplitCombine::kCudnnLean,
                                           in.shape.head_dim, SplitPartition::kContiguous);
               }).exact());
  // FA2's combine of normalized partials instead of lean_reduction.
  EXPECT_FALSE(decode_cases([](const PreparedInput& in, const SdpaOptions&, const Pipeline& p,
                               int splits) {
                 return split_kv_attention(in, p, splits, SplitCombine::kFa2, in.shape.head_dim,
                                           SplitPartition::kStrided);
               }).exact());
}

}  // namespace
}  // namespace attnsim
