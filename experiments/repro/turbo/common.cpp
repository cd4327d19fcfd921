// Shared pieces of `attnsim repro turbo` (see turbo_repro.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "experiments/common/error.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/repro/turbo/turbo_repro.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim::turbo_repro {

Summary::Summary() {
  t.columns = {{"quantity", 's',
                "what is measured (README of the repro: experiments/repro/turbo/repro_turbo.cpp)"},
               {"ours", 'f', "attnsim's figure (NaN: the paper's number has no analogue here)"},
               {"paper", 'f', "the paper's figure, NaN where it prints none"}};
}

void Summary::add(const std::string& q, double ours, double paper) {
  t.add_row({{q}, {"", ours}, {"", paper}});
}

namespace {

std::string real_file(const std::string& name) {
  const std::string rel = "data/real/" + name;
  if (std::filesystem::exists(rel)) return rel;
  return std::string(ATTNSIM_DATA_DIR) + "/real/" + name;
}

int env_tokens() {
  const char* e = std::getenv("ATTNSIM_TURBO_TOKENS");
  if (!e || !*e) return 0;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (*end || v < 128 || v > 1 << 20)
    throw UsageError("ATTNSIM_TURBO_TOKENS must be an integer in 128..1048576 (got '" +
                     std::string(e) + "')");
  return int(v);
}

// The synthetic long sequence of E7: N(0,1) Q, K, V (GQA 2:1, d = 64, causal) whose K and V rows
// are scaled by 4^(t/(N−1)): a scale that drifts 4× from the prompt to the last token, so new
// tokens outgrow the prompt's universal scale and are clamped.
AttentionInput drift_input(int n) {
  AttentionInput in = make_synthetic(
      "normal:hq=2,hkv=1,nq=" + std::to_string(n) + ",nkv=" + std::to_string(n) + ",d=64,causal=1",
      7);
  const AttentionShape& s = in.shape;
  for (int sl = 0; sl < s.batch * s.heads_kv; ++sl)
    for (int t = 0; t < s.len_kv; ++t) {
      const float g = float(std::pow(4.0, double(t) / double(s.len_kv - 1)));
      for (int c = 0; c < s.head_dim; ++c) {
        in.k[(std::size_t(sl) * s.len_kv + t) * s.head_dim + c] *= g;
        in.v[(std::size_t(sl) * s.len_kv + t) * s.head_dim_v + c] *= g;
      }
    }
  return in;
}

}  // namespace

Inputs load_inputs(bool progress) {
  // ---- inputs
  Inputs r;
  const int cut = env_tokens();
  std::vector<Input>& inputs = r.all;
  std::vector<std::size_t>&smol = r.smol, &mini = r.mini;
  {
    const std::string sf = real_file("smollm2_gpl3.h5"), mf = real_file("minilm_gpl3.h5");
    for (const char* layer : {"layer_15/", "layer_29/"}) {
      Input x;
      x.dataset = "smollm2";
      x.name = "smollm2:" + std::string(layer).substr(0, 8);
      x.in = first_tokens(read_attention_dump(sf, layer, false), cut);
      smol.push_back(inputs.size());
      inputs.push_back(std::move(x));
    }
    for (const char* layer : {"layer_03/", "layer_05/"}) {
      Input x;
      x.dataset = "minilm";
      x.name = "minilm:" + std::string(layer).substr(0, 8);
      x.in = first_tokens(read_attention_dump(mf, layer, false), cut);
      mini.push_back(inputs.size());
      inputs.push_back(std::move(x));
    }
  }
  std::vector<std::size_t>& drift_inputs = r.drift;
  drift_inputs = smol;
  {
    Input x;
    x.dataset = "synthetic_drift";
    const int n = cut ? std::min(cut, 3072) : 3072;
    x.name = "synthetic:normal,hq=2,hkv=1,d=64,causal,n=" + std::to_string(n) + ",K/V x4^(t/n)";
    x.in = drift_input(n);
    drift_inputs.push_back(inputs.size());
    inputs.push_back(std::move(x));
  }
  if (const char* e = std::getenv("ATTNSIM_TURBO_LONG_DUMP"); e && *e) {
    Input x;
    x.dataset = "long";
    const std::vector<std::string> pre = dump_prefixes(e);
    x.in = read_attention_dump(e, pre.at(0), false);
    if (!x.in.causal)
      throw UsageError("ATTNSIM_TURBO_LONG_DUMP: '" + std::string(e) +
                       "' is not causal (E7 needs decode steps)");
    x.name = std::string(e) + (pre[0].empty() ? "" : ":" + pre[0].substr(0, pre[0].size() - 1));
    drift_inputs.push_back(inputs.size());
    inputs.push_back(std::move(x));
  }
  parallel_jobs(
      inputs.size(), [&](std::size_t i) { inputs[i].gold = golden_attention_ref(inputs[i].in); },
      progress, "golden");
  return r;
}

// Errors of rows [row0, len_q) per (batch, head) and pooled.
Measured measure(const AttentionInput& in, const std::vector<double>& o,
                 const std::vector<double>& gold, int row0) {
  const AttentionShape& s = in.shape;
  if (o.size() != s.o_size()) throw UsageError("internal error: repro turbo: output size");
  Measured m;
  m.rows = s.len_q - row0;
  const std::size_t dv = std::size_t(s.head_dim_v), per = std::size_t(m.rows) * dv;
  std::vector<double> a, b;
  a.reserve(per * std::size_t(s.batch * s.heads_q));
  b.reserve(a.capacity());
  for (int bh = 0; bh < s.batch * s.heads_q; ++bh) {
    const std::size_t off = (std::size_t(bh) * std::size_t(s.len_q) + std::size_t(row0)) * dv;
    const ErrorMetrics e = error_metrics(o.data() + off, gold.data() + off, per);
    m.heads.push_back({e.cosine, e.rel_l1, e.rmse});
    a.insert(a.end(), o.begin() + std::ptrdiff_t(off), o.begin() + std::ptrdiff_t(off + per));
    b.insert(b.end(), gold.begin() + std::ptrdiff_t(off), gold.begin() + std::ptrdiff_t(off + per));
  }
  m.pooled = error_metrics(a, b);
  return m;
}

// Errors of each row t >= row0 over every (batch, head) together (E7).
std::vector<ErrorMetrics> per_row(const AttentionInput& in, const std::vector<double>& o,
                                  const std::vector<double>& gold, int row0) {
  const AttentionShape& s = in.shape;
  const std::size_t dv = std::size_t(s.head_dim_v);
  std::vector<ErrorMetrics> r;
  std::vector<double> a, b;
  for (int t = row0; t < s.len_q; ++t) {
    a.clear();
    b.clear();
    for (int bh = 0; bh < s.batch * s.heads_q; ++bh) {
      const std::size_t off = (std::size_t(bh) * std::size_t(s.len_q) + std::size_t(t)) * dv;
      a.insert(a.end(), o.begin() + std::ptrdiff_t(off), o.begin() + std::ptrdiff_t(off + dv));
      b.insert(b.end(), gold.begin() + std::ptrdiff_t(off),
               gold.begin() + std::ptrdiff_t(off + dv));
    }
    r.push_back(error_metrics(a, b));
  }
  return r;
}

void Agg::add(const HeadErr& h) {
  cos_mean += h.cos;
  rel_l1_mean += h.rel_l1;
  rmse_mean += h.rmse;
  cos_min = std::min(cos_min, h.cos);
  rel_l1_max = std::max(rel_l1_max, h.rel_l1);
  rmse_max = std::max(rmse_max, h.rmse);
  ++n;
}

Agg Agg::done() const {
  Agg a = *this;
  if (n) {
    a.cos_mean /= n;
    a.rel_l1_mean /= n;
    a.rmse_mean /= n;
  } else {
    a.cos_mean = a.cos_min = a.rel_l1_mean = a.rel_l1_max = a.rmse_mean = a.rmse_max = kNaN;
  }
  return a;
}

void parallel_jobs(std::size_t n, const std::function<void(std::size_t)>& fn, bool progress,
                   const char* what) {
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
  std::string error;
  int code = 0;
  std::size_t finished = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < long(n); ++i) {
    try {
      fn(std::size_t(i));
    } catch (const UsageError& e) {
#pragma omp critical(attnsim_turbo_error)
      if (error.empty()) error = e.what(), code = e.code();
    } catch (const std::exception& e) {
#pragma omp critical(attnsim_turbo_error)
      if (error.empty()) error = e.what(), code = 2;
    }
#pragma omp critical(attnsim_turbo_progress)
    {
      ++finished;
      if (progress) std::fprintf(stderr, "\rturbo %s: %zu/%zu   ", what, finished, n);
    }
  }
  omp_set_max_active_levels(levels);
  if (progress) std::fprintf(stderr, "\n");
  if (!error.empty()) throw UsageError(error, code);
}

std::string sibling(const std::string& out, const std::string& suffix) {
  const std::size_t dot = out.find_last_of('.');
  return out.substr(0, dot) + "_" + suffix + out.substr(dot);
}

int ErrorJobs::prefill_of(std::size_t i, int bc) const {
  return turbo_prefill_tokens(inputs_.all[i].in, -1, bc);
}

std::size_t ErrorJobs::job(std::size_t input, const std::string& method, int row0) {
  const std::string canon = method == "untiled" ? method : parse_method(method).canonical();
  auto it = job_of_.find({input, canon});
  if (it != job_of_.end()) return it->second;
  jobs_.push_back({input, method, row0, {}});
  job_of_[{input, canon}] = jobs_.size() - 1;
  return jobs_.size() - 1;
}

void ErrorJobs::add(ErrRow r, std::size_t input, const std::string& method, bool decode,
                    std::size_t out) {
  r.method = method;
  r.dataset = inputs_.all[input].dataset;
  r.input = inputs_.all[input].name;
  r.mode = decode ? "decode" : "prefill";
  r.prefill = decode ? prefill_of(input, r.bc) : 0;
  rows_.push_back({r, job(input, method, r.prefill)});
  row_out_.push_back(out);
}

std::vector<ErrRow> ErrorJobs::run(bool progress) {
  const std::vector<Input>& inputs = inputs_.all;
  std::vector<Job>& jobs = jobs_;
  // Expensive jobs first (KIVI, FP16 decode), so the two threads finish together.
  std::vector<std::size_t> order(jobs.size());
  for (std::size_t k = 0; k < jobs.size(); ++k) order[k] = k;
  auto cost = [&](const Job& j) {
    const AttentionShape& s = inputs[j.input].in.shape;
    double c = double(s.len_kv) * s.len_q * s.heads_q * s.head_dim;
    if (j.method.rfind("kivi", 0) == 0) c *= 8;
    if (j.method.find("flashq=off") != std::string::npos) c *= 2.5;
    return c;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cost(jobs[a]) > cost(jobs[b]); });
  parallel_jobs(
      jobs.size(),
      [&](std::size_t k) {
        Job& j = jobs[order[k]];
        const Input& x = inputs[j.input];
        if (j.method == "untiled") {
          for (const auto& o : untiled_sas(x.in)) j.result.push_back(measure(x.in, o, x.gold, 0));
        } else {
          const MethodOutput o = parse_method(j.method).run(x.in);
          j.result.push_back(measure(x.in, o.o, x.gold, j.row0));
        }
      },
      progress, "errors");
  std::vector<ErrRow> err_rows;
  for (std::size_t k = 0; k < rows_.size(); ++k) {
    ErrRow r = rows_[k].first;
    r.m = jobs[rows_[k].second].result.at(row_out_[k]);
    err_rows.push_back(std::move(r));
  }

  return err_rows;
}

Agg ErrorRows::agg(const std::string& exp, const std::string& label,
                   const std::string& dataset) const {
  Agg a;
  for (const ErrRow& r : rows)
    if (r.exp == exp && r.label == label && r.dataset == dataset)
      for (const HeadErr& h : r.m.heads) a.add(h);
  return a.done();
}

void put_errors(Summary& s, const std::string& q, const Agg& a, double paper) {
  s.add("err_cos_" + q, a.cos_mean, paper);
  s.add("err_rel_l1_" + q, a.rel_l1_mean, paper);
  s.add("err_rmse_" + q, a.rmse_mean, paper);
}

ReproTable errors_table(const std::vector<ErrRow>& rows) {
  ReproTable t;
  t.title =
      "turbo E3-E6, E9: attention error against FP64 golden per configuration and input (mean "
      "and worst over the input's query heads; decode: the rows past the prompt only)";
  t.columns = {
      {"experiment", 's', "E3 stages, E4 mixed precision, E5 blocks, E6 KIVI, E9 SAS tiling"},
      {"label", 's', "the configuration's name in the summary"},
      {"method", 's', "attnsim method string (E9 untiled_*: the repro's own reference loop)"},
      {"dataset", 's', "smollm2 (causal, decode) or minilm (bidirectional, prefill)"},
      {"input", 's', "dump and layer"},
      {"mode", 's', "decode (Alg. 2 steps after the prompt) or prefill (Alg. 1 on every row)"},
      {"prefill", 'i', "prompt tokens (decode); the measured rows start there"},
      {"rows", 'i', "measured rows per head"},
      {"n_h", 'i', "E4: caches at 2 bits (-1: not a mixed configuration)"},
      {"selector", 's', "E4: head selector"},
      {"nh_scope", 's', "E4: head (K and V together) or kv_separate"},
      {"bits", 's', "bits of each KV head's K and V cache"},
      {"kv_bits_per_token", 'f', "cache bits per token per KV head at these bits (d of the input)"},
      {"br", 'i', "query block"},
      {"bc", 'i', "key block = cache block = buffer n_b"},
      {"n_r", 'i', "SAS threshold magnitude"},
      {"cos_mean", 'f', "cosine similarity, mean over heads"},
      {"cos_min", 'f', "worst head"},
      {"rel_l1_mean", 'f', "relative L1, mean over heads"},
      {"rel_l1_max", 'f', "worst head"},
      {"rmse_mean", 'f', "RMSE, mean over heads"},
      {"rmse_max", 'f', "worst head"},
      {"cosine", 'f', "all heads' measured rows together"},
      {"rel_l1", 'f', "all heads together"},
      {"rmse", 'f', "all heads together"}};
  for (const ErrRow& r : rows) {
    Agg a;
    for (const HeadErr& h : r.m.heads) a.add(h);
    a = a.done();
    t.add_row({{r.exp},
               {r.label},
               {r.method},
               {r.dataset},
               {r.input},
               {r.mode},
               {"", double(r.prefill)},
               {"", double(r.m.rows)},
               {"", double(r.n_h)},
               {r.selector},
               {r.scope},
               {r.bits},
               {"", r.kv_bits_per_token},
               {"", double(r.br)},
               {"", double(r.bc)},
               {"", double(r.n_r)},
               {"", a.cos_mean},
               {"", a.cos_min},
               {"", a.rel_l1_mean},
               {"", a.rel_l1_max},
               {"", a.rmse_mean},
               {"", a.rmse_max},
               {"", r.m.pooled.cosine},
               {"", r.m.pooled.rel_l1},
               {"", r.m.pooled.rmse}});
  }
  return t;
}

}  // namespace attnsim::turbo_repro
