// `attnsim quantize`: quantization error of the q, k or v tensors of a dump, per layer group and
// head, for each quantizer × granularity × smoothing (experiments/analysis/quantize_study.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "experiments/analysis/quantize_study.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/memory_estimate.hpp"

namespace attnsim {

namespace {

struct QuantizeOptions {
  std::vector<std::string> inputs;
  std::string group, tensor = "k", output, smooth = "both";
  std::vector<std::string> quantizers{"sage_cuda_int8", "sage_triton_int4", "e4m3fn", "e5m2"};
  std::vector<std::string> granularities{"per_tensor", "per_token", "per_channel", "per_block:64",
                                         "sage_sm90_k_per_thread"};
  bool quiet = false;
};

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& s : v) {
    if (!r.empty()) r += ' ';
    r += s;
  }
  return r;
}

void run_quantize(const QuantizeOptions& opt) {
  if (opt.tensor != "q" && opt.tensor != "k" && opt.tensor != "v") {
    throw UsageError("--tensor must be q, k or v, not '" + opt.tensor + "'");
  }
  std::vector<bool> smooth_modes;
  if (opt.smooth == "none" || opt.smooth == "both") smooth_modes.push_back(false);
  if (opt.smooth == "mean" || opt.smooth == "both") smooth_modes.push_back(true);
  if (smooth_modes.empty())
    throw UsageError("--smooth must be none, mean or both, not '" + opt.smooth + "'");
  std::vector<GroupMap> maps;
  for (const auto& g : opt.granularities) maps.push_back(parse_granularity(g));
  const std::vector<std::string> known = quantizer_names();
  for (const auto& q : opt.quantizers) {
    if (std::find(known.begin(), known.end(), q) == known.end()) {
      throw UsageError("unknown quantizer '" + q + "'; known: " + join(known));
    }
  }

  check_output_path(opt.output, opt.inputs);
  // The groups of every input (--group's must exist in each), before the table starts.
  std::vector<std::vector<std::string>> groups_of;
  for (const auto& path : opt.inputs) {
    std::vector<std::string> prefixes = dump_prefixes(path);
    if (!opt.group.empty()) {
      const std::string want = opt.group + "/";
      if (std::find(prefixes.begin(), prefixes.end(), want) == prefixes.end()) {
        throw UsageError(path + ": no group '" + opt.group + "'");
      }
      prefixes = {want};
    }
    groups_of.push_back(prefixes);
  }
  // Memory, before reading: the largest dump group as read, its heads' working copies, and
  // every row of the table (about 512 bytes with its strings).
  {
    double peak = 0, rows = 0;
    const double per_head = double(opt.quantizers.size() * maps.size() * smooth_modes.size());
    for (std::size_t i = 0; i < opt.inputs.size(); ++i) {
      const std::string& path = opt.inputs[i];
      for (const auto& prefix : groups_of[i]) {
        peak = std::max(peak, dump_read_bytes(path, prefix));
        if (const auto s = dump_shape(path, prefix))
          rows += per_head * double(s->batch) * (opt.tensor == "q" ? s->heads_q : s->heads_kv);
      }
    }
    check_memory(1.25 * peak + 512.0 * rows + 64.0 * (1 << 20), "quantize");
  }
  // The data of every group when there is more than one: a bad one is refused before the table
  // is printed, not after the groups before it.
  if (opt.inputs.size() > 1 || groups_of[0].size() > 1) {
    for (std::size_t i = 0; i < opt.inputs.size(); ++i)
      check_attention_dumps(opt.inputs[i], groups_of[i], false);
  }
  // Columns of the results table (one row per input group × head × quantizer × granularity ×
  // smooth).
  std::vector<std::string> c_input, c_group, c_quant, c_gran, c_desc;
  std::vector<std::int64_t> c_head, c_smooth, c_tokens, c_channels, c_groups;
  std::vector<double> c_fro, c_l1, c_max, c_cos, c_sqnr;
  // The table's header comes with its first row, once the first input has been read: a bad
  // input is an error line, not a table that stops after its header.
  bool header = opt.quiet;
  for (std::size_t i = 0; i < opt.inputs.size(); ++i) {
    const std::string& path = opt.inputs[i];
    for (const auto& prefix : groups_of[i]) {
      const AttentionInput in = read_attention_dump(path, prefix, false);
      const AttentionShape& s = in.shape;
      const std::vector<float>& x = opt.tensor == "q" ? in.q : opt.tensor == "k" ? in.k : in.v;
      const int heads = opt.tensor == "q" ? s.heads_q : s.heads_kv;
      const int tokens = opt.tensor == "q" ? s.len_q : s.len_kv;
      const int channels = opt.tensor == "v" ? s.head_dim_v : s.head_dim;
      const std::string gname = prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1);
      for (int b = 0; b < s.batch; ++b) {
        for (int h = 0; h < heads; ++h) {
          const float* xh =
              x.data() + (std::size_t(b) * heads + h) * std::size_t(tokens) * channels;
          for (const auto& qn : opt.quantizers) {
            for (std::size_t gi = 0; gi < maps.size(); ++gi) {
              for (bool sm : smooth_modes) {
                const QuantError e = quantization_error(xh, tokens, channels, qn, maps[gi], sm);
                c_input.push_back(path);
                c_group.push_back(gname);
                c_quant.push_back(qn);
                c_gran.push_back(opt.granularities[gi]);
                c_desc.push_back(maps[gi].describe());
                c_head.push_back(std::int64_t(b) * heads + h);
                c_smooth.push_back(sm);
                c_tokens.push_back(tokens);
                c_channels.push_back(channels);
                c_groups.push_back(e.groups);
                c_fro.push_back(e.rel_fro);
                c_l1.push_back(e.rel_l1);
                c_max.push_back(e.max_abs);
                c_cos.push_back(e.cosine);
                c_sqnr.push_back(e.sqnr_db);
                if (!header) {
                  std::printf("%-28s %-9s %4s %-26s %-24s %6s %10s %10s %10s %8s\n", "input",
                              "group", "head", "quantizer", "granularity", "smooth", "rel_fro",
                              "rel_l1", "max_abs", "sqnr_dB");
                  header = true;
                }
                if (!opt.quiet) {
                  const std::string shown =
                      path.size() > 28 ? "..." + path.substr(path.size() - 25) : path;
                  std::printf("%-28s %-9s %4d %-26s %-24s %6s %10.3e %10.3e %10.3e %8.2f\n",
                              shown.c_str(), gname.c_str(), int(c_head.back()), qn.c_str(),
                              opt.granularities[gi].c_str(), sm ? "mean" : "none", e.rel_fro,
                              e.rel_l1, e.max_abs, e.sqnr_db);
                }
              }
            }
          }
        }
      }
    }
  }
  if (opt.output.empty()) return;
  H5Writer w(opt.output);
  const std::vector<std::uint64_t> n{c_fro.size()};
  w.write_strings("input", c_input);
  w.write_strings("group", c_group);
  w.write_strings("quantizer", c_quant);
  w.write_strings("granularity", c_gran);
  w.write_strings("granularity_map", c_desc);
  w.write_i64("head", n, c_head.data());
  w.write_i64("smooth", n, c_smooth.data());
  w.write_i64("tokens", n, c_tokens.data());
  w.write_i64("channels", n, c_channels.data());
  w.write_i64("groups", n, c_groups.data());
  w.write_f64("rel_fro", n, c_fro.data());
  w.write_f64("rel_l1", n, c_l1.data());
  w.write_f64("max_abs", n, c_max.data());
  w.write_f64("cosine", n, c_cos.data());
  w.write_f64("sqnr_db", n, c_sqnr.data());
  w.attr_string("/", "tensor", opt.tensor);
  write_provenance(w);
  w.commit();
  if (!opt.quiet) std::printf("wrote %s (%zu rows)\n", opt.output.c_str(), c_fro.size());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto opt = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantization error of a dump's q/k/v per head, by quantizer and granularity");
  cmd->add_option("--input", opt->inputs,
                  "attention dump(s) (HDF5 layout of experiments/README.md)")
      ->required();
  cmd->add_option("--group", opt->group, "one layer group (e.g. layer_15); default: every group")
      ->check(non_empty());
  cmd->add_option("--tensor", opt->tensor, "q, k or v")->capture_default_str();
  cmd->add_option("--quantizers", opt->quantizers, "comma-separated: " + join(quantizer_names()))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--granularities", opt->granularities,
                  "comma-separated: " + join(granularity_names()))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
      "--smooth", opt->smooth,
      "none | mean (subtract the per-channel mean over tokens first: smooth-K) | both (default)");
  cmd->add_option("--out,--output", opt->output,
                  "results table (.h5, written atomically; not an input, a directory or a special "
                  "file)")
      ->check(output_name());
  add_max_memory_option(cmd);
  cmd->add_flag("--quiet", opt->quiet, "no table on stdout");
  cmd->callback([opt]() { run_quantize(*opt); });
}

}  // namespace attnsim
