// `attnsim repro batch-invariance`: one sequence's output inside launches that change
// the kernel's schedule, computed with the simulated kernels (experiments/analysis/invariance):
// FlashAttention-2's num_splits heuristic as PyTorch's flash backend runs it (a decode and a
// prefill in batches of growing size), vLLM's Triton unified attention when a neighbouring
// prefill joins a decode batch (the mechanism of vllm #51902: a neighbour's length moves the
// schedule; there FA3's tile, here the 2D/3D path) with and without VLLM_BATCH_INVARIANT, and
// FA3's num_splits heuristic (num_splits = 0).
#include <algorithm>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/io/synthetic.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/repro/repro.hpp"

namespace attnsim {

namespace {

struct Case {
  std::string name, method, a, b;  // b holds {n}
  InvarianceProblem p;
  std::vector<int> ns;
  std::string data;  // synthetic spec of the target's tokens
};

std::string schedule_text(const KernelSchedule& k) {
  std::string r;
  for (const ScheduleItem& i : k.items)
    if (i.arithmetic && i.key != "head_dim" && i.key != "combine")
      r += (r.empty() ? "" : " ") + i.key + "=" + i.value;
  return r;
}

ReproTable batch_invariance(const ReproOptions& opt) {
  const bool q = opt.quick;
  std::vector<int> batches;
  if (q) batches = {1, 2, 4, 8, 16, 26, 27, 64};
  else
    for (int b = 1; b <= 64; ++b) batches.push_back(b);
  std::vector<int> prefill_batches = q ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16};
  std::vector<Case> cases = {
      {"fa2-decode", "sdpa:backend=flash,dtype=bf16", "1:4096", "1:4096x{n}",
       invariance_problem(32, 8, 128, false), batches, "normal:hq=32,hkv=8,nq=4096,nkv=4096,d=128,seed=41"},
      {"fa2-prefill", "sdpa:backend=flash,dtype=bf16", "1024:1024", "1024:1024x{n}",
       invariance_problem(8, 8, 128, true), prefill_batches, "normal:hq=8,hkv=8,nq=1024,nkv=1024,d=128,seed=42"},
      {"vllm-neighbour-prefill", "vllm_triton:dtype=bf16", "1:500+1:300x3",
       "1:500+1:300x3+{n}:{n}", invariance_problem(8, 2, 128, true),
       q ? std::vector<int>{1, 2, 9, 10} : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
       "normal:hq=8,hkv=2,nq=500,nkv=500,d=128,seed=43"},
      {"vllm-neighbour-prefill-bi", "vllm_triton:dtype=bf16,batch_invariant=1", "1:500+1:300x3",
       "1:500+1:300x3+{n}:{n}", invariance_problem(8, 2, 128, true),
       q ? std::vector<int>{1, 2, 9, 10} : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
       "normal:hq=8,hkv=2,nq=500,nkv=500,d=128,seed=43"},
      {"vllm-decode-batch", "vllm_triton:dtype=bf16", "1:500", "1:500+1:300x{n}",
       invariance_problem(8, 2, 128, true), q ? std::vector<int>{0, 63, 64} : std::vector<int>{0, 1, 15, 31, 62, 63, 64, 65, 127},
       "normal:hq=8,hkv=2,nq=500,nkv=500,d=128,seed=44"},
      {"lean-decode-batch", "lean:mblocks=all,dtype=bf16", "1:4096", "1:4096x{n}",
       invariance_problem(32, 8, 128, false), q ? std::vector<int>{1, 2, 3, 8} : std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16},
       "normal:hq=32,hkv=8,nq=4096,nkv=4096,d=128,seed=46"},
      {"fa3-decode", "fa3:dtype=bf16,splits=0", "1:4096", "1:4096x{n}", invariance_problem(32, 8, 128, false),
       batches, "normal:hq=32,hkv=8,nq=4096,nkv=4096,d=128,seed=45"},
  };
  ReproTable t;
  t.title = "batch-invariance: one sequence's rows inside launches that change the kernel's "
            "schedule (vllm #51902's question, FA2's num_splits), simulated kernels";
  t.columns = {{"case", 's', "kernel and launch family"},
               {"n", 'i', "the launch parameter ({n} in situation B)"},
               {"situation_b", 's', "the launch (target first; Q:K sequences, xN repeats)"},
               {"schedule_b", 's', "the schedule's arithmetic choices in B"},
               {"predicted", 's', "from the schedules: identical (same arithmetic) or may differ"},
               {"rows", 'i', "target rows compared (query heads x positions)"},
               {"rows_identical", 'i', "rows bit-identical to situation A (computed)"},
               {"max_ulp", 'i', "largest output ULP distance A vs B"},
               {"max_err_b", 'f', "largest |B − FP64 golden|"},
               {"max_err_a", 'f', "largest |A − FP64 golden|"}};
  std::string notes;
  for (const Case& c : cases) {
    const MethodConfig m = parse_method(c.method);
    TargetData d{make_synthetic(c.data)};
    const std::vector<InvarianceReport> rs = invariance_table(m, c.p, c.a, c.b, c.ns, &d);
    int first_change = -1, first_break = -1;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const InvarianceReport& r = rs[i];
      if (!r.predicted_identical && first_change < 0) first_change = c.ns[i];
      if (r.identical_rows != r.rows && first_break < 0) first_break = c.ns[i];
      t.add_row({{c.name},
                 {"", double(c.ns[i])},
                 {r.b},
                 {schedule_text(r.sched_b)},
                 {r.predicted_identical ? "identical" : "may differ"},
                 {"", double(r.rows)},
                 {"", double(r.identical_rows)},
                 {"", double(r.max_ulp)},
                 {"", r.max_err_b},
                 {"", r.max_err_a}});
    }
    notes += c.name + " (A = " + c.a + "): " +
             (first_break < 0 ? std::string("bit-identical for every n")
                              : "rows differ first at n = " + std::to_string(first_break)) +
             (first_change >= 0 ? "; the arithmetic first changes at n = " + std::to_string(first_change)
                                : std::string("")) +
             ". ";
  }
  notes +=
      "fa2-decode: PyTorch's flash backend splits a 4,096-key GQA 32/8 decode while batch x 8 "
      "blocks < 0.8 x 264 (2 x 132 SMs), i.e. up to batch 26, with a split count that moves "
      "with the batch (32, 16, 11, 7, ...); every change of count is a change of the target's "
      "bits, and from batch 27 the unsplit kernel (128 x 64 tiles) runs. vllm-neighbour-prefill: "
      "a decode batch takes vLLM's 3D kernel (16 KV segments, reduce_segments); one neighbour "
      "with a 2-token prefill moves the whole launch to the 2D kernel (TILE 32, one pass), the "
      "mechanism of vllm #51902 (there FA3's scheduler switching 64x192 to 192x128 tiles when a "
      "neighbouring prefill grows from 9 to 10 tokens, in vLLM's FA3 fork, which attnsim does "
      "not model); with VLLM_BATCH_INVARIANT=1 (batch_invariant=1) the 2D kernel runs for every "
      "batch and the rows do not move. lean-decode-batch: LeanAttention's stream-K partition "
      "deals all of the launch's n-tiles to the CTAs, so the target's blocks are cut where the launch's "
      "total work puts the CTA boundaries: unchanged while every CTA takes 2 tiles (up to 2 such "
      "sequences), cut elsewhere from 3 on. fa3-decode: upstream FA3's heuristic with num_splits = 0 "
      "(its choice over batch sizes is modelled from heuristics.h, recorded only at a few "
      "shapes). Recorded on the H100 and reproduced through the same launch machinery "
      "(tests/hw/invariance_h100_test.cpp): vLLM's 500-key decode in batches of 4 (3D) and 70 "
      "(2D), 0 of 8 rows identical; a 200-token prefill against its last token's decode step, 0 "
      "of 8; FlexAttention's decode in batches of 1 and 16, 8 of 8. The FA2 and FA3 batch sweeps "
      "are the heuristics' predictions: their recorder (cuda_check/schedule/record_invariance.py) "
      "has not run on the H100 yet.";
  t.notes = notes;
  return t;
}

}  // namespace

void register_invariance_repros(std::vector<Reproduction>& registry) {
  registry.push_back({"batch-invariance",
                      "vllm #51902, Dao-AILab/flash-attention PR #2450, FlashAttention-2's "
                      "num_splits heuristic (flash_api.cpp)",
                      "one sequence's rows inside launches that change the schedule: FA2 splits "
                      "by batch, vLLM's 2D/3D path by a neighbour's prefill, FA3's heuristic",
                      1, 1, batch_invariance});
}

}  // namespace attnsim
