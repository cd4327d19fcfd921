// `attnsim lean plan`: LeanAttention's stream-K partition as ONNX Runtime computes it (a contract:
// the flags and the CSV columns are the issue's; sim/lean/README.md explains every number).
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/file_io.hpp"
#include "sim/lean/schedule.hpp"

namespace attnsim {

namespace {

std::vector<int> parse_lengths(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 1 || v > (1L << 30)) throw std::invalid_argument(item);
      out.push_back(int(v));
    } catch (const std::exception&) {
      throw UsageError("--ragged: '" + item + "' is not a positive context length");
    }
  }
  if (out.empty()) throw UsageError("--ragged: expected a comma-separated list of lengths");
  return out;
}

}  // namespace

void add_lean_command(CLI::App& app) {
  CLI::App* lean = app.add_subcommand("lean", "LeanAttention tools (stream-K partition)");
  lean->require_subcommand(1);
  struct Opt {
    LeanShape s;
    std::string out, ragged, m_blocks = "ort";
    int splitkv = -1;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* plan = lean->add_subcommand(
      "plan",
      "Print LeanAttention's partition (ONNX Runtime lean_api.cc / lean_fwd_kernel.h: grid, "
      "max_tiles_per_tb, high_load_tbs, num_splits, tiles_per_head) and write one CSV row per "
      "(CTA, head-block) segment: cta,batch,head,m_block,n_tile_begin,n_tile_end,host,finisher,"
      "split");
  plan->add_option("--batch", o->s.batch, "batch size")->required();
  plan->add_option("--heads-q", o->s.heads_q, "query heads")->required();
  plan->add_option("--heads-kv", o->s.heads_kv, "key/value heads (divides --heads-q)")->required();
  plan->add_option("--len-q", o->s.len_q, "query length (1: decode)")->required();
  plan->add_option("--len-kv", o->s.len_kv, "context length")->required();
  plan->add_option("--head-dim", o->s.head_dim, "head dimension (64 or 128)")->required();
  plan->add_flag("--causal", o->s.causal, "causal mask (decode runs non-causal, as ORT does)");
  plan->add_option("--sms", o->s.sms, "streaming multiprocessors")->capture_default_str();
  plan->add_option("--ragged", o->ragged,
                   "decode with one context length per batch entry (comma-separated, each at "
                   "most --len-kv): the paper's ragged batching; not ORT's host sizing");
  plan->add_option("--splitkv", o->splitkv,
                   "instead of LeanAttention, the fixed split-KV partition of FlashDecoding with "
                   "this many splits (0: FA2's num_splits_heuristic)");
  plan->add_option("--m-blocks", o->m_blocks,
                   "ort: ONNX Runtime's host and kernel as written (warns where the kernel leaves "
                   "outputs uncomputed); all: the corrected partition")
      ->check(CLI::IsMember({"ort", "all"}))
      ->capture_default_str();
  plan->add_option("--out,--output", o->out, "CSV file (written atomically)")
      ->required()
      ->check(output_name());
  plan->callback([o]() {
    check_output_path(o->out);
    LeanShape s = o->s;
    if (!o->ragged.empty()) s.len_kv_per_batch = parse_lengths(o->ragged);
    s.m_blocks = o->m_blocks == "all" ? LeanMBlocks::kAll : LeanMBlocks::kOrt;
    LeanPlan p;
    try {
      p = o->splitkv >= 0 ? splitkv_plan(s, o->splitkv) : lean_plan(s);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::printf("%s", plan_summary(p).c_str());
    const std::string csv = plan_csv(p);
    write_file_atomic(o->out, csv.data(), csv.size());
  });
}

}  // namespace attnsim
