// sim/lean/timing_model: the event simulation against closed forms (one CTA alone, a saturated
// wave, waves of latency-bound CTAs, a lean host waiting for its split, FlashDecoding's combine),
// the bookkeeping (slot time = busy + idle, tiles conserved), and the fit recovering parameters
// it generated its own measurements with.
#include "sim/lean/timing_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sim/lean/schedule.hpp"

namespace attnsim {
namespace {

constexpr double kTileBytes = 2.0 * 128 * 128 * 2;  // K + V tile, block_n 128, D 128, fp16

TimingParams params() {
  TimingParams p;
  p.tile_us = 2.5;
  p.hbm_gbs = 3000;
  p.launch_us = 3;
  p.segment_us = 2;
  p.flag_us = 4;
  p.merge_us = 0.25;
  return p;
}

LeanShape shape(int batch, int hq, int hk, int len_kv) {
  LeanShape s;
  s.batch = batch;
  s.heads_q = hq;
  s.heads_kv = hk;
  s.len_kv = len_kv;
  s.head_dim = 128;
  s.m_blocks = LeanMBlocks::kAll;
  return s;
}

TEST(TimingModel, OneCtaAloneIsLatencyBound) {
  const TimingParams p = params();
  const LeanPlan plan = splitkv_plan(shape(1, 1, 1, 128 * 40), 1);  // one CTA, 40 tiles
  const KernelTime k = predict_splitkv_time(plan, 128, p);
  ASSERT_EQ(k.ctas.size(), 1u);
  EXPECT_NEAR(k.makespan_us, 40 * p.tile_us + p.segment_us, 1e-9);
  EXPECT_NEAR(k.total_us, p.launch_us + k.makespan_us, 1e-9);  // one split: no combine
  EXPECT_EQ(k.combine_us, 0.0);
  EXPECT_NEAR(k.ctas[0].stream_us, 40 * p.tile_us, 1e-9);
  EXPECT_EQ(k.ctas[0].tiles, 40);
  EXPECT_DOUBLE_EQ(k.kv_bytes, 40 * kTileBytes);
}

TEST(TimingModel, AFullWaveSharesTheBandwidth) {
  // 264 blocks of 50 tiles, one split each: all co-resident; 264 streams ask 264 / 2.5 tiles per
  // µs, far above BW / 64 KiB, so the wave ends at total bytes / BW (+ the epilogue).
  const TimingParams p = params();
  const LeanPlan plan = splitkv_plan(shape(33, 8, 8, 128 * 50), 1);
  const KernelTime k = predict_splitkv_time(plan, 128, p);
  ASSERT_EQ(k.ctas.size(), 264u);
  const double bw_tiles_per_us = p.hbm_gbs * 1e3 / kTileBytes;
  EXPECT_NEAR(k.makespan_us, 264 * 50 / bw_tiles_per_us + p.segment_us, 1e-6);
  EXPECT_NEAR(k.idle_us, 0.0, 1e-6);
  EXPECT_EQ(k.slots_used, 264);
}

TEST(TimingModel, WavesOfLatencyBoundCtas) {
  // 2·264 + 1 equal CTAs with bandwidth to spare: three waves of (tiles·tile_us + segment), the
  // last with one CTA; the idle slot time is the third wave's empty 263 slots.
  TimingParams p = params();
  p.hbm_gbs = 1e9;
  const LeanPlan plan = splitkv_plan(shape(529, 1, 1, 128 * 10), 1);
  const KernelTime k = predict_splitkv_time(plan, 128, p);
  const double wave = 10 * p.tile_us + p.segment_us;
  EXPECT_NEAR(k.makespan_us, 3 * wave, 1e-6);
  EXPECT_NEAR(k.idle_us, 263 * wave, 1e-6);
  EXPECT_NEAR(k.busy_us + k.idle_us, 264 * k.makespan_us, 1e-6);
  EXPECT_NEAR(k.ctas[528].start_us, 2 * wave, 1e-6);  // blockIdx order
}

TEST(TimingModel, LeanHostWaitsForItsSlowestSplitThenMerges) {
  // Hand-made plan: one block of 5 tiles, CTA 0 the host with tile 0, CTA 1 the rest.
  TimingParams p = params();
  p.hbm_gbs = 1e9;
  LeanPlan plan;
  plan.block_n = 128;
  plan.grid = 2;
  LeanSegment host, rest;
  host.cta = 0, host.n_begin = 0, host.n_end = 1, host.host = true;
  rest.cta = 1, rest.n_begin = 1, rest.n_end = 5, rest.finisher = true, rest.split = 1;
  plan.segments = {host, rest};
  const KernelTime k = predict_lean_time(plan, 128, p);
  const double split_done = 4 * p.tile_us + p.segment_us;
  EXPECT_NEAR(k.ctas[1].end_us, split_done, 1e-9);
  EXPECT_NEAR(k.ctas[0].wait_us, split_done - (p.tile_us + p.segment_us), 1e-9);
  EXPECT_NEAR(k.ctas[0].end_us, split_done + p.flag_us + 2 * p.merge_us, 1e-9);
  EXPECT_NEAR(k.total_us, p.launch_us + k.ctas[0].end_us, 1e-9);
  EXPECT_NEAR(k.wait_us, k.ctas[0].wait_us, 1e-12);
}

TEST(TimingModel, LeanWholeBlocksNeitherWaitNorMerge) {
  // Four heads of 2 tiles on 4 CTAs (lean grid for 8 tiles: min(4, 32·8/2)): every CTA holds a
  // whole block, host and finisher at once.
  TimingParams p = params();
  p.hbm_gbs = 1e9;
  const LeanPlan plan = lean_plan(shape(1, 4, 4, 256));
  ASSERT_EQ(plan.grid, 4);
  const KernelTime k = predict_lean_time(plan, 128, p);
  EXPECT_NEAR(k.makespan_us, 2 * p.tile_us + p.segment_us, 1e-9);
  EXPECT_EQ(k.wait_us, 0.0);
}

TEST(TimingModel, SplitKvAddsTheCombineAndRunsEmptySplits) {
  // Ragged: entry 0 has 8 tiles, entry 1 one tile; 4 splits of ceil(n/4) tiles: entry 1 has one
  // non-empty split and three empty ones, which still occupy CTAs.
  TimingParams p = params();
  p.hbm_gbs = 1e9;
  LeanShape s = shape(2, 1, 1, 128 * 8);
  s.len_kv_per_batch = {128 * 8, 100};
  const LeanPlan plan = splitkv_plan(s, 4);
  const KernelTime k = predict_splitkv_time(plan, 128, p);
  ASSERT_EQ(k.ctas.size(), 8u);
  long long tiles = 0;
  for (const CtaTime& c : k.ctas) tiles += c.tiles;
  EXPECT_EQ(tiles, 9);
  EXPECT_EQ(k.ctas[5].tiles, 0);
  EXPECT_NEAR(k.ctas[5].end_us - k.ctas[5].start_us, p.segment_us, 1e-9);
  EXPECT_NEAR(k.makespan_us, 2 * p.tile_us + p.segment_us, 1e-9);
  EXPECT_NEAR(k.combine_us, p.launch_us + 4 * p.merge_us, 1e-9);
  EXPECT_NEAR(k.total_us, 2 * p.launch_us + k.makespan_us + 4 * p.merge_us, 1e-9);
}

TEST(TimingModel, StreamKBalancesARaggedBatchFixedSplitsDoNot) {
  // One long entry among short ones: FlashDecoding's one-split CTAs leave the long entry's heads
  // alone at the end; lean's CTAs all carry about total / grid tiles.
  const TimingParams p = params();
  LeanShape s = shape(32, 32, 8, 32768);
  s.len_kv_per_batch.assign(32, 2048);
  s.len_kv_per_batch[5] = 32768;
  const LeanPlan lp = lean_plan(s), fp = splitkv_plan(s, 0);
  ASSERT_EQ(fp.num_splits, 1);  // 256 blocks >= 0.8 · 264
  const KernelTime kl = predict_lean_time(lp, 128, p), kf = predict_splitkv_time(fp, 128, p);
  long long tl = 0, tf = 0, ml = 0, mf = 0;
  for (const CtaTime& c : kl.ctas) tl += c.tiles, ml = std::max(ml, c.tiles);
  for (const CtaTime& c : kf.ctas) tf += c.tiles, mf = std::max(mf, c.tiles);
  EXPECT_EQ(tl, tf);
  EXPECT_EQ(mf, 256);
  EXPECT_LE(ml, (tl + lp.grid - 1) / lp.grid);
  EXPECT_GT(kf.total_us / kl.total_us, 2.0);
  EXPECT_GT(kf.idle_us / (264 * kf.makespan_us), 0.5);
}

TEST(TimingModel, FitRecoversTheParametersItsDataCameFrom) {
  // Measurements made by the model itself on a mix of shapes (latency-bound, saturated, lean
  // hosts, combines); the fit starts 20-40% off and must land within 1%.
  TimingParams truth = params();
  std::vector<LeanPlan> plans;
  std::vector<bool> lean;
  for (int b : {1, 4, 16})
    for (int lk : {2048, 16384, 65536}) {
      const LeanShape s = shape(b, 32, 8, lk);
      plans.push_back(lean_plan(s));
      lean.push_back(true);
      plans.push_back(splitkv_plan(s, 0));
      lean.push_back(false);
      plans.push_back(splitkv_plan(s, 1));
      lean.push_back(false);
    }
  std::vector<TimingSample> samples;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    TimingSample t{&plans[i], lean[i], 128, 0.0};
    t.measured_us = predict_time(t, truth);
    samples.push_back(t);
  }
  TimingParams start = truth;
  start.tile_us *= 1.3;
  start.hbm_gbs *= 0.7;
  start.launch_us *= 1.4;
  start.segment_us *= 0.7;
  start.flag_us *= 1.2;
  start.merge_us *= 0.6;
  const TimingFit fit = fit_timing_params(samples, start, {}, 4000);
  EXPECT_LT(fit.rms_log, 1e-4);
  const std::vector<double> got = to_vector(fit.params), want = to_vector(truth);
  for (std::size_t j = 0; j < want.size(); ++j)
    EXPECT_NEAR(got[j] / want[j], 1.0, 0.01) << timing_param_names()[j];
}

}  // namespace
}  // namespace attnsim
