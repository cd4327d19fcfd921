// The sdpa and fa3 presets (sim/sdpa, sim/fa3) apart from the H100 recordings (tests/hw replays
// those): the pipelines' coupling rules refuse what the new stage choices cannot run, V's FP8 scale
// stays applied whichever epilogue a counterfactual picks, split-KV with one split is the plain
// pipeline, and the notes name exactly the parts no recording verifies.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/fa3/fa3.hpp"
#include "sim/lean/lean.hpp"
#include "sim/sdpa/sdpa.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

TEST(SdpaPresets, CouplingsRefuseWhatTheNewChoicesCannotRun) {
  const AttentionShape s{1, 2, 2, 64, 64, 64, 64};
  SdpaOptions o;
  o.backend = SdpaBackend::kMath;
  Pipeline p = sdpa_pipeline(o, s);
  p.normalize.kind = Normalize::kRcp;  // P normalized before P·V and divided again
  EXPECT_THROW(validate(p), std::invalid_argument);
  p = sdpa_pipeline(o, s);
  p.k.prescale = Prescale::kNone;  // half of the scale missing
  EXPECT_THROW(validate(p), std::invalid_argument);
  o.backend = SdpaBackend::kCudnn;
  p = sdpa_pipeline(o, s);
  p.softmax.state = StateType::kFp64;  // ftz=on is an FP32 state's
  EXPECT_THROW(validate(p), std::invalid_argument);
  p = sdpa_pipeline(o, s);
  p.softmax.lse = LseModel::kNaturalDiv;  // needs the scaled max: cuDNN has it
  EXPECT_NO_THROW(validate(p));
  p.softmax.max_domain = MaxDomain::kRaw;
  EXPECT_THROW(validate(p), std::invalid_argument);
  // The math pipeline holds one KV block per row: a shorter block is refused at prepare.
  o.backend = SdpaBackend::kMath;
  p = sdpa_pipeline(o, s);
  p.tile.block_kv = 32;
  EXPECT_THROW(prepare(simtest::random_input(s, false, 1), p), std::invalid_argument);
  // PyTorch's refusals.
  o.backend = SdpaBackend::kFlash;
  AttentionInput in = simtest::random_input({1, 2, 2, 32, 64, 64, 64}, true, 2);
  EXPECT_THROW(sdpa_attention(in, o, sdpa_pipeline(o, in.shape)), std::invalid_argument);
  o.dtype = Encoding::kE4m3fn;
  EXPECT_THROW(sdpa_pipeline(o, s), std::invalid_argument);
}

TEST(Fa3Preset, VScaleStaysAppliedWithAnotherEpilogue) {
  // FP8: V's descale multiplies 1/l (v_dequant=rcp). An attribution counterfactual that makes the
  // epilogue a division must still apply it: the output moves by rounding only, not by s_v.
  const AttentionInput in = simtest::random_input({1, 2, 2, 96, 96, 64, 64}, false, 3, 4.0);
  Fa3Options o;
  o.dtype = Encoding::kE4m3fn;
  Pipeline p = fa3_pipeline(o, in.shape, false);
  p.out.enc = Encoding::kFp32;  // bf16 would hide the reciprocal's last bits
  const PipelineResult a = fa3_attention(in, o, p);
  Pipeline q = p;
  q.normalize.kind = Normalize::kDiv;
  const PipelineResult b = fa3_attention(in, o, q);
  EXPECT_LT(rel_diff(b.o, a.o), 1e-2);
  EXPECT_GT(rel_diff(b.o, a.o), 0.0);  // a different rounding, so the switch took effect
}

TEST(Fa3Preset, OneSplitIsThePipelineAndSplitsStayClose) {
  const AttentionInput in = simtest::random_input({1, 2, 1, 40, 700, 64, 64}, false, 4);
  Fa3Options o;
  const Pipeline p = fa3_pipeline(o, in.shape, false);
  const PreparedInput prep = prepare(in, p);
  const PipelineResult plain = run_pipeline(prep, p);
  const PipelineResult one = split_kv_attention(prep, p, 1, SplitCombine::kFa3, 64);
  EXPECT_EQ(one.o, plain.o);
  EXPECT_EQ(one.lse, plain.lse);
  for (SplitCombine c : {SplitCombine::kFa3, SplitCombine::kFa2}) {
    const PipelineResult three = split_kv_attention(prep, p, 3, c, 64);
    EXPECT_NE(three.o, plain.o);  // a different order of the same sums
    EXPECT_LT(rel_diff(three.o, plain.o), 1e-2);
    for (std::size_t i = 0; i < plain.lse.size(); ++i)
      EXPECT_NEAR(three.lse[i], plain.lse[i], 1e-5 * std::fabs(plain.lse[i]) + 1e-6) << i;
  }
}

TEST(Fa3Preset, IntervalFlushLongerThanTheRowIsTheSingleChain) {
  // pv_flush=N (vllm_fa3:interval=N) with N past the tile's block count never merges before the
  // end, and the final merge fma(1, 0, O) is O: upstream FA3's single FP8 chain, bit for bit.
  // Every block is a merge point with N = 1, which changes the bits; the merge order matters.
  const AttentionInput in = simtest::random_input({1, 2, 2, 70, 1500, 128, 128}, true, 5, 3.0);
  Fa3Options o;
  o.dtype = Encoding::kE4m3fn;
  const Pipeline single = fa3_pipeline(o, in.shape, true);
  const PipelineResult a = fa3_attention(in, o, single);
  Pipeline late = single;
  late.pv.flush = 1000;
  validate(late);
  const PipelineResult b = fa3_attention(in, o, late);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  Pipeline every = single;
  every.pv.flush = 1;
  const PipelineResult c = fa3_attention(in, o, every);
  EXPECT_NE(c.o, a.o);
  EXPECT_LT(rel_diff(c.o, a.o), 5e-2);
  // The same through the method strings: vllm_fa3's interval option sets pv_flush, and pv_flush
  // needs O as the product's C.
  Fa3Options v = o;
  v.build = Fa3Build::kVllm;
  v.fp8_interval = 4;
  EXPECT_EQ(fa3_pipeline(v, in.shape, true).pv.flush, 4);
  Pipeline bad = fa3_pipeline(v, in.shape, true);
  bad.pv.acc = PvAccumulate::kChunk;
  EXPECT_THROW(validate(bad), std::invalid_argument);
  // Read, not recorded: said once, as every unverified part.
  const std::vector<std::string> notes = fa3_unverified(v, in.shape, true);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("interval=4"), std::string::npos);
  EXPECT_NE(notes[0].find("UNVERIFIED"), std::string::npos);
  v.fp8_interval = 0;
  EXPECT_TRUE(fa3_unverified(v, in.shape, true).empty());
}

TEST(SdpaPresets, CudnnDecodeChoicesSpelledAndRefusedWhereTheyCannotRun) {
  SdpaOptions o;
  const Pipeline p = sdpa_pipeline(o, {1, 8, 2, 1, 600, 64, 64});
  EXPECT_EQ(p.softmax.row_sum, RowSum::kAtomicWarps);
  EXPECT_EQ(p.pv.warps, 4);
  EXPECT_EQ(sdpa_pipeline(o, {1, 8, 2, 2, 600, 64, 64}).pv.warps, 1);  // Lq > 1: the sm90 kernel
  // The pipeline's option list spells the new choices.
  const std::string d = describe(p);
  for (const char* k : {"rowsum=atomic_warps", "rowsum_order=3210", "pv_warps=4", "lse=natural.lg2fma"})
    EXPECT_NE(d.find(k), std::string::npos) << k << " in " << d;
  EXPECT_NO_THROW(validate(p));
  auto refused = [&](void (*change)(Pipeline&)) {
    Pipeline b = p;
    change(b);
    EXPECT_THROW(validate(b), std::invalid_argument) << describe(b);
  };
  refused([](Pipeline& b) { b.tile.block_kv = 64; });  // 4 warps of 32 keys
  refused([](Pipeline& b) { b.softmax.rowsum_order = {0, 0, 1, 2}; });
  refused([](Pipeline& b) { b.pv.warps = 3; });
  refused([](Pipeline& b) { b.pv.acc = PvAccumulate::kChunk; });
  refused([](Pipeline& b) { b.pv.flush = 2; });
  refused([](Pipeline& b) { b.rescale.kind = Rescale::kDivide; });
  refused([](Pipeline& b) { b.softmax.max_domain = MaxDomain::kRaw; });  // lse=natural.lg2fma
}

TEST(SdpaPresets, NotesNameTheUnverifiedParts) {
  SdpaOptions o;
  EXPECT_TRUE(sdpa_unverified(o, {1, 4, 4, 200, 200, 128, 128}).empty());
  // cuDNN decode: recorded for d 64 and 128 and launches of 4, 16, 32 and 33 tiles.
  EXPECT_TRUE(sdpa_unverified(o, {1, 4, 4, 1, 500, 128, 128}).empty());
  EXPECT_TRUE(sdpa_unverified(o, {2, 4, 4, 1, 4097, 64, 64}).empty());
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 4, 1, 500, 96, 96}).size(), 1u);  // d 96 decode not recorded
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 4, 1, 1200, 128, 128}).size(), 1u);  // 10 tiles
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 4, 1, 8192, 128, 128}).size(), 1u);  // 64 tiles
  o.backend = SdpaBackend::kEfficient;
  EXPECT_TRUE(sdpa_unverified(o, {1, 4, 4, 200, 200, 64, 64}).empty());
  EXPECT_TRUE(sdpa_unverified(o, {1, 4, 4, 200, 200, 256, 256}).empty());  // 32x128_gmem
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 2, 200, 200, 128, 128}).size(), 1u);  // GQA
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 4, 200, 200, 80, 80}).size(), 1u);    // d 80 not recorded
  o.backend = SdpaBackend::kMath;
  EXPECT_EQ(sdpa_unverified(o, {1, 4, 4, 1, 2000, 64, 64}).size(), 2u);  // gemv, long rows
  Fa3Options f;
  EXPECT_TRUE(fa3_unverified(f, {1, 4, 4, 200, 200, 128, 128}, true).empty());
  EXPECT_EQ(fa3_unverified(f, {1, 4, 4, 200, 200, 96, 96}, true).size(), 1u);
}

}  // namespace
}  // namespace attnsim
