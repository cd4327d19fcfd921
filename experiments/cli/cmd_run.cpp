// `attnsim run`: one method on one dump (every layer group of it, or one), writing the output
// tensor `o` in the method's output format and the metrics against FP64 golden attention.
#include <omp.h>

#include <cstdio>
#include <ctime>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/common/progress.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/io/varlen.hpp"
#include "experiments/methods/memory_estimate.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/sweep/sweep_metrics.hpp"
#include "formats/float16.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim {

namespace {

struct RunOptions {
  std::string method, input, synthetic, group, output, launch;
  int sms = 0;  // 0: not given (the H100's 132)
  bool allow_nonfinite = false, quiet = false, counters = false;
};

// Writes o as the method stores it: fp64/fp32 as HDF5 floats, fp16 as an HDF5 half, bf16 as uint16
// bits with dtype="bfloat16" (the dump convention), e4m3fn/e5m2 as uint8 codes with their dtype.
void write_output(H5Writer& w, const std::string& name, const std::vector<std::uint64_t>& dims,
                  const MethodOutput& out) {
  const std::size_t n = out.o.size();
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee};
  std::string dtype;
  if (out.format == "fp64") {
    w.write_f64(name, dims, out.o.data());
    dtype = "float64";
  } else if (out.format == "fp32") {
    std::vector<float> v(out.o.begin(), out.o.end());
    w.write_f32(name, dims, v.data());
    dtype = "float32";
  } else if (out.format == "bf16" || out.format == "fp16") {
    std::vector<std::uint16_t> bits(n);
    for (std::size_t i = 0; i < n; ++i) {
      // The values are already in the format, so this rounding is exact.
      bits[i] = out.format == "bf16" ? encode<bf16>(float(out.o[i]), kExact)
                                     : encode<fp16>(float(out.o[i]), kExact);
    }
    if (out.format == "bf16") {
      w.write_u16(name, dims, bits.data());
      dtype = "bfloat16";
    } else {
      w.write_f16(name, dims, bits.data());
      dtype = "float16";
    }
  } else {
    throw UsageError("attnsim run cannot store output format '" + out.format + "' yet");
  }
  w.attr_string(name, "dtype", dtype);
  w.attr_string(name, "format", out.format);
}

void run_one(const RunOptions& opt, const std::string& command_line) {
  if (opt.input.empty() == opt.synthetic.empty())
    throw UsageError("run needs exactly one of --input and --synthetic");
  const MethodConfig method = parse_method(opt.method);
  std::vector<std::string> prefixes{""};
  if (!opt.input.empty()) {
    prefixes = select_dump_prefixes(opt.input, opt.group);
  } else if (!opt.group.empty()) {
    throw UsageError("--group applies to --input dumps only");
  }
  // Everything that can be refused is refused before reading or computing: the output path, then
  // each input's memory estimate.
  check_output_path(opt.output, {opt.input});
  check_points_memory(method, opt.input, prefixes, opt.synthetic, omp_get_max_threads(), "run");
  if (opt.input.empty()) {
    check_causal_rows(synthetic_shape(opt.synthetic), synthetic_causal(opt.synthetic),
                      "synthetic:" + opt.synthetic);
  } else {
    for (const std::string& prefix : prefixes)
      if (const auto shape = dump_shape(opt.input, prefix))
        check_causal_rows(*shape, dump_causal(opt.input, prefix),
                          dump_input_name(opt.input, prefix));
  }
  // --sms sets the SM count of a launch's schedule: refused where there is none to set.
  if (opt.sms < 0) throw UsageError("--sms must be >= 1");
  if (opt.sms != 0 && opt.launch.empty()) {
    bool varlen = false;
    for (const std::string& prefix : prefixes)
      varlen = varlen || (!opt.input.empty() && !dump_varlen(opt.input, prefix).empty());
    if (!varlen)
      throw UsageError("--sms sets the SM count of a launch's schedule: give --launch, or a "
                       "varlen dump (this run has neither)");
  }
  const int sms = opt.sms != 0 ? opt.sms : 132;
  // Then the data of every group, when there is more than one: a group is otherwise read only
  // after the groups before it were computed.
  if (prefixes.size() > 1) check_attention_dumps(opt.input, prefixes, opt.allow_nonfinite);
  std::unique_ptr<H5Writer> w;
  if (!opt.output.empty()) w = std::make_unique<H5Writer>(opt.output);
  ResultTable table;
  // On a terminal: which input, which stage, and the work the simulators report (golden's row
  // blocks; sim/progress.hpp), with the elapsed time.
  std::mutex mu;
  std::string stage;
  WorkSince work;
  ProgressLine line(progress_wanted(opt.quiet), "run", [&] {
    std::lock_guard<std::mutex> lock(mu);
    const std::string w = work.text();
    return stage + (w.empty() ? "" : " " + w);
  });
  auto set_stage = [&](const std::string& text) {
    {
      std::lock_guard<std::mutex> lock(mu);
      stage = text;
      work.restart();
    }
    line.redraw();
  };
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    const std::string& prefix = prefixes[i];
    const std::string where = prefixes.size() > 1 ? prefix.substr(0, prefix.size() - 1) + " (" +
                                                        std::to_string(i + 1) + "/" +
                                                        std::to_string(prefixes.size()) + "): "
                                                  : std::string();
    set_stage(where + "reading");
    AttentionInput in = opt.input.empty()
                            ? make_synthetic(opt.synthetic)
                            : read_attention_dump(opt.input, prefix, opt.allow_nonfinite);
    const std::string name =
        opt.input.empty()
            ? "synthetic:" + opt.synthetic
            : dump_input_name(opt.input, prefix);
    const std::vector<LaunchSeq> seqs =
        opt.input.empty() ? std::vector<LaunchSeq>{} : dump_varlen(opt.input, prefix);
    if (!seqs.empty()) {
      // A varlen dump: every sequence a row of its own, run inside the launch of them all; o
      // packed as the queries are.
      if (!opt.launch.empty())
        throw UsageError("--launch: " + name + " is a varlen dump, its own launch (cu_seqlens)");
      if (opt.counters) throw UsageError("--counters takes dense inputs (not a varlen dump)");
      set_stage(where + std::to_string(seqs.size()) + " sequences");
      const MethodOutput packed = run_varlen(
          method, in, seqs, sms,
          [&](int sq, const AttentionInput& one, const MethodOutput& out) {
            Goldens goldens(one);
            table.add(measure_point(std::int64_t(i), method, name + "#seq" + std::to_string(sq),
                                    0, one, out, goldens));
          });
      if (w) {
        const AttentionShape& s = in.shape;
        write_output(*w, prefix + "o",
                     {1, std::uint64_t(s.heads_q), std::uint64_t(s.len_q),
                      std::uint64_t(s.head_dim_v)},
                     packed);
        w->attr_string(prefix + "o", "method", method.canonical());
        w->attr_string(prefix + "o", "input", name);
        w->attr_string(prefix + "o", "launch", Launch{seqs, sms, 0}.describe());
      }
      continue;
    }
    attach_launch(method, in, opt.launch, sms);
    set_stage(where + "golden");
    Goldens goldens(in);
    goldens.for_method(method);
    set_stage(where + method.short_name());
    StageCounters counters;
    MethodOutput out;
    {
      // --counters: the method's silent-failure counters (sim/pipeline/counters.hpp).
      CounterScope scope(opt.counters ? &counters : nullptr);
      out = method.run(in);
    }
    set_stage(where + "metrics");
    if (opt.counters && !opt.quiet)
      std::printf("counters of %s on %s:\n%s", method.canonical().c_str(), name.c_str(),
                  counters.describe().c_str());
    const std::int64_t seed = opt.input.empty() ? std::int64_t(synthetic_seed(opt.synthetic)) : 0;
    const std::string o = prefix + "o";
    PointRow row;
    {
      // With more than one thread, the output's dataset (its gzip and checksum: one thread's work
      // inside libhdf5) is written while the metrics run on the OpenMP threads; nothing else
      // calls libhdf5 meanwhile, and the future's destructor waits for the write if the metrics
      // throw. With one thread (OMP_NUM_THREADS=1), one thread does both, in turn.
      std::future<void> written;
      if (w) {
        const AttentionShape& s = in.shape;
        const auto policy = omp_get_max_threads() > 1 ? std::launch::async : std::launch::deferred;
        written = std::async(policy, [&w, &o, &out, s] {
          write_output(*w, o,
                       {std::uint64_t(s.batch), std::uint64_t(s.heads_q), std::uint64_t(s.len_q),
                        std::uint64_t(s.head_dim_v)},
                       out);
        });
      }
      row = measure_point(std::int64_t(i), method, name, seed, in, out, goldens);
      if (written.valid()) written.get();
    }
    if (w) {
      w->attr_string(o, "method", method.canonical());
      w->attr_string(o, "input", name);
      w->attr_f64(o, "cosine", row.m.cosine);
      w->attr_f64(o, "rel_l1", row.m.rel_l1);
      w->attr_f64(o, "rmse", row.m.rmse);
      w->attr_f64(o, "rel_fro", row.m.rel_fro);
      w->attr_f64(o, "max_abs", row.m.max_abs);
      w->attr_i64(o, "nonfinite", row.m.nonfinite);
      w->attr_i64(o, "ulp_p50", row.m.ulp_p50);
      w->attr_i64(o, "ulp_p99", row.m.ulp_p99);
      w->attr_i64(o, "ulp_max", row.m.ulp_max);
      w->attr_f64(o, "ulp_row_p50", row.m.ulp_row_p50);
      w->attr_f64(o, "ulp_row_p99", row.m.ulp_row_p99);
      w->attr_f64(o, "ulp_row_max", row.m.ulp_row_max);
      // What the method resolved from "auto" options: all of it as one string, and each value
      // as its own attribute resolved_KEY.
      w->attr_string(o, "resolved", row.resolved);
      // The causal mask of the golden the metrics were taken against (the kernel's own).
      w->attr_string(o, "golden_mask", causal_mask_name(method, in));
      if (in.launch) w->attr_string(o, "launch", in.launch->describe());
      for (const auto& [key, value] : out.resolved) w->attr_string(o, "resolved_" + key, value);
      if (opt.counters) {
        // [stage][event] counts; the names as attributes (counters.hpp).
        const std::vector<std::int64_t> cv = counters.column_values();
        w->write_i64(prefix + "counters", {std::uint64_t(kCounterStages), std::uint64_t(kCounterEvents)},
                     cv.data());
        std::string names;
        for (const std::string& c : StageCounters::column_names()) names += (names.empty() ? "" : ",") + c;
        w->attr_string(prefix + "counters", "columns", names);
      }
    }
    table.add(std::move(row));
  }
  line.stop();
  if (!opt.quiet) table.print(stdout);
  if (w) {
    table.write(*w, "metrics/");
    w->attr_string("/", "method", method.canonical());
    write_provenance(*w, command_line);
    w->commit();
    if (!opt.quiet) std::printf("wrote %s\n", opt.output.c_str());
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run",
                                     "Run one method on a dump: output tensor o in the method's "
                                     "format + metrics against FP64 golden");
  cmd->add_option("--method", opt->method, "method configuration (see `attnsim methods`)")
      ->required();
  cmd->add_option("--input", opt->input,
                  "HDF5 dump with q, k, v (every layer_NN group unless --group); with "
                  "cu_seqlens_q/cu_seqlens_k a varlen batch: each sequence a row, run inside "
                  "the launch of all");
  cmd->add_option("--synthetic", opt->synthetic, "synthetic input spec instead of a dump");
  cmd->add_option("--group", opt->group, "one layer group of the dump, e.g. layer_03")
      ->check(non_empty());
  cmd->add_option("--out,--output", opt->output,
                  "output .h5: o (or GROUP/o) and metrics/ (written atomically; not an input, a "
                  "directory or a special file)")
      ->check(output_name());
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite, "accept NaN/Inf in inputs");
  cmd->add_flag("--quiet", opt->quiet, "print nothing on success (and no progress line)");
  cmd->add_flag("--counters", opt->counters,
                "count the silent failures per stage (saturations, overflows, underflows, NaNs, "
                "vanished P, ...): printed, and written as GROUP/counters; runs the stage "
                "references");
  cmd->add_option("--launch", opt->launch,
                  "the launch the input's sequences are the first of (a situation as `attnsim "
                  "invariance` takes it, \"1:4096x16\"): the kernel's schedule is that launch's "
                  "(methods with a schedule model: sdpa, fa3, flex, vllm_triton, lean, splitkv)")
      ->check(non_empty());
  cmd->add_option("--sms", opt->sms,
                  "the GPU's SM count for --launch or a varlen dump (default: the H100's 132)");
  add_max_memory_option(cmd);
  cmd->callback([opt]() { run_one(*opt, command_line()); });
}

}  // namespace attnsim
