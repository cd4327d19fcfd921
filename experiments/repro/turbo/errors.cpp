// `attnsim repro turbo` E3 (each stage alone), E4 (head-wise mixed precision per selector), E5
// (block sizes) and E6 (KIVI against Turbo): the runs they add to the shared error jobs, and the
// summary rows and notes of each.
#include <cmath>
#include <map>
#include <string>

#include "experiments/repro/turbo/turbo_repro.hpp"
#include "sim/turbo/heads.hpp"
#include "sim/turbo/memory.hpp"

namespace attnsim::turbo_repro {

namespace {

// Table 4 (LLaMA3-8B AQuA accuracy), Table 3 (GSM8K accuracy), Table 2 (LLaMA3-8B GSM8K) of
// arXiv 2412.08585: task accuracies, a different measure from ours.
struct PaperAcc {
  const char* key;
  double acc;
};
constexpr PaperAcc kTable4[] = {
    {"fp16", 50.79}, {"flashq4", 49.60}, {"sas", 50.12}, {"both", 48.03}};

double table3(int br, int bc) {
  const int k = br * 1000 + bc;
  switch (k) {
    case 32032:
      return 78.01;
    case 32064:
      return 78.01;
    case 64032:
      return 78.31;
    case 64064:
      return 78.31;
    case 64128:
      return 78.16;
    case 128064:
      return 78.01;
    case 128128:
      return 77.83;
    default:
      return kNaN;
  }
}

struct Stage {
  const char* label;
  const char* opts;
};
// E3: the stages one at a time (decode on SmolLM2, prefill on MiniLM).
constexpr Stage kStages[] = {{"fp16", "flashq=off,exp=exact"},
                             {"flashq4", "exp=exact"},
                             {"sas", "flashq=off"},
                             {"both", ""}};
// E5: block sizes.
constexpr int kBlocks[] = {32, 64, 128};
// E6: KIVI against Turbo.
constexpr Stage kE6[] = {
    {"kivi4", "kivi:mode=decode,bits=4"},
    {"kivi2", "kivi:mode=decode,bits=2"},
    {"turbo4", "turbo:mode=decode"},
    {"turbo_mixed50", "turbo:mode=decode,kv_bits=mixed,n_h=3,nh_scope=kv_separate"},
    {"turbo2", "turbo:mode=decode,kv_bits=2"},
    {"fp16", "turbo:mode=decode,flashq=off,exp=exact"}};

std::string bits_text(const HeadBits& b) {
  std::string s;
  for (const auto* x : {&b.k, &b.v}) {
    s += x == &b.k ? "K=" : ";V=";
    for (std::size_t i = 0; i < x->size(); ++i) {
      if (i) s += ',';
      s += std::to_string((*x)[i]);
    }
  }
  return s;
}

const char* kSelectors[] = {"priority", "entropy", "minmax", "variation"};

HeadSelector selector_of(const std::string& s) {
  return s == "entropy"     ? HeadSelector::kEntropy
         : s == "minmax"    ? HeadSelector::kMinMax
         : s == "variation" ? HeadSelector::kVariation
                            : HeadSelector::kPriority;
}

HeadBits uniform_bits(int h, int b) {
  return HeadBits{std::vector<int>(std::size_t(h), b), std::vector<int>(std::size_t(h), b)};
}

}  // namespace

void e3_stages_jobs(ErrorJobs& jobs) {
  const Inputs& in = jobs.inputs();
  // E3: the stages one at a time (decode on SmolLM2, prefill on MiniLM).
  for (const Stage& st : kStages) {
    for (std::size_t i : in.smol) {
      ErrRow r;
      r.exp = "E3";
      r.label = st.label;
      const bool fp = std::string(st.label) == "fp16" || std::string(st.label) == "sas";
      r.bits = fp ? "fp16" : bits_text(uniform_bits(in.all[i].in.shape.heads_kv, 4));
      jobs.add(r, i, std::string("turbo:mode=decode") + (*st.opts ? "," : "") + st.opts, true);
    }
    for (std::size_t i : in.mini) {
      ErrRow r;
      r.exp = "E3";
      r.label = std::string(st.label) == "flashq4" ? "flashq" : st.label;
      jobs.add(r, i, std::string("turbo:mode=prefill") + (*st.opts ? "," : "") + st.opts, false);
    }
  }
}

std::string e3_stages_rows(Summary& s, const ErrorRows& e) {
  std::string notes;
  notes += "E3 stages (Table 4: LLaMA3-8B AQuA accuracy, a task score, not an error):\n";
  notes +=
      "  config    SmolLM2 decode: cos        rel_l1 (worst)          rmse      | MiniLM "
      "prefill: rel_l1  | paper acc\n";
  std::map<std::string, double> e3_l1;
  for (const PaperAcc& p : kTable4) {
    const Agg a = e.agg("E3", p.key, "smollm2");
    const Agg b = e.agg("E3", std::string(p.key) == "flashq4" ? "flashq" : p.key, "minilm");
    put_errors(s, std::string(p.key), a);
    // Prefill never reads the cache: FlashQ there is its INT8 stage alone.
    s.add(std::string("prefill_minilm_rel_l1_") +
              (std::string(p.key) == "flashq4" ? "flashq" : p.key),
          b.rel_l1_mean);
    e3_l1[p.key] = a.rel_l1_mean;
    notes += fmt("  %-8s  %.6f  %.4e (%.4e)  %.4e  | %.4e          | %.2f\n", p.key, a.cos_mean,
                 a.rel_l1_mean, a.rel_l1_max, a.rmse_mean, b.rel_l1_mean, p.acc);
  }
  for (const PaperAcc& p : kTable4) s.add(std::string("paper_table4_acc_") + p.key, kNaN, p.acc);
  {
    const bool order_ok = e3_l1["fp16"] < e3_l1["sas"] && e3_l1["sas"] < e3_l1["flashq4"] &&
                          e3_l1["flashq4"] < e3_l1["both"];
    notes +=
        fmt("  The paper's accuracy order (FP16 > SAS > FlashQ-4bit > both) as error order "
            "fp16 < sas < flashq4 < both: %s.\n",
            order_ok ? "holds" : "does NOT hold");
  }
  return notes;
}

void e4_mixed_precision_jobs(ErrorJobs& jobs) {
  const Inputs& in = jobs.inputs();
  const int dk_smol = in.all[in.smol[0]].in.shape.head_dim;
  // E4: n_h per selector, head scope and K/V ranked apart. Configurations that pick the same bits
  // compute the same output: one job per distinct bit assignment (its first method string).
  for (std::size_t i : in.smol) {
    const AttentionInput& x = in.all[i].in;
    const int P = jobs.prefill_of(i, 64), hkv = x.shape.heads_kv;
    std::map<std::string, std::string> method_of_bits;
    for (const char* scope : {"head", "kv_separate"}) {
      const bool sep = std::string(scope) == "kv_separate";
      for (const char* sel : kSelectors) {
        for (int nh = 0; nh <= (sep ? 2 * hkv : hkv); ++nh) {
          const HeadBits hb = select_head_bits(x, P, selector_of(sel),
                                               sep ? HeadScope::kKvSeparate : HeadScope::kHead, nh);
          const std::string key = bits_text(hb);
          std::string m = "turbo:mode=decode,kv_bits=mixed,n_h=" + std::to_string(nh) +
                          ",selector=" + sel + (sep ? ",nh_scope=kv_separate" : "");
          if (key == bits_text(uniform_bits(hkv, 4))) m = "turbo:mode=decode";
          if (key == bits_text(uniform_bits(hkv, 2))) m = "turbo:mode=decode,kv_bits=2";
          auto [it, fresh] = method_of_bits.emplace(key, m);
          ErrRow r;
          r.exp = "E4";
          r.label = std::string(sep ? "kv_" : "") + sel + "_" + std::to_string(nh);
          r.n_h = nh;
          r.selector = sel;
          r.scope = scope;
          r.bits = key;
          r.kv_bits_per_token = turbo_bits_per_token(dk_smol, dk_smol, hb);
          jobs.add(r, i, it->second, true);
          jobs.last().method = m;  // the row names its own configuration
        }
      }
    }
  }
}

std::string e4_mixed_precision_rows(Summary& s, const ErrorRows& e, int hkv) {
  std::string notes;
  notes += "E4 mixed precision (Fig. 7b analogue), decode rel_l1 by n_h (caches at 2 bits):\n";
  for (const char* scope : {"head", "kv_separate"}) {
    const bool sep = std::string(scope) == "kv_separate";
    notes += fmt("  %-22s", sep ? "K,V apart: n_h =" : "per KV head: n_h =");
    for (int nh = 0; nh <= (sep ? 2 * hkv : hkv); ++nh) notes += fmt("  %-10d", nh);
    notes += "\n";
    for (const char* sel : kSelectors) {
      notes += fmt("    %-20s", sel);
      for (int nh = 0; nh <= (sep ? 2 * hkv : hkv); ++nh) {
        const std::string label = std::string(sep ? "kv_" : "") + sel + "_" + std::to_string(nh);
        const Agg a = e.agg("E4", label, "smollm2");
        s.add("nh_rel_l1_" + label, a.rel_l1_mean);
        notes += fmt("  %.4e", a.rel_l1_mean);
      }
      notes += "\n";
    }
  }
  for (const char* scope : {"head", "kv_separate"}) {
    // Which selector is best: the lowest mean rel_l1 over the interior n_h (the ends are the same
    // for every selector).
    const bool sep = std::string(scope) == "kv_separate";
    std::string best;
    double best_v = 0;
    for (const char* sel : kSelectors) {
      double total = 0;
      for (int nh = 1; nh < (sep ? 2 * hkv : hkv); ++nh)
        total +=
            e.agg("E4", std::string(sep ? "kv_" : "") + sel + "_" + std::to_string(nh), "smollm2")
                .rel_l1_mean;
      if (best.empty() || total < best_v - 1e-12 * best_v) {
        best = sel;
        best_v = total;
      } else if (std::fabs(total - best_v) <= 1e-12 * best_v) {
        best += "=" + std::string(sel);
      }
    }
    notes += std::string("  Lowest mean rel_l1 over the interior n_h (") +
             (sep ? "K, V apart" : "per KV head") + "): " + best +
             " (the paper, §5.6 and Fig. 7b: priority beats the others).\n";
  }
  return notes;
}

void e5_blocks_jobs(ErrorJobs& jobs) {
  const Inputs& in = jobs.inputs();
  for (int br : kBlocks)
    for (int bc : kBlocks) {
      const std::string o = "br=" + std::to_string(br) + ",bc=" + std::to_string(bc);
      for (std::size_t i : in.smol)
        for (bool decode : {true, false}) {
          ErrRow r;
          r.exp = "E5";
          r.label = fmt("%s_%d_%d", decode ? "decode" : "prefill", br, bc);
          r.br = br;
          r.bc = bc;
          // A decode step is one query (Alg. 2): br only tiles the prompt's rows, which are not
          // measured, so the decode rows of (br, bc) are those of (64, bc), run once.
          const std::string run =
              std::string("turbo:mode=") +
              (decode ? "decode,br=64,bc=" + std::to_string(bc) : "prefill," + o);
          jobs.add(r, i, run, decode);
          jobs.last().method = std::string("turbo:mode=") + (decode ? "decode," : "prefill,") + o;
        }
      for (std::size_t i : in.mini) {
        ErrRow r;
        r.exp = "E5";
        r.label = fmt("prefill_%d_%d", br, bc);
        r.br = br;
        r.bc = bc;
        jobs.add(r, i, "turbo:mode=prefill," + o, false);
      }
    }
}

std::string e5_blocks_rows(Summary& s, const ErrorRows& e) {
  std::string notes;
  notes +=
      "E5 blocks (br, bc): rel_l1 decode SmolLM2 / prefill SmolLM2 / prefill MiniLM | "
      "paper Table 3 GSM8K acc:\n";
  for (int br : kBlocks)
    for (int bc : kBlocks) {
      const Agg d = e.agg("E5", fmt("decode_%d_%d", br, bc), "smollm2");
      const Agg p = e.agg("E5", fmt("prefill_%d_%d", br, bc), "smollm2");
      const Agg m = e.agg("E5", fmt("prefill_%d_%d", br, bc), "minilm");
      s.add(fmt("blocks_rel_l1_decode_%d_%d", br, bc), d.rel_l1_mean);
      s.add(fmt("blocks_rel_l1_prefill_%d_%d", br, bc), p.rel_l1_mean);
      s.add(fmt("blocks_rel_l1_prefill_minilm_%d_%d", br, bc), m.rel_l1_mean);
      notes += fmt("  (%3d,%3d)  %.4e  %.4e  %.4e  | %s\n", br, bc, d.rel_l1_mean, p.rel_l1_mean,
                   m.rel_l1_mean,
                   std::isnan(table3(br, bc)) ? "-" : fmt("%.2f", table3(br, bc)).c_str());
    }
  for (int br : kBlocks)
    for (int bc : kBlocks)
      if (!std::isnan(table3(br, bc)))
        s.add(fmt("paper_table3_acc_%d_%d", br, bc), kNaN, table3(br, bc));
  return notes;
}

void e6_kivi_jobs(ErrorJobs& jobs) {
  const Inputs& in = jobs.inputs();
  for (const Stage& st : kE6)
    for (std::size_t i : in.smol) {
      ErrRow r;
      r.exp = "E6";
      r.label = st.label;
      jobs.add(r, i, st.opts, true);
    }
}

std::string e6_kivi_rows(Summary& s, const ErrorRows& e, int head_dim) {
  std::string notes;
  notes +=
      "E6 KV cache methods, SmolLM2 decode: cos / rel_l1 (worst) / rmse | bits per token "
      "(d=64) | paper Table 2 LLaMA3-8B GSM8K acc:\n";
  const std::map<std::string, double> table2{
      {"fp16", 78.24}, {"kivi4", 61.18}, {"turbo4", 78.31}, {"turbo_mixed50", 77.53}};
  const int d64 = head_dim;
  const std::map<std::string, double> e6_bits{
      {"kivi4", kivi_bits_per_token(d64, d64, KiviMemoryFormat{4})},
      {"kivi2", kivi_bits_per_token(d64, d64, KiviMemoryFormat{2})},
      {"turbo4", turbo_bits_per_token(d64, d64, 4, 4)},
      {"turbo_mixed50", turbo_mixed_bits_per_token(d64, d64, 0.5)},
      {"turbo2", turbo_bits_per_token(d64, d64, 2, 2)},
      {"fp16", fp16_bits_per_token(d64, d64)}};
  for (const Stage& st : kE6) {
    const Agg a = e.agg("E6", st.label, "smollm2");
    put_errors(s, std::string("kv_") + st.label, a);
    auto t2 = table2.find(st.label);
    notes += fmt("  %-14s %.6f  %.4e (%.4e)  %.4e | %6.1f | %s\n", st.label, a.cos_mean,
                 a.rel_l1_mean, a.rel_l1_max, a.rmse_mean, e6_bits.at(st.label),
                 t2 == table2.end() ? "-" : fmt("%.2f", t2->second).c_str());
  }
  {
    // Table 2 has Turbo-4 and Turbo-mixed far above KIVI-4 (GSM8K 78.31 and 77.53 vs 61.18).
    const double k4 = e.agg("E6", "kivi4", "smollm2").rel_l1_mean,
                 t4 = e.agg("E6", "turbo4", "smollm2").rel_l1_mean,
                 tm = e.agg("E6", "turbo_mixed50", "smollm2").rel_l1_mean;
    notes +=
        fmt("  Table 2's order (Turbo-4 and Turbo-mixed above KIVI-4) as error order: turbo4 < "
            "kivi4 %s, turbo_mixed50 < kivi4 %s.\n",
            t4 < k4 ? "holds" : "does NOT hold", tm < k4 ? "holds" : "does NOT hold");
  }
  for (const auto& [k, v] : table2) s.add("paper_table2_gsm8k_acc_" + k, kNaN, v);
  s.add("paper_table2_gsm8k_acc_kivi3", kNaN, 59.43);
  return notes;
}

}  // namespace attnsim::turbo_repro
