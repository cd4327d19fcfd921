// Reproduction `turbo`: TurboAttention (Kang et al., arXiv 2412.08585; sim/turbo/README.md) on
// the sim/turbo presets against FP64 golden. The --out table has one row per quantity,
// `quantity,ours,paper` (paper empty/NaN where the paper prints no number); with --out FILE.ext
// the detailed tables go next to it as FILE_errors.ext, FILE_drift.ext and FILE_memory.ext.
//  E1  the least-squares cubic of SAS (Eq. 15): continuous refit and the 101-point grid fit
//  E2  SAS's relative error against e^x over [−6, 0] in FP16 and FP32 (mul+add, FMA, thresholds)
//  E3  FlashQ-4bit alone, SAS alone, both, FP16 (decode, SmolLM2; prefill, MiniLM) beside
//      Table 4's task accuracies (a different measure: printed as their own rows)
//  E4  head-wise mixed precision: n_h = 0..H_kv (and 0..2·H_kv, K and V ranked apart) for the
//      four selectors (Fig. 7b analogue)
//  E5  (br, bc) ∈ {32, 64, 128}² (Table 3 analogue), decode and prefill
//  E6  KIVI-4/2 against Turbo-4, Turbo-mixed (half the caches at 2 bits) and Turbo-2
//  E7  long decode: error per step, by buffer fill (t mod 64), universal-scale clamping (prompt's
//      max, last prompt block, oracle) and the clamp rate, on SmolLM2 and a synthetic sequence
//      whose K/V scale grows 4× over a few thousand steps
//  E8  KV-cache bits per token and the ratio to FP16 (abstract: "> 4.4×")
//  E9  SAS inside the tiles (against the running max) against SAS and a plain truncated exp over
//      the whole row, n_r ∈ {−4, −5, −6, −8}
// --quick: E1, E2 and E8 only (a second). Full: about 2 minutes on two idle cores.
// ATTNSIM_TURBO_TOKENS=N cuts every input to its first N tokens (tests); ATTNSIM_TURBO_LONG_DUMP=
// path runs E7 on the first layer of a longer causal dump (dump_real.py --tokens 4096) as well.
// One function per experiment, in the files of this folder (turbo_repro.hpp); this one runs them.
#include "experiments/repro/turbo/turbo_repro.hpp"
#include "experiments/sweep/mpi_env.hpp"

namespace attnsim {

namespace {

using namespace turbo_repro;

ReproTable turbo_repro_run(const ReproOptions& opt) {
  Summary sum;
  sum.t.title =
      "turbo: TurboAttention (Kang et al.) on sim/turbo: quantity, ours, paper (the paper's "
      "figure where it prints one; task accuracies are rows of their own, paper_table*_acc_*)";
  std::string notes = e1_cubic(sum);
  notes += e2_sas_error(sum);
  const std::vector<MemRow> mem = e8_memory();
  notes += e8_memory_rows(sum, mem);
  const bool write = !opt.out.empty() && mpi_rank() == 0;
  std::vector<std::string> written;
  if (write) {
    memory_table(mem).write(sibling(opt.out, "memory"), "turbo", opt);
    written.push_back(sibling(opt.out, "memory"));
  }
  if (opt.quick) {
    sum.t.notes = notes + "--quick: E1, E2 and E8 only (the error experiments need the full run).";
    if (write) sum.t.notes += "\nDetail: " + written[0];
    return sum.t;
  }

  const Inputs inputs = load_inputs(opt.progress);
  // E3-E6 and E9 share their runs (one per input and canonical method), computed together.
  ErrorJobs jobs(inputs);
  e3_stages_jobs(jobs);
  e4_mixed_precision_jobs(jobs);
  e5_blocks_jobs(jobs);
  e6_kivi_jobs(jobs);
  e9_sas_tiling_jobs(jobs);
  const ErrorRows errors{jobs.run(opt.progress)};
  const std::vector<DriftJob> drift = e7_drift(inputs, opt.progress);

  const Input& smol = inputs.all[inputs.smol[0]];
  notes +=
      fmt("\nError against FP64 golden: mean over (layer, head) of cosine / relative L1 / RMSE "
          "(worst head in brackets); SmolLM2 layers 15 and 29 (9 query / 3 KV heads, d=64, %d "
          "tokens, decode after a %d-token prompt); MiniLM layers 3 and 5 (12 heads, d=32, 256 "
          "tokens, prefill).\n",
          smol.in.shape.len_kv, jobs.prefill_of(inputs.smol[0], 64));
  notes += e3_stages_rows(sum, errors);
  notes += e4_mixed_precision_rows(sum, errors, smol.in.shape.heads_kv);
  notes += e5_blocks_rows(sum, errors);
  notes += e6_kivi_rows(sum, errors, smol.in.shape.head_dim);
  notes += e9_sas_tiling_rows(sum, errors);
  notes += e7_drift_rows(sum, inputs, drift);

  if (write) {
    errors_table(errors.rows).write(sibling(opt.out, "errors"), "turbo", opt);
    drift_table(drift, inputs).write(sibling(opt.out, "drift"), "turbo", opt);
    written.push_back(sibling(opt.out, "errors"));
    written.push_back(sibling(opt.out, "drift"));
    notes += "\nDetail:";
    for (const std::string& w : written) notes += " " + w;
  }
  sum.t.notes = notes;
  return sum.t;
}

}  // namespace

void register_turbo_repros(std::vector<Reproduction>& r) {
  r.push_back({"turbo",
               "TurboAttention (Kang et al.): Eq. 15's cubic, SAS error, Tables 2-4, Fig. 7b, "
               "memory (abstract), on the bundled real-model dumps",
               "quantity,ours,paper: the SAS cubic refit, SAS error, KV-cache memory; full run: "
               "stage errors, mixed precision per selector, block sizes, KIVI, decode drift and "
               "clamping, tiled vs untiled SAS (detail tables next to --out)",
               1, 1, turbo_repro_run});
}

}  // namespace attnsim
