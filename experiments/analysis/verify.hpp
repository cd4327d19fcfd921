// `attnsim verify`: a real kernel's output judged against the simulator's bits for a method and
// against FP64 golden attention (bit-identical fractions, ULP histograms, the first diverging
// element, where the divergence concentrates, and a verdict by FlashAttention's error-ratio rule).
// No HDF5 here: the command line (cli/cmd_verify.cpp) and the Python module read the files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "numerics/metrics.hpp"
#include "sim/pipeline/counters.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// What a kernel returned: O [batch, heads_q, len_q, head_dim_v] as the values of `format`
// (fp16, bf16 or fp32: every value exact in it) and optionally its natural-log LSE per row.
struct KernelOutput {
  std::vector<double> o;
  std::string format;
  std::vector<double> lse;  // empty: not given
};

struct VerifyOptions {
  std::string method;  // empty: try every candidate of verify_candidates() with the same format
  double band = 2.0;   // the kernel's error may be `band` × the method's (FlashAttention: 2)
  int worst = 5;       // rows named in the report
  bool allow_nonfinite = false;  // NaN/Inf in the kernel's output (refused by default)
  bool counters = false;         // the method's silent-failure counters (pipeline methods)
  // Optional: called on the caller's thread before each candidate method runs (done, total,
  // the method), and with done == total when the candidates have run.
  std::function<void(int done, int total, const std::string& what)> progress;
};

// Verdicts, as the command's exit codes.
enum class Verdict : int { kIdentical = 0, kWithinBand = 1, kOutsideBand = 3 };

// One output row's figures.
struct VerifyRow {
  int batch = 0, head = 0, row = 0;
  bool identical = true;
  std::uint64_t ulp_method = 0;  // max ULP distance kernel vs method over the row
  double err_kernel = 0.0;       // max |kernel − golden|
  double err_method = 0.0;       // max |method − golden|
  double allowance = 0.0;        // band × max(err_method, one ULP of the row's largest |golden|)
  int visible = 0;               // keys the row sees (the mask)
  bool nonfinite_input = false;  // q's row or a visible K/V row holds NaN/Inf
  // For a row outside the band: the KV block (of the method's bk) whose omission from golden
  // attention best explains the kernel's output, or -1 when no block explains it.
  int suspect_block = -1;
  double err_without_block = 0.0;  // max |kernel − golden without that block|
};

// How many diverging rows fall in one class of rows (a tile or mask boundary, non-finite input).
struct Concentration {
  std::string what;           // e.g. "rows of q block 3 (bq=128)"
  std::int64_t rows = 0;      // rows of that class
  std::int64_t diverging = 0; // of which differ from the method
};

struct VerifyReport {
  std::string method;        // the canonical method string compared with
  std::string chosen_by;     // "given", or how the candidate was chosen
  std::vector<std::string> identical_candidates;  // without --method: every bit-identical one
  std::string format;
  int bq = 0, bk = 0;        // the method's tiles (0: not a pipeline method)
  std::int64_t elems = 0, elems_identical = 0, rows = 0, rows_identical = 0;
  UlpHistogram ulp_vs_method, ulp_kernel_vs_golden, ulp_method_vs_golden;
  bool diverges = false;
  int first_batch = 0, first_head = 0, first_row = 0, first_col = 0;
  double first_kernel = 0.0, first_method = 0.0, first_golden = 0.0;
  double err_kernel = 0.0, err_method = 0.0, allowance = 0.0;  // overall max |· − golden|
  std::int64_t rows_outside_band = 0;
  std::vector<Concentration> concentration;
  std::vector<VerifyRow> per_row;   // every row, in output order
  std::vector<std::size_t> worst;   // indices into per_row, worst first (kernel err / allowance)
  // The LSE, where both the kernel and the method give one.
  bool lse_compared = false;
  std::int64_t lse_rows = 0, lse_identical = 0;
  double lse_max_abs = 0.0;
  std::string lse_note;
  StageCounters counters;  // opt.counters on a pipeline method
  bool has_counters = false;
  Verdict verdict = Verdict::kIdentical;
};

// Checks a kernel output against an input (shape, format, finiteness): a UsageError of one line.
void check_kernel_output(const AttentionInput& in, const KernelOutput& k, bool allow_nonfinite);

// The methods tried when none is given: each registered method's defaults and every public
// SageAttention path (attnsim's sage_h100 recordings), for an input of this dtype.
std::vector<std::string> verify_candidates(const AttentionInput& in);

VerifyReport verify_kernel(const AttentionInput& in, const KernelOutput& k,
                           const VerifyOptions& opt);

// The report as the command prints it (several lines, ending with the verdict).
std::string format_verify_report(const VerifyReport& r, int worst);
// One line per output row: batch,head,row,identical,ulp_vs_method,err_kernel,err_method,
// allowance,within_band,visible_keys,nonfinite_input,suspect_kv_block.
std::string verify_rows_csv(const VerifyReport& r);

}  // namespace attnsim
