// `attnsim verify`: a real kernel's output (HDF5 dataset `o`, optional `lse`) judged against the
// simulator's bits for a method and FP64 golden (experiments/analysis/verify.hpp). Exit codes: 0
// bit-identical, 1 differs within the band, 3 outside the band, 2 bad input (nothing written).
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/analysis/verify.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/progress.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/common/provenance.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/file_io.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/io/varlen.hpp"

namespace attnsim {

namespace {

struct VerifyCliOptions {
  std::string input, group, kernel_output, method, out, launch;
  int sms = 0;  // 0: not given (the H100's 132)
  double band = 2.0;
  int worst = 5;
  bool counters = false, allow_nonfinite = false, quiet = false;
};

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The kernel's `o` (and `lse`): under the dump's layer group when it has one there, else at the
// root. fp16 (HDF5 half), bf16 (uint16 with dtype="bfloat16"), fp32.
KernelOutput read_kernel_output(const std::string& path, const std::string& prefix) {
  H5Reader r(path);
  const std::string o = !prefix.empty() && r.exists(prefix + "o") ? prefix + "o" : "o";
  if (!r.exists(o))
    throw UsageError("kernel output '" + path + "' has no dataset 'o'" +
                     (prefix.empty() ? "" : " (nor '" + prefix + "o')"));
  const H5DatasetInfo info = r.dataset_info(o);
  KernelOutput k;
  if (info.kind == 'f' && info.size == 2 && info.dtype_attr != "bfloat16") k.format = "fp16";
  else if (info.kind == 'u' && info.size == 2 && info.dtype_attr == "bfloat16") k.format = "bf16";
  else if (info.kind == 'f' && info.size == 4) k.format = "fp32";
  else
    throw UsageError("dataset '" + o + "' of '" + path + "' is not fp16, bf16 (uint16 with " +
                     "dtype=\"bfloat16\") or fp32");
  if (info.dims.size() != 4)
    throw UsageError("dataset '" + o + "' of '" + path + "' has rank " +
                     std::to_string(info.dims.size()) + "; expected [batch, heads_q, tokens, head_dim_v]");
  k.o = r.read_numeric(o);
  const std::string l = o.substr(0, o.size() - 1) + "lse";
  if (r.exists(l)) k.lse = r.read_numeric(l);
  return k;
}

void run_verify(const VerifyCliOptions& opt, const std::string& command_line) {
  if (!opt.out.empty() && !ends_with(opt.out, ".csv") && !ends_with(opt.out, ".h5"))
    throw UsageError("--out must end in .csv or .h5");
  check_output_path(opt.out, {opt.input, opt.kernel_output});
  check_input_file(opt.kernel_output);
  const std::vector<std::string> prefixes = select_dump_prefixes(opt.input, opt.group);
  if (prefixes.size() != 1)
    throw UsageError("'" + opt.input + "' has " + std::to_string(prefixes.size()) +
                     " layer groups: name one with --group");
  const std::vector<LaunchSeq> seqs = dump_varlen(opt.input, prefixes[0]);
  if (opt.sms < 0) throw UsageError("--sms must be >= 1");
  if (opt.sms != 0 && opt.launch.empty() && seqs.empty())
    throw UsageError("--sms sets the SM count of a launch's schedule: give --launch, or a varlen "
                     "dump (this run has neither)");
  const int sms = opt.sms != 0 ? opt.sms : 132;
  AttentionInput in = read_attention_dump(opt.input, prefixes[0], opt.allow_nonfinite);
  if (!opt.launch.empty()) {
    if (opt.method.empty())
      throw UsageError("--launch needs --method (the kernel whose schedule the launch sets)");
    attach_launch(parse_method(opt.method), in, opt.launch, sms);
  }
  const KernelOutput k = read_kernel_output(opt.kernel_output, prefixes[0]);
  {
    const AttentionShape& s = in.shape;
    H5Reader r(opt.kernel_output);
    const std::string o = !prefixes[0].empty() && r.exists(prefixes[0] + "o") ? prefixes[0] + "o" : "o";
    const std::vector<std::uint64_t> want{std::uint64_t(s.batch), std::uint64_t(s.heads_q),
                                          std::uint64_t(s.len_q), std::uint64_t(s.head_dim_v)};
    if (r.dataset_info(o).dims != want) {
      const auto& d = r.dataset_info(o).dims;
      throw UsageError("kernel output 'o' has shape [" + std::to_string(d[0]) + ", " +
                       std::to_string(d[1]) + ", " + std::to_string(d[2]) + ", " +
                       std::to_string(d[3]) + "]; the input needs [" + std::to_string(want[0]) +
                       ", " + std::to_string(want[1]) + ", " + std::to_string(want[2]) + ", " +
                       std::to_string(want[3]) + "]");
    }
  }
  VerifyOptions vo;
  vo.method = opt.method;
  vo.band = opt.band;
  vo.worst = opt.worst;
  vo.counters = opt.counters;
  vo.allow_nonfinite = opt.allow_nonfinite;
  // A varlen dump (cu_seqlens): every sequence judged on its own rows of the packed output,
  // computed inside the launch of all; the exit code is the worst sequence's verdict.
  if (!seqs.empty()) {
    if (opt.method.empty())
      throw UsageError("a varlen dump needs --method (the kernel whose launch it ran in)");
    if (!opt.launch.empty())
      throw UsageError("--launch: a varlen dump is its own launch (cu_seqlens)");
    if (!opt.out.empty())
      throw UsageError("--out takes a dense dump; a varlen dump's report is per sequence on stdout");
    Verdict worst = Verdict::kIdentical;
    AttentionShape lse_shape = in.shape;
    lse_shape.head_dim_v = 1;
    for (int sq = 0; sq < int(seqs.size()); ++sq) {
      const AttentionInput one = varlen_sequence(in, seqs, sq, sms);
      KernelOutput ks;
      ks.format = k.format;
      ks.o = varlen_take(k.o, in.shape, seqs, sq);
      if (!k.lse.empty()) ks.lse = varlen_take(k.lse, lse_shape, seqs, sq);
      const VerifyReport r = verify_kernel(one, ks, vo);
      if (int(r.verdict) > int(worst)) worst = r.verdict;
      if (!opt.quiet) {
        std::printf("sequence %d (%d:%d):\n", sq, seqs[std::size_t(sq)].len_q,
                    seqs[std::size_t(sq)].len_kv);
        std::fputs(format_verify_report(r, opt.worst).c_str(), stdout);
      }
    }
    if (worst == Verdict::kWithinBand)
      throw UsageError("verify: some sequence differs from " + opt.method + " within the band", 1);
    if (worst == Verdict::kOutsideBand)
      throw UsageError("verify: some sequence is outside the band of " + opt.method +
                       " (a likely bug; worst rows above)", 3);
    return;
  }
  // On a terminal: which candidate of how many runs now (without --method, about 20 of them).
  std::mutex mu;
  std::string now;
  vo.progress = [&](int done, int total, const std::string& what) {
    const std::lock_guard<std::mutex> lock(mu);
    now = done < total ? "candidate " + std::to_string(done + 1) + "/" + std::to_string(total) +
                             " " + what
                       : "";
  };
  ProgressLine line(progress_wanted(opt.quiet) && opt.method.empty(), "verify", [&] {
    const std::lock_guard<std::mutex> lock(mu);
    return now;
  });
  const VerifyReport r = verify_kernel(in, k, vo);
  line.stop();
  if (!opt.out.empty()) {
    if (ends_with(opt.out, ".csv")) {
      const std::string csv = verify_rows_csv(r);
      write_file_atomic(opt.out, csv.data(), csv.size());
    } else {
      H5Writer w(opt.out);
      const std::size_t n = r.per_row.size();
      std::vector<std::int64_t> ident(n), ulp(n), within(n), vis(n), sus(n);
      std::vector<double> ek(n), em(n), al(n);
      for (std::size_t i = 0; i < n; ++i) {
        const VerifyRow& v = r.per_row[i];
        ident[i] = v.identical, ulp[i] = std::int64_t(std::min<std::uint64_t>(v.ulp_method, INT64_MAX));
        within[i] = v.err_kernel <= v.allowance, vis[i] = v.visible, sus[i] = v.suspect_block;
        ek[i] = v.err_kernel, em[i] = v.err_method, al[i] = v.allowance;
      }
      const std::vector<std::uint64_t> dims{std::uint64_t(in.shape.batch),
                                            std::uint64_t(in.shape.heads_q),
                                            std::uint64_t(in.shape.len_q)};
      w.write_i64("rows/identical", dims, ident.data());
      w.write_i64("rows/ulp_vs_method", dims, ulp.data());
      w.write_f64("rows/err_kernel", dims, ek.data());
      w.write_f64("rows/err_method", dims, em.data());
      w.write_f64("rows/allowance", dims, al.data());
      w.write_i64("rows/within_band", dims, within.data());
      w.write_i64("rows/visible_keys", dims, vis.data());
      w.write_i64("rows/suspect_kv_block", dims, sus.data());
      auto hist = [&](const std::string& name, const UlpHistogram& h) {
        std::vector<std::int64_t> c(h.counts.begin(), h.counts.end());
        w.write_i64(name, {std::uint64_t(c.size())}, c.data());
        w.attr_i64(name, "nan_mismatch", std::int64_t(h.nan_mismatch));
      };
      hist("ulp/kernel_vs_method", r.ulp_vs_method);
      hist("ulp/kernel_vs_golden", r.ulp_kernel_vs_golden);
      hist("ulp/method_vs_golden", r.ulp_method_vs_golden);
      w.attr_string("/", "method", r.method);
      w.attr_i64("/", "verdict", int(r.verdict));
      w.attr_i64("/", "elems", r.elems);
      w.attr_i64("/", "elems_identical", r.elems_identical);
      w.attr_i64("/", "rows_identical", r.rows_identical);
      w.attr_i64("/", "rows_outside_band", r.rows_outside_band);
      w.attr_f64("/", "err_kernel", r.err_kernel);
      w.attr_f64("/", "err_method", r.err_method);
      w.attr_f64("/", "band", opt.band);
      if (r.diverges) {
        const std::vector<std::int64_t> f{r.first_batch, r.first_head, r.first_row, r.first_col};
        w.write_i64("first_diverging", {4}, f.data());
      }
      if (r.has_counters) {
        const std::vector<std::int64_t> cv = r.counters.column_values();
        w.write_i64("counters", {std::uint64_t(kCounterStages), std::uint64_t(kCounterEvents)}, cv.data());
      }
      write_provenance(w, command_line);
      w.commit();
    }
  }
  if (!opt.quiet) std::fputs(format_verify_report(r, opt.worst).c_str(), stdout);
  if (r.verdict == Verdict::kWithinBand)
    throw UsageError("verify: the kernel differs from " + r.method + " within the band", 1);
  if (r.verdict == Verdict::kOutsideBand)
    throw UsageError("verify: the kernel is outside the band of " + r.method +
                     " (a likely bug; worst rows above)", 3);
}

}  // namespace

void add_verify_command(CLI::App& app) {
  auto opt = std::make_shared<VerifyCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Judge a real kernel's output against the simulator's bits for a method and FP64 golden "
      "(exit 0 bit-identical, 1 within the band, 3 outside it)");
  cmd->add_option("--input", opt->input, "HDF5 dump with q, k, v the kernel ran on")->required();
  cmd->add_option("--group", opt->group, "the layer group of the dump (and of the kernel output)")
      ->check(non_empty());
  cmd->add_option("--kernel-output", opt->kernel_output,
                  "HDF5 with dataset o [batch, heads_q, tokens, head_dim_v] (fp16, bf16 as "
                  "uint16 + dtype=\"bfloat16\", or fp32), optionally lse, at the root or under "
                  "the group")
      ->required();
  cmd->add_option("--method", opt->method,
                  "the method the kernel implements (default: try every registered method with "
                  "the output's format and say which is bit-identical)");
  cmd->add_option("--out", opt->out, "per-row report: .csv, or .h5 with histograms (atomic)")
      ->check(output_name());
  cmd->add_option("--band", opt->band,
                  "the band: kernel error vs golden <= BAND x the method's, per row and overall "
                  "(FlashAttention's rule: 2)")
      ->default_val(2.0);
  cmd->add_option("--worst", opt->worst, "rows named in the report")->default_val(5);
  cmd->add_flag("--counters", opt->counters, "the method's silent-failure counters per stage");
  cmd->add_option("--launch", opt->launch,
                  "the launch the dump's sequences ran as the first of (\"1:4096x16\"; "
                  "`attnsim invariance`'s situations): the method's schedule is that launch's")
      ->check(non_empty());
  cmd->add_option("--sms", opt->sms,
                  "the GPU's SM count for --launch or a varlen dump (default: the H100's 132)");
  cmd->add_flag("--allow-nonfinite", opt->allow_nonfinite,
                "accept NaN/Inf in the inputs and the kernel output");
  cmd->add_flag("--quiet", opt->quiet, "print nothing but errors");
  cmd->callback([opt]() { run_verify(*opt, command_line()); });
}

}  // namespace attnsim
