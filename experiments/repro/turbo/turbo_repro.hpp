// Shared pieces of `attnsim repro turbo` (experiments/repro/turbo/): the summary table, the
// inputs, the error measurement and the job runner; one function per experiment E1-E9 lives in the
// files beside this one (sas.cpp: E1, E2, E9; errors.cpp: E3-E6; drift.cpp: E7; memory.cpp: E8).
#pragma once

#include <cstddef>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "experiments/repro/repro.hpp"
#include "numerics/metrics.hpp"
#include "sim/problem.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim::turbo_repro {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <class... A>
std::string fmt(const char* f, A... a) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

// The summary table: quantity, ours, paper.
struct Summary {
  ReproTable t;
  Summary();
  void add(const std::string& q, double ours, double paper = kNaN);
};

// ---- inputs

struct Input {
  std::string dataset;  // smollm2, minilm, synthetic_drift, long
  std::string name;     // e.g. smollm2:layer_15
  AttentionInput in;
  std::vector<double> gold;
};

// The inputs of the full run and which experiments use which.
struct Inputs {
  std::vector<Input> all;
  std::vector<std::size_t> smol, mini;  // SmolLM2 layers 15 and 29; MiniLM layers 3 and 5
  std::vector<std::size_t> drift;       // E7: SmolLM2, the synthetic drift, the long dump
};

// Reads the real dumps (cut to ATTNSIM_TURBO_TOKENS), makes the drift sequence, adds
// ATTNSIM_TURBO_LONG_DUMP, and computes every golden reference.
Inputs load_inputs(bool progress);

// ---- measurement

struct HeadErr {
  double cos = 0, rel_l1 = 0, rmse = 0;
};
struct Measured {
  std::vector<HeadErr> heads;  // per (batch, query head)
  ErrorMetrics pooled;         // all measured rows of all heads
  int rows = 0;                // measured rows per head
};

// Errors of rows [row0, len_q) per (batch, head) and pooled.
Measured measure(const AttentionInput& in, const std::vector<double>& o,
                 const std::vector<double>& gold, int row0);
// Errors of each row t >= row0 over every (batch, head) together (E7).
std::vector<ErrorMetrics> per_row(const AttentionInput& in, const std::vector<double>& o,
                                  const std::vector<double>& gold, int row0);

// Mean and worst over a set of heads.
struct Agg {
  double cos_mean = 0, cos_min = 1, rel_l1_mean = 0, rel_l1_max = 0, rmse_mean = 0, rmse_max = 0;
  int n = 0;
  void add(const HeadErr& h);
  Agg done() const;
};

// Runs fn(i) for i in [0, n) over OpenMP threads, one simulator per thread (inner parallel regions
// serial), rethrowing the first error.
void parallel_jobs(std::size_t n, const std::function<void(std::size_t)>& fn, bool progress,
                   const char* what);

// FILE.ext -> FILE_suffix.ext
std::string sibling(const std::string& out, const std::string& suffix);

// ---- the error experiments (E3-E6, E9): one method string (or E9's untiled reference) on one
// input, measured on its decode rows (mode=decode) or every row (prefill). Runs shared by several
// rows (the same input and canonical method) are computed once.

struct ErrRow {
  std::string exp, label, method, dataset, input, mode;
  int prefill = 0, n_h = -1, br = 64, bc = 64, n_r = 6;
  std::string selector, scope, bits;
  double kv_bits_per_token = kNaN;
  Measured m;
};

struct Job {
  std::size_t input = 0;
  std::string method;  // a method string, or "untiled" (E9: eight outputs)
  int row0 = 0;
  std::vector<Measured> result;  // one (eight for untiled)
};

class ErrorJobs {
 public:
  explicit ErrorJobs(const Inputs& inputs) : inputs_(inputs) {}
  const Inputs& inputs() const { return inputs_; }
  // The decode schedule's prompt length of input i with key block bc.
  int prefill_of(std::size_t i, int bc) const;
  // Adds a row measuring `method` on `input` (output `out` of an untiled job).
  void add(ErrRow r, std::size_t input, const std::string& method, bool decode,
           std::size_t out = 0);
  // The row added last (experiments name a row's configuration after adding it).
  ErrRow& last() { return rows_.back().first; }
  std::vector<std::pair<ErrRow, std::size_t>>& rows() { return rows_; }
  // Runs every job, the expensive ones first, and returns the rows with their measurements.
  std::vector<ErrRow> run(bool progress);

 private:
  std::size_t job(std::size_t input, const std::string& method, int row0);
  const Inputs& inputs_;
  std::vector<Job> jobs_;
  std::map<std::pair<std::size_t, std::string>, std::size_t> job_of_;  // (input, method) -> job
  std::vector<std::pair<ErrRow, std::size_t>> rows_;                   // row template, job
  std::vector<std::size_t> row_out_;
};

// The measured rows of E3-E6 and E9.
struct ErrorRows {
  std::vector<ErrRow> rows;
  // Mean and worst over every head of every input of a dataset, for one experiment and label.
  Agg agg(const std::string& exp, const std::string& label, const std::string& dataset) const;
};

// Adds err_cos_Q, err_rel_l1_Q and err_rmse_Q.
void put_errors(Summary& s, const std::string& q, const Agg& a, double paper = kNaN);

ReproTable errors_table(const std::vector<ErrRow>& rows);

// ---- one function per experiment. *_rows add summary rows and return the notes' lines;
// *_jobs add the experiment's runs to the shared error jobs.

std::string e1_cubic(Summary& s);                            // sas.cpp
std::string e2_sas_error(Summary& s);                        // sas.cpp
void e3_stages_jobs(ErrorJobs& jobs);                        // errors.cpp
std::string e3_stages_rows(Summary& s, const ErrorRows& e);  // errors.cpp
void e4_mixed_precision_jobs(ErrorJobs& jobs);               // errors.cpp
std::string e4_mixed_precision_rows(Summary& s, const ErrorRows& e, int heads_kv);
void e5_blocks_jobs(ErrorJobs& jobs);                        // errors.cpp
std::string e5_blocks_rows(Summary& s, const ErrorRows& e);  // errors.cpp
void e6_kivi_jobs(ErrorJobs& jobs);                          // errors.cpp
std::string e6_kivi_rows(Summary& s, const ErrorRows& e, int head_dim);
// E7 runs TurboOptions directly (the clamp counts live in TurboResult's caches): drift.cpp.
struct DriftCfg {
  std::string label;
  int prefill = 64;
  BufferScale scale = BufferScale::kPrefill;
  bool compress = true;
  std::string method() const;
};
struct DriftJob {
  std::size_t input = 0;
  DriftCfg cfg;
  std::vector<ErrorMetrics> rows;
  double clamp_k = 0, clamp_v = 0;  // clamped new-token elements / all new-token elements
  long long new_tokens = 0;
};
std::vector<DriftJob> e7_drift(const Inputs& inputs, bool progress);
std::string e7_drift_rows(Summary& s, const Inputs& inputs, const std::vector<DriftJob>& drift);
ReproTable drift_table(const std::vector<DriftJob>& jobs, const Inputs& inputs);
struct MemRow {
  std::string config;
  int dim = 0, tokens = 0, heads_kv = 0;
  double bits_per_token = 0, ratio = 0, codes = 0, metadata = 0, residual = 0;
};
std::vector<MemRow> e8_memory();  // memory.cpp
std::string e8_memory_rows(Summary& s, const std::vector<MemRow>& rows);
ReproTable memory_table(const std::vector<MemRow>& rows);
// E9's untiled references: outs[v], v = 0..3 SAS with n_r = kNr[v], v = 4..7 exact exp cut at
// -kNr[v - 4] (sas.cpp).
constexpr int kNr[] = {4, 5, 6, 8};
std::vector<std::vector<double>> untiled_sas(const AttentionInput& in);
void e9_sas_tiling_jobs(ErrorJobs& jobs);                        // sas.cpp
std::string e9_sas_tiling_rows(Summary& s, const ErrorRows& e);  // sas.cpp

}  // namespace attnsim::turbo_repro
