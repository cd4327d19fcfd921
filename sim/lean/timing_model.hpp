// A load-balance timing model of the decode kernels of cuda_check/lean (LeanAttention's stream-K
// partition and FlashDecoding's fixed splits + combine): the kernel time of a partition
// (sim/lean/schedule.hpp) from its tile counts, the SM count and six per-tile / per-CTA costs
// calibrated on the H100 timings of data/hw/h100/lean/lean_timings.csv (`attnsim repro lean`).
//
// The GPU side it stands for (data/hw/h100/lean/README.md, "How it was made" and "Timing"):
// 128-thread CTAs, 2 co-resident per SM (both kernels), dispatched to free SM slots in blockIdx
// order; every n-tile is one K and one V tile of block_n × D fp16 (64 KiB at D = 128) loaded by
// cp.async and two MMAs, so the tile loop is memory-bound; a lean host CTA spins on its block's
// flag until the other splits have written their partials, then reduces; FlashDecoding runs a
// second (combine) kernel when it splits.
//
// The model, in order of the kernel's work:
//   one CTA streams tiles at  rate = min(1 / tile_us, BW / (tile_bytes · N(t)))  tiles per µs,
//     N(t) = the CTAs streaming at time t: alone a CTA is latency-bound (tile_us per tile);
//     together they share the HBM bandwidth BW equally (processor sharing, a fluid model);
//   every segment costs segment_us after its tiles (Q load, normalize, O or partial write, the
//     flag's fence and atomic);
//   a lean host whose block has ns > 1 splits waits until the ns − 1 others have signalled,
//     then pays flag_us + merge_us · ns (fence, flag poll and lse loads, then the loop over the
//     splits' partial O);
//   CTAs start in blockIdx order on the lowest free of 2·SMs slots (greedy list scheduling);
//   the measured time = launch_us + makespan of the main kernel, plus for FlashDecoding with
//     ns > 1 splits a second launch and merge_us · ns (the combine CTA runs the host's merge
//     loop over the same partials).
// Parameters: tile_us, hbm_gbs, launch_us, segment_us, flag_us, merge_us (six), fit by least
// squares on log time (fit_timing_params). `attnsim repro lean` prints the H100 fit and its
// held-out check.
#pragma once

#include <string>
#include <vector>

#include "sim/lean/schedule.hpp"

namespace attnsim {

// Defaults: the H100 fit of `attnsim repro lean` (the calibration half of
// data/hw/h100/lean/lean_timings.csv, rounded), for callers that do not fit their own.
struct TimingParams {
  double tile_us = 2.50;     // one CTA streaming alone: µs per n-tile (latency-bound)
  double hbm_gbs = 2876;     // HBM bandwidth the streaming CTAs share, GB/s (= bytes/ns)
  double launch_us = 3.34;   // per kernel launch, event to event (launch, first wave, drain)
  double segment_us = 3.48;  // per segment, after its tiles: Q load, normalize, write, flag
  double flag_us = 4.60;     // lean host: fence, flag poll and lse loads before it can merge
  double merge_us = 0.112;   // per split merged (lean host and FD combine: the same loop)
};
constexpr int kNumTimingParams = 6;
// The parameters as an array (the fit's vector) and back; names in the same order.
std::vector<double> to_vector(const TimingParams& p);
TimingParams timing_params_from(const std::vector<double>& v);
const std::vector<std::string>& timing_param_names();

struct TimingDevice {
  int sms = 132;           // H100 SXM
  int ctas_per_sm = 2;     // cudaOccupancyMaxActiveBlocksPerMultiprocessor of both kernels
  int bytes_per_elem = 2;  // fp16 K and V
};

// One CTA of the main kernel as the model runs it (times from the main kernel's start).
struct CtaTime {
  int cta = 0;
  int slot = 0;  // SM slot (slot % sms = the SM)
  double start_us = 0, end_us = 0;
  long long tiles = 0;   // n-tiles it streams
  double stream_us = 0;  // in the tile loop
  double fixed_us = 0;   // segment epilogues and reductions
  double wait_us = 0;    // lean host spinning on a flag
};

struct KernelTime {
  double total_us = 0;     // what the cudaEvent pair measures
  double makespan_us = 0;  // main kernel: first CTA start to last CTA end
  double combine_us = 0;   // FlashDecoding's second kernel (0 without one)
  double busy_us = 0;      // Σ over CTAs of end − start (slot-µs)
  double idle_us = 0;      // slots × makespan − busy: slot time with no CTA
  double wait_us = 0;      // Σ of lean hosts' flag waits (inside busy)
  double kv_bytes = 0;     // K and V bytes streamed (whole tiles)
  int slots_used = 0;      // slots that ran at least one CTA
  std::vector<CtaTime> ctas;
};

// The lean kernel on `plan` (lean_plan): one CTA per plan CTA, the whole grid co-resident when
// grid <= slots. head_dim sets the tile bytes (block_n × head_dim × 2 tensors).
KernelTime predict_lean_time(const LeanPlan& plan, int head_dim, const TimingParams& p,
                             const TimingDevice& dev = {});
// FlashDecoding on `plan` (splitkv_plan): num_splits CTAs per block in blockIdx order (split
// fastest), the empty trailing splits of short ragged entries included (they only write zeros),
// then the combine when num_splits > 1.
KernelTime predict_splitkv_time(const LeanPlan& plan, int head_dim, const TimingParams& p,
                                const TimingDevice& dev = {});

// One measured kernel time the fit matches.
struct TimingSample {
  const LeanPlan* plan = nullptr;
  bool lean = true;  // lean_plan; else splitkv_plan
  int head_dim = 128;
  double measured_us = 0;
};
double predict_time(const TimingSample& s, const TimingParams& p, const TimingDevice& dev = {});

struct TimingFit {
  TimingParams params;
  double rms_log = 0;  // sqrt(mean (log(pred / measured))²) over the samples
  int evaluations = 0;
};
// Least squares on log time: Nelder–Mead over the logarithms of the six parameters from `start`
// (restarted once from its own optimum), deterministic. Samples are simulated in parallel.
TimingFit fit_timing_params(const std::vector<TimingSample>& samples, const TimingParams& start,
                            const TimingDevice& dev = {}, int max_evaluations = 3000);

}  // namespace attnsim
