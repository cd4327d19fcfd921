// Reproductions of AMLA (Liao et al., arXiv 2509.25224) on the sim/amla presets:
//  amla          Tables 3 and 4 (relative Frobenius error of Base and AMLA vs Golden, twelve input
//                distributions, 8K context, BF16), with the set-up the paper leaves open fixed by
//                experiment (sim/amla/README.md "The set-up of Tables 3 and 4");
//  amla-acc      how much those figures depend on the Cube unit's (unpublished) accumulation;
//  amla-preload  Theorem 4.1 / B.1 by experiment, Table 2's arithmetic intensities and where MLA
//                decode sits on the H100 roofline.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/repro/repro.hpp"
#include "numerics/metrics.hpp"
#include "sim/amla/amla.hpp"
#include "sim/amla/preload.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {

// The twelve distributions of Tables 3 and 4, named as the paper prints them, with its figures.
struct Dist {
  const char* name;
  bool gaussian;
  double param;  // σ² for N(0, σ²), a for U(−a, a)
  double paper_base, paper_amla;
};
constexpr Dist kDists[] = {
    {"N(0,1)", true, 1, 1.77e-3, 1.81e-3},     {"N(0,4)", true, 4, 1.74e-3, 1.75e-3},
    {"N(0,9)", true, 9, 1.65e-3, 1.66e-3},     {"N(0,16)", true, 16, 1.51e-3, 1.51e-3},
    {"N(0,25)", true, 25, 1.33e-3, 1.35e-3},   {"N(0,100)", true, 100, 7.82e-4, 7.86e-4},
    {"U(-1,1)", false, 1, 1.97e-3, 2.01e-3},   {"U(-3,3)", false, 3, 1.77e-3, 1.78e-3},
    {"U(-5,5)", false, 5, 1.69e-3, 1.69e-3},   {"U(-10,10)", false, 10, 1.24e-3, 1.24e-3},
    {"U(-20,20)", false, 20, 7.04e-4, 7.04e-4}, {"U(-60,60)", false, 60, 2.26e-4, 2.26e-4},
};
constexpr int kNumDists = 12;

// The MLA decode set-up (sim/amla/README.md): G = 128 query heads of one token, D_k = 576,
// D_v = 512, V = the first 512 columns of K (the latent c of K = [c, k_rope]), softmax scale
// 1/√576 (Eq. 1's 1/√D_k), Q and K drawn from the distribution and rounded to BF16; Golden is
// FP64 attention on the same BF16 inputs; outputs in BF16.
struct Setup {
  int g = 128, s = 8192, dk = 576, dv = 512;
};

// splitmix64: a seed per (distribution, sample) whatever the thread that draws it.
struct Rng {
  std::uint64_t x;
  std::uint64_t next() {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

double draw(Rng& r, const Dist& d) {
  if (!d.gaussian) return (2.0 * r.uniform() - 1.0) * d.param;
  // Box-Muller (one value per pair of uniforms: simple and platform-independent).
  const double u1 = 1.0 - r.uniform(), u2 = r.uniform();
  return std::sqrt(d.param) * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

AttentionInput make_case(const Setup& su, const Dist& d, int dist_index, int sample) {
  Rng r{0xA41A0000ull + std::uint64_t(dist_index) * 1000003ull + std::uint64_t(sample)};
  AttentionInput in;
  // One KV head shared by G query heads of one token each: batch 1, heads_q = G, heads_kv = 1.
  in.shape = AttentionShape{1, su.g, 1, 1, su.s, su.dk, su.dv};
  in.dtype = "bfloat16";
  in.sm_scale = 1.0 / std::sqrt(double(su.dk));
  auto bf16 = [&](double x) {
    return decode_float_bits(Encoding::kBf16, encode_float_bits(Encoding::kBf16, x, kCudaRn));
  };
  in.q.resize(std::size_t(su.g) * su.dk);
  in.k.resize(std::size_t(su.s) * su.dk);
  in.v.resize(std::size_t(su.s) * su.dv);
  for (float& x : in.q) x = bf16(draw(r, d));
  for (int j = 0; j < su.s; ++j) {
    for (int c = 0; c < su.dk; ++c) in.k[std::size_t(j) * su.dk + c] = bf16(draw(r, d));
    for (int c = 0; c < su.dv; ++c)
      in.v[std::size_t(j) * su.dv + c] = in.k[std::size_t(j) * su.dk + c];  // V = c = K[:, :512]
  }
  return in;
}

struct MethodRow {
  std::string label;  // the `method` column
  AmlaOptions opt;
};

// Runs every (distribution, sample) against Golden in parallel; errs[m][dist][sample].
std::vector<std::vector<std::vector<double>>> run_cases(const Setup& su,
                                                        const std::vector<MethodRow>& methods,
                                                        int samples, bool progress) {
  std::vector<std::vector<std::vector<double>>> errs(
      methods.size(), std::vector<std::vector<double>>(kNumDists, std::vector<double>(samples)));
  std::vector<Pipeline> pipes;
  for (const MethodRow& m : methods) pipes.push_back(amla_pipeline(m.opt));
  const int tasks = kNumDists * samples;
  int done = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < tasks; ++t) {
    const int di = t / samples, sample = t % samples;
    const AttentionInput in = make_case(su, kDists[di], di, sample);
    const std::vector<double> gold = golden_attention_ref(in);
    for (std::size_t m = 0; m < methods.size(); ++m) {
      const PipelineResult r = run_pipeline(in, pipes[m]);
      errs[m][std::size_t(di)][std::size_t(sample)] = error_metrics(r.o, gold).rel_fro_amla;
    }
    if (progress) {
#pragma omp critical
      std::fprintf(stderr, "amla: %d/%d cases\n", ++done, tasks);
    }
  }
  return errs;
}

void mean_std(const std::vector<double>& v, double* mean, double* sd) {
  double s = 0;
  for (double x : v) s += x;
  *mean = s / double(v.size());
  double q = 0;
  for (double x : v) q += (x - *mean) * (x - *mean);
  *sd = v.size() > 1 ? std::sqrt(q / double(v.size() - 1)) : 0.0;
}

Setup setup_of(const ReproOptions& opt) {
  Setup su;
  if (opt.quick) su.g = 8;  // CI: 8 query heads instead of 128 (the error is per row)
  return su;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

ReproTable amla_tables(const ReproOptions& opt) {
  const Setup su = setup_of(opt);
  AmlaOptions base, paper, cann;
  base.variant = AmlaVariant::kBase;
  paper.variant = AmlaVariant::kPaper;
  cann.variant = AmlaVariant::kCann;
  AmlaOptions literal = paper;
  literal.comp = AmlaComp::kAlg2;  // Algorithm 2 line 11 as printed (notes only, not a row)
  const std::vector<MethodRow> methods{
      {"Base", base}, {"AMLA", paper}, {"AMLA-CANN", cann}, {"alg2-literal", literal}};
  const auto errs = run_cases(su, methods, opt.samples, opt.progress);
  ReproTable t;
  t.title = "amla: AMLA Tables 3 and 4, relative Frobenius error vs Golden (FP64 on the BF16 "
            "inputs), MLA decode G=" + std::to_string(su.g) + ", S2=" + std::to_string(su.s) +
            ", Dk=576, Dv=512 (V = K[:, :512]), scale 1/sqrt(576), BF16 in and out, " +
            std::to_string(opt.samples) + " samples per distribution";
  t.columns = {{"distribution", 's', "input distribution of Q and K (V = K[:, :512]), as the paper names it"},
               {"method", 's', "Base (Algorithm 1), AMLA (Algorithm 2 as written), AMLA-CANN (the CANN kernel)"},
               {"rel_frobenius_mean", 'f', "mean of ||O - Golden||_F / (||Golden||_F + 1e-10) over samples"},
               {"rel_frobenius_std", 'f', "sample standard deviation of the same"},
               {"samples", 'i', "samples (Q, K drawn afresh for each)"}};
  std::string cmp =
      "Beside the paper (ours / paper; AMLA/Base ratio ours vs paper):\n"
      "distribution    Base ours  paper  ratio   AMLA ours  paper  ratio   CANN ours  A/B ours  A/B paper  C/B ours  line-11-as-printed/B\n";
  double worst = 0, worst_ratio = 0;
  for (int di = 0; di < kNumDists; ++di) {
    double mean[4], sd[4];
    for (int m = 0; m < 4; ++m) {
      mean_std(errs[std::size_t(m)][std::size_t(di)], &mean[m], &sd[m]);
      if (m == 3) break;
      t.add_row({{kDists[di].name},
                 {methods[std::size_t(m)].label},
                 {"", mean[m]},
                 {"", sd[m]},
                 {"", double(opt.samples)}});
    }
    const Dist& d = kDists[di];
    const double rb = mean[0] / d.paper_base, ra = mean[1] / d.paper_amla;
    const double ab = mean[1] / mean[0], ab_p = d.paper_amla / d.paper_base;
    worst = std::max({worst, std::fabs(rb - 1), std::fabs(ra - 1)});
    worst_ratio = std::max(worst_ratio, std::fabs(ab / ab_p - 1));
    char line[256];
    std::snprintf(line, sizeof line,
                  "%-12s %10.3e %8.2e %6.3f  %10.3e %8.2e %6.3f  %10.3e  %8.4f  %9.4f  %8.4f  %8.4f\n",
                  d.name, mean[0], d.paper_base, rb, mean[1], d.paper_amla, ra, mean[2], ab, ab_p,
                  mean[2] / mean[0], mean[3] / mean[0]);
    cmp += line;
  }
  // The goals are the full run's (its sizes and samples); --quick's reduced problem is not meant
  // to meet them, and says so rather than print a bare miss.
  const std::string full =
      opt.quick ? ", the full run's: --quick's smaller problem need not meet it" : "";
  cmp += fmt("Largest deviation from the paper's 24 figures: %.1f%% (goal 10%%", 100 * worst) +
         full +
         fmt("); largest deviation of the AMLA/Base ratio: %.2f%% (goal 2%%", 100 * worst_ratio) +
         full + ").";
  t.notes = cmp;
  return t;
}

ReproTable amla_acc(const ReproOptions& opt) {
  const Setup su = setup_of(opt);
  std::vector<MethodRow> methods;
  const std::pair<const char*, AmlaAcc> accs[] = {
      {"exact", AmlaAcc::kExact}, {"fp32_seq", AmlaAcc::kFp32Seq}, {"block16", AmlaAcc::kBlock16}};
  for (AmlaVariant v : {AmlaVariant::kBase, AmlaVariant::kCann}) {
    for (const auto& [name, acc] : accs) {
      AmlaOptions o;
      o.variant = v;
      o.pv_sum = acc;
      o.qk_sum = acc;
      methods.push_back({std::string(v == AmlaVariant::kBase ? "Base" : "AMLA-CANN") + ":" + name, o});
    }
  }
  const auto errs = run_cases(su, methods, opt.samples, opt.progress);
  ReproTable t;
  t.title = "amla-acc: Tables 3/4 (Base, AMLA-CANN) under three models of the Cube unit's "
            "accumulation (QK^T and P*V): exact-then-rounded, FP32 sequential, H100-like 16-product "
            "blocks; G=" + std::to_string(su.g) + ", " + std::to_string(opt.samples) + " samples";
  t.columns = {{"distribution", 's', "input distribution"},
               {"method", 's', "method:accumulation"},
               {"rel_frobenius_mean", 'f', "mean relative Frobenius error vs Golden"},
               {"rel_frobenius_std", 'f', "sample standard deviation"},
               {"samples", 'i', "samples"},
               {"vs_exact", 'f', "mean error / the same method's mean with exact accumulation"}};
  double spread = 0;
  for (int di = 0; di < kNumDists; ++di) {
    for (std::size_t m = 0; m < methods.size(); ++m) {
      double mean, sd, mean_exact, sd_exact;
      mean_std(errs[m][std::size_t(di)], &mean, &sd);
      mean_std(errs[m - m % 3][std::size_t(di)], &mean_exact, &sd_exact);
      spread = std::max(spread, std::fabs(mean / mean_exact - 1));
      t.add_row({{kDists[di].name}, {methods[m].label}, {"", mean}, {"", sd},
                 {"", double(opt.samples)}, {"", mean / mean_exact}});
    }
  }
  t.notes = fmt("Largest change of a mean error against exact accumulation: %.2f%%.", 100 * spread);
  return t;
}

ReproTable amla_preload(const ReproOptions& opt) {
  ReproTable t;
  const long sets = opt.quick ? 20000 : 100000;
  t.title = "amla-preload: Theorem 4.1 / B.1 by experiment (" + std::to_string(sets) +
            " random duration sets per n), Table 2's arithmetic intensities, MLA decode on the "
            "H100 roofline";
  t.columns = {{"item", 's', "what the row checks"},
               {"n", 'i', "CV pairs (0 for rows that are not per n)"},
               {"value", 'f', "measured"},
               {"expected", 'f', "paper / theory"},
               {"detail", 's', "how to read the row"}};
  const std::vector<PreloadTheoremRow> rows = preload_theorem_check(8, sets, 20261123);
  for (const PreloadTheoremRow& r : rows) {
    t.add_row({{"sets tried"}, {"", double(r.n)}, {"", double(r.sets)}, {"", double(sets)}, {""}});
    t.add_row({{"construction stall-free with Preload count n"}, {"", double(r.n)},
               {"", double(r.construction_ok)}, {"", double(r.sets)},
               {"Theorem B.1: the minimum-partial-sum index always gives a stall-free cycle"}});
    t.add_row({{"Eq. 17 holds for the chosen index"}, {"", double(r.n)}, {"", double(r.eq17_ok)},
               {"", double(r.sets)}, {"the analytic condition agrees with the simulation"}});
    if (r.searched > 0) {
      t.add_row({{"random sets where a Preload count < n exists"}, {"", double(r.n)},
                 {"", double(r.below_n)}, {"", double(r.searched)},
                 {"exhaustive search (n <= 4) over every ordering: n is the worst case, not every set's minimum"}});
      t.add_row({{"adversarial sets (Eq. 16) with minimum Preload count n"}, {"", double(r.n)},
                 {"", double(r.adversarial_min_n)}, {"", double(r.adversarial)},
                 {"Lemma B.2: no schedule beats n on them"}});
    }
  }
  // Table 2: arithmetic intensity (FLOPs/byte) = 2·N1·S1·S2·(Dk+Dv) / MEM_KV, BF16 (2 bytes).
  struct T2 {
    const char* name;
    int qh, kh, sq;
    bool mla;
    double paper;
  };
  const T2 t2[] = {{"MHA", 64, 64, 1, false, 1},       {"GQA", 64, 8, 1, false, 8},
                   {"MLA-64", 64, 1, 1, true, 121},    {"MLA-128", 128, 1, 1, true, 242},
                   {"MLA-128 (Sq=2)", 128, 1, 2, true, 484}};
  for (const T2& x : t2) {
    // MHA/GQA: Dk = Dv = 128; MLA: Dk = 576 (the cached latent + rope), Dv = 512 (§2.4).
    const double dk = x.mla ? 576 : 128, dv = x.mla ? 512 : 128;
    const double flops = 2.0 * x.qh * x.sq * (dk + dv);  // per KV token
    const double bytes = x.mla ? 2.0 * dk : 2.0 * x.kh * (dk + dv);
    t.add_row({{std::string("Table 2 arithmetic intensity ") + x.name}, {"", 0.0},
               {"", flops / bytes}, {"", x.paper},
               {"FLOPs per byte of KV cache read (the extracted text prints 1 and 8 as 11 88)"}});
  }
  // H100 SXM ridge point: 989.4 dense BF16 TFLOP/s over 3.35 TB/s.
  const double ridge = 989.4e12 / 3.35e12;
  t.add_row({{"H100 SXM ridge point (BF16 dense TFLOP/s / HBM3 TB/s)"}, {"", 0.0}, {"", ridge},
             {"", 295.3}, {"MLA-128 decode (242) sits just below it: memory-bound on the H100 at "
                           "Sq=1, compute-bound with MTP Sq=2 (484)"}});
  t.notes = "Preload model: sim/amla/preload.hpp (list-scheduled Cube and Vector units, a Cycle's "
            "stage offsets d(X), stall-free = the busier unit never idles in the steady loop).";
  return t;
}

}  // namespace

void register_amla_repros(std::vector<Reproduction>& r) {
  r.push_back({"amla",
               "AMLA (Liao et al., arXiv 2509.25224) Tables 3 and 4",
               "relative Frobenius error of Base, AMLA (Algorithm 2) and the CANN kernel vs Golden "
               "for N(0,s2) and U(-a,a) inputs, MLA decode at 8K context, BF16",
               100, 1, amla_tables});
  r.push_back({"amla-acc",
               "AMLA Tables 3 and 4: dependence on the Cube unit's accumulation (not public)",
               "Base and AMLA-CANN with exact, FP32-sequential and 16-product-block accumulation",
               10, 1, amla_acc});
  r.push_back({"amla-preload",
               "AMLA §4.1, Theorem 4.1 / Appendix B, Table 2",
               "the Preload pipeline theorem by simulation, Table 2's arithmetic intensities, the "
               "H100 roofline",
               1, 1, amla_preload});
}

}  // namespace attnsim
