// `attnsim repro turbo` E1 (Eq. 15's cubic), E2 (SAS's error against e^x) and E9 (SAS inside the
// tiles against SAS over the whole row).
#include "sim/turbo/sas.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "experiments/repro/turbo/turbo_repro.hpp"
#include "formats/encoding.hpp"

namespace attnsim::turbo_repro {

namespace {

constexpr double kPaperPoly[4] = {-0.1025, 0.4626, -0.9922, 0.9996};  // Eq. 15, c3..c0

double poly_max_rel(const std::array<double, 4>& c) {
  double m = 0;
  for (int k = 0; k <= 100000; ++k) {
    const double f = k / 100000.0;
    const double p = ((c[0] * f + c[1]) * f + c[2]) * f + c[3];
    m = std::max(m, std::fabs(p - std::exp(-f)) * std::exp(f));
  }
  return m;
}

}  // namespace

std::string e1_cubic(Summary& s) {
  const std::array<double, 4> cont = sas_poly_fit(0), grid = sas_poly_fit(101);
  const char* name[4] = {"c3", "c2", "c1", "c0"};
  for (int i = 0; i < 4; ++i)
    s.add(std::string("poly_") + name[i], cont[std::size_t(i)], kPaperPoly[i]);
  for (int i = 0; i < 4; ++i)
    s.add(std::string("poly101_") + name[i], grid[std::size_t(i)], kPaperPoly[i]);
  const std::array<double, 4> paper{kPaperPoly[0], kPaperPoly[1], kPaperPoly[2], kPaperPoly[3]};
  s.add("poly_max_rel_paper_coeffs", poly_max_rel(paper));
  s.add("poly_max_rel_continuous_fit", poly_max_rel(cont));
  std::string n = fmt(
      "E1 cubic (Eq. 15), c3..c0: paper %.4f %.4f %.4f %.4f; continuous LS refit %.6f %.6f %.6f "
      "%.6f (rounds to %.4f %.4f %.4f %.4f); 101-point grid fit %.6f %.6f %.6f %.6f (rounds to "
      "%.4f %.4f %.4f %.4f: the paper's digits). Max rel. error on [0,1] in FP64: paper's %.3g, "
      "continuous fit's %.3g.\n",
      kPaperPoly[0], kPaperPoly[1], kPaperPoly[2], kPaperPoly[3], cont[0], cont[1], cont[2],
      cont[3], cont[0], cont[1], cont[2], cont[3], grid[0], grid[1], grid[2], grid[3], grid[0],
      grid[1], grid[2], grid[3], poly_max_rel(paper), poly_max_rel(cont));
  return n;
}

std::string e2_sas_error(Summary& s) {
  std::string n;
  n += "E2 SAS vs e^x on [-6, 0] (fp16: every fp16 argument; fp32: 2^20 uniform arguments), "
       "max / mean relative error:\n";
  struct V {
    const char* q;
    SasFormat f;
    bool fma;
    SasThreshold th;
  };
  const V vs[] = {{"fp16", SasFormat::kFp16, false, SasThreshold::kIntended},
                  {"fp32", SasFormat::kFp32, false, SasThreshold::kIntended},
                  {"fp16_fma", SasFormat::kFp16, true, SasThreshold::kIntended},
                  {"fp32_fma", SasFormat::kFp32, true, SasThreshold::kIntended},
                  {"fp16_literal", SasFormat::kFp16, false, SasThreshold::kLiteral}};
  for (const V& v : vs) {
    SasRule r;
    r.fmt = v.f;
    r.fma = v.fma;
    r.threshold = v.th;
    const SasErrorStats e = sas_error(r, -6.0);
    s.add(std::string("sas_max_rel_") + v.q, e.max_rel);
    s.add(std::string("sas_mean_rel_") + v.q, e.mean_rel);
    n += fmt("  %-13s max %.4g (at x = %.6g)  mean %.4g  over %lld arguments\n", v.q, e.max_rel,
             e.argmax, e.mean_rel, e.count);
  }
  n += "  (paper: no figure, \"near loss-less\"; the literal threshold zeroes x in (-6, -5]: "
       "relative error 1)\n";
  return n;
}

// E9's untiled references: per row, the true max, then SAS (or e^x cut at −n_r) over the whole
// row, on the FP16-rounded inputs, scores and sums in FP64 (SAS's argument rounded to FP32 as the
// pipeline hands it over).

std::vector<std::vector<double>> untiled_sas(const AttentionInput& in) {
  const AttentionShape& s = in.shape;
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  auto h16 = [&](const std::vector<float>& x) {
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      y[i] = decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x[i], kRne));
    return y;
  };
  const std::vector<double> q = h16(in.q), k = h16(in.k), v = h16(in.v);
  const int d = s.head_dim, dv = s.head_dim_v, g = s.group();
  const double scale = in.scale();
  std::vector<std::vector<double>> outs(8, std::vector<double>(s.o_size(), 0.0));
  SasRule rules[4];
  for (int i = 0; i < 4; ++i) rules[i].n_r = kNr[i];
  std::vector<double> x(static_cast<std::size_t>(s.len_kv)), acc(static_cast<std::size_t>(dv));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      const int hk = h / g;
      const double* K = k.data() + (std::size_t(b) * s.heads_kv + hk) * s.len_kv * d;
      const double* V = v.data() + (std::size_t(b) * s.heads_kv + hk) * s.len_kv * dv;
      for (int i = 0; i < s.len_q; ++i) {
        const double* Q = q.data() + ((std::size_t(b) * s.heads_q + h) * s.len_q + i) * d;
        int nvis = 0;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < s.len_kv; ++j) {
          if (!in.visible(i, j)) break;
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += Q[c] * K[std::size_t(j) * d + c];
          x[std::size_t(j)] = dot * scale;
          m = std::max(m, x[std::size_t(j)]);
          nvis = j + 1;
        }
        for (int var = 0; var < 8; ++var) {
          std::fill(acc.begin(), acc.end(), 0.0);
          double l = 0;
          for (int j = 0; j < nvis; ++j) {
            const double y = x[std::size_t(j)] - m;
            const double p = var < 4 ? double(sas_exp(float(y), rules[var]))
                                     : (y >= -double(kNr[var - 4]) ? std::exp(y) : 0.0);
            if (p == 0) continue;
            l += p;
            for (int c = 0; c < dv; ++c) acc[std::size_t(c)] += p * V[std::size_t(j) * dv + c];
          }
          double* O =
              outs[std::size_t(var)].data() + ((std::size_t(b) * s.heads_q + h) * s.len_q + i) * dv;
          for (int c = 0; c < dv; ++c) O[c] = l > 0 ? acc[std::size_t(c)] / l : 0.0;
        }
      }
    }
  return outs;
}

void e9_sas_tiling_jobs(ErrorJobs& jobs) {
  const Inputs& in = jobs.inputs();
  // E9: SAS in the tiles (FP16 FlashAttention with SAS, prefill) against the untiled references.
  std::vector<std::size_t> all_real = in.smol;
  all_real.insert(all_real.end(), in.mini.begin(), in.mini.end());
  for (std::size_t i : all_real)
    for (int v = 0; v < 4; ++v) {
      ErrRow r;
      r.exp = "E9";
      r.n_r = kNr[v];
      r.label = fmt("tiled_sas_nr%d", kNr[v]);
      jobs.add(r, i, fmt("turbo:mode=prefill,flashq=off,n_r=-%d", kNr[v]), false);
    }
  for (std::size_t i : all_real)
    for (int var = 0; var < 8; ++var) {
      ErrRow r;
      r.exp = "E9";
      r.n_r = kNr[var % 4];
      r.label = fmt("untiled_%s_nr%d", var < 4 ? "sas" : "exp_cut", kNr[var % 4]);
      jobs.add(r, i, "untiled", false, std::size_t(var));
    }
  // Fix the untiled rows' method names.
  for (auto& [r, j] : jobs.rows())
    if (r.method == "untiled") r.method = r.label + " (repro_turbo.cpp untiled_sas)";
}

std::string e9_sas_tiling_rows(Summary& s, const ErrorRows& e) {
  std::string notes;
  // E9
  notes +=
      "E9 SAS over tiles (running max) vs over the whole row, prefill rel_l1 SmolLM2 / "
      "MiniLM (FP16 FlashAttention, exact exp: " +
      fmt("%.4e / %.4e", e.agg("E3", "fp16", "smollm2").rel_l1_mean,
          e.agg("E3", "fp16", "minilm").rel_l1_mean) +
      " decode / prefill):\n";
  for (int v = 0; v < 4; ++v) {
    const int nr = kNr[v];
    const Agg ts = e.agg("E9", fmt("tiled_sas_nr%d", nr), "smollm2"),
              tm = e.agg("E9", fmt("tiled_sas_nr%d", nr), "minilm");
    const Agg us = e.agg("E9", fmt("untiled_sas_nr%d", nr), "smollm2"),
              um = e.agg("E9", fmt("untiled_sas_nr%d", nr), "minilm");
    const Agg es = e.agg("E9", fmt("untiled_exp_cut_nr%d", nr), "smollm2"),
              em = e.agg("E9", fmt("untiled_exp_cut_nr%d", nr), "minilm");
    s.add(fmt("sas_tiled_rel_l1_nr%d", nr), ts.rel_l1_mean);
    s.add(fmt("sas_untiled_rel_l1_nr%d", nr), us.rel_l1_mean);
    s.add(fmt("exp_cut_untiled_rel_l1_nr%d", nr), es.rel_l1_mean);
    s.add(fmt("sas_tiled_rel_l1_minilm_nr%d", nr), tm.rel_l1_mean);
    s.add(fmt("sas_untiled_rel_l1_minilm_nr%d", nr), um.rel_l1_mean);
    notes +=
        fmt("  n_r=-%d  tiled SAS %.4e / %.4e   untiled SAS %.4e / %.4e   untiled exact exp "
            "cut at -%d %.4e / %.4e\n",
            nr, ts.rel_l1_mean, tm.rel_l1_mean, us.rel_l1_mean, um.rel_l1_mean, nr, es.rel_l1_mean,
            em.rel_l1_mean);
  }
  notes += "  (the paper: §4 \"0 to -5\", §5.2 n_r = -6)\n";
  return notes;
}

}  // namespace attnsim::turbo_repro
