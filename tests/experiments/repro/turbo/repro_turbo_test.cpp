// experiments/repro/turbo/: `attnsim repro turbo` end to end. --quick: the contract's
// `quantity,ours,paper` rows (the cubic refit equal to sas_poly_fit, the 101-point fit on the
// paper's digits, SAS's error, the memory figures of the spec) and the memory table beside --out.
// The full path on SmolLM2/MiniLM cut to 192 tokens (ATTNSIM_TURBO_TOKENS): every experiment's
// rows, the same numbers for one and two threads, and the facts the summary rests on.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/turbo/sas.hpp"
#include "tests/experiments/repro/repro_harness.hpp"

namespace attnsim {
namespace {

using Rows = std::vector<std::vector<std::string>>;

std::map<std::string, std::size_t> columns(const Rows& rows) {
  std::map<std::string, std::size_t> c;
  for (std::size_t i = 0; i < rows.at(0).size(); ++i) c[rows[0][i]] = i;
  return c;
}

// quantity -> (ours, paper) of a summary CSV; checks the header.
std::map<std::string, std::pair<double, double>> summary(const std::string& text) {
  const Rows rows = parse_csv(text);
  EXPECT_FALSE(rows.empty());
  std::map<std::string, std::pair<double, double>> m;
  if (rows.empty()) return m;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"quantity", "ours", "paper"}));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].size(), 3u) << i;
    if (rows[i].size() != 3) continue;
    EXPECT_EQ(m.count(rows[i][0]), 0u) << "duplicate quantity " << rows[i][0];
    m[rows[i][0]] = {std::strtod(rows[i][1].c_str(), nullptr),
                     std::strtod(rows[i][2].c_str(), nullptr)};
  }
  return m;
}

class ReproTurbo : public ReproTest<ReproTurbo> {
 public:
  static constexpr const char* kName = "turbo";

 protected:
  // The full path (no --quick) on the first 192 tokens of every input.
  static int run_small(const std::string& threads, const std::string& out, std::string* text) {
    const std::string so = path("small_" + threads + ".txt");
    const std::string cmd = "cd " + std::string(ATTNSIM_SOURCE_DIR) +
                            " && ATTNSIM_TURBO_TOKENS=192 OMP_NUM_THREADS=" + threads + " " +
                            ATTNSIM_EXE + " repro turbo --quiet --out " + out + " >" + so + " 2>&1";
    const int status = std::system(cmd.c_str());
    if (text) *text = slurp(so);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

TEST_F(ReproTurbo, QuickRowsAreTheContractsPolynomialSasErrorAndMemory) {
  std::string out;
  ASSERT_EQ(run("OMP_NUM_THREADS=2", "turbo --out " + path("q.csv"), &out), 0) << out;
  const auto m = summary(slurp(path("q.csv")));
  // The continuous least-squares refit, exactly sas_poly_fit(0) (17 significant digits), beside
  // Eq. 15's coefficients; the 101-point grid fit rounds to the paper's four digits.
  const std::array<double, 4> cont = sas_poly_fit(0), grid = sas_poly_fit(101);
  const double paper[4] = {-0.1025, 0.4626, -0.9922, 0.9996};
  const char* name[4] = {"c3", "c2", "c1", "c0"};
  for (int i = 0; i < 4; ++i) {
    const auto& c = m.at(std::string("poly_") + name[i]);
    EXPECT_NEAR(c.first, cont[std::size_t(i)], 1e-15) << name[i];
    EXPECT_EQ(c.second, paper[i]) << name[i];
    const auto& g = m.at(std::string("poly101_") + name[i]);
    EXPECT_NEAR(g.first, grid[std::size_t(i)], 1e-15) << name[i];
    EXPECT_EQ(std::round(g.first * 1e4) / 1e4, paper[i]) << name[i];
    EXPECT_EQ(g.second, paper[i]);
  }
  // The continuous fit misses c2 and c1 in the fourth digit (spec §2).
  EXPECT_NE(std::round(m.at("poly_c2").first * 1e4) / 1e4, 0.4626);
  // SAS over [-6, 0]: the polynomial's 1.03e-3 in FP32, about twice that in FP16; no paper figure.
  EXPECT_NEAR(m.at("sas_max_rel_fp32").first, 1.032e-3, 2e-6);
  EXPECT_GT(m.at("sas_max_rel_fp16").first, 2.0e-3);
  EXPECT_LT(m.at("sas_max_rel_fp16").first, 2.5e-3);
  EXPECT_TRUE(std::isnan(m.at("sas_max_rel_fp16").second));
  EXPECT_TRUE(std::isnan(m.at("sas_max_rel_fp32").second));
  EXPECT_EQ(m.at("sas_max_rel_fp16_literal").first, 1.0);  // the hole in (-6, -5]
  // Memory (spec §5): 4-bit 3.763x, mixed 4.920x (> the paper's 4.4x), 2-bit 7.105x.
  EXPECT_NEAR(m.at("mem_ratio_turbo4_d128").first, 4096.0 / 1088.5, 1e-12);
  EXPECT_NEAR(m.at("mem_ratio_turbo_mixed50_d128").first, 4096.0 / 832.5, 1e-12);
  EXPECT_EQ(m.at("mem_ratio_turbo_mixed50_d128").second, 4.4);
  EXPECT_NEAR(m.at("mem_ratio_turbo2_d128").first, 4096.0 / 576.5, 1e-12);
  EXPECT_NEAR(m.at("mem_ratio_kivi4_d128").first, 4096.0 / 1152.0, 1e-12);
  // --quick has no error experiments; the memory table lies next to --out.
  for (const auto& [q, v] : m) EXPECT_NE(q.rfind("err_", 0), 0u) << q;
  const Rows mem = parse_csv(slurp(path("q_memory.csv")));
  ASSERT_GT(mem.size(), 20u);
  const auto c = columns(mem);
  bool seen = false;
  for (std::size_t i = 1; i < mem.size(); ++i)
    if (mem[i][c.at("config")] == "turbo_mixed50" && mem[i][c.at("dim")] == "128" &&
        mem[i][c.at("tokens")] == "0") {
      EXPECT_NEAR(std::stod(mem[i][c.at("bits_per_token")]), 832.5, 1e-12);
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST_F(ReproTurbo, FullPathOnShortInputsIsThreadIndependentAndConsistent) {
  std::string t1, t2;
  ASSERT_EQ(run_small("1", path("f1.csv"), &t1), 0) << t1;
  ASSERT_EQ(run_small("2", path("f2.csv"), &t2), 0) << t2;
  for (const char* f : {"", "_errors", "_drift", "_memory"})
    EXPECT_EQ(slurp(path(std::string("f1") + f + ".csv")),
              slurp(path(std::string("f2") + f + ".csv")))
        << f;
  const auto m = summary(slurp(path("f2.csv")));
  // E3: FP16 is the floor, every Turbo stage adds error; Table 4's accuracies are rows of their own.
  const double fp16 = m.at("err_rel_l1_fp16").first;
  EXPECT_LT(fp16, 2e-3);
  for (const char* s : {"sas", "flashq4", "both"})
    EXPECT_GT(m.at(std::string("err_rel_l1_") + s).first, 5 * fp16) << s;
  EXPECT_GT(m.at("err_rel_l1_both").first, m.at("err_rel_l1_sas").first);
  EXPECT_EQ(m.at("paper_table4_acc_both").second, 48.03);
  EXPECT_TRUE(std::isnan(m.at("paper_table4_acc_both").first));
  // E4: n_h = 0 (all 4-bit) and n_h = all (all 2-bit) are the same for every selector, and 2 bits
  // cost more error than 4.
  for (const char* sel : {"entropy", "minmax", "variation"}) {
    EXPECT_EQ(m.at(std::string("nh_rel_l1_") + sel + "_0").first,
              m.at("nh_rel_l1_priority_0").first);
    EXPECT_EQ(m.at(std::string("nh_rel_l1_kv_") + sel + "_6").first,
              m.at("nh_rel_l1_kv_priority_6").first);
  }
  EXPECT_EQ(m.at("nh_rel_l1_priority_0").first, m.at("err_rel_l1_both").first);
  EXPECT_GT(m.at("nh_rel_l1_priority_3").first, m.at("nh_rel_l1_priority_0").first);
  EXPECT_EQ(m.at("err_rel_l1_kv_turbo2").first, m.at("nh_rel_l1_priority_3").first);
  EXPECT_GT(m.at("err_rel_l1_kv_kivi2").first, m.at("err_rel_l1_kv_kivi4").first);
  // E5: a decode step has one query, so br does not change it.
  for (int bc : {32, 64, 128})
    for (int br : {32, 128})
      EXPECT_EQ(m.at("blocks_rel_l1_decode_" + std::to_string(br) + "_" + std::to_string(bc)).first,
                m.at("blocks_rel_l1_decode_64_" + std::to_string(bc)).first);
  EXPECT_EQ(m.at("paper_table3_acc_64_64").second, 78.31);
  // E9: a lower threshold cuts less; the cubic adds little to the cut itself.
  EXPECT_GT(m.at("sas_untiled_rel_l1_nr4").first, m.at("sas_untiled_rel_l1_nr6").first);
  EXPECT_GT(m.at("sas_untiled_rel_l1_nr6").first, m.at("sas_untiled_rel_l1_nr8").first);
  EXPECT_NEAR(m.at("sas_untiled_rel_l1_nr6").first, m.at("exp_cut_untiled_rel_l1_nr6").first,
              0.2 * m.at("exp_cut_untiled_rel_l1_nr6").first);
  // E7: the synthetic sequence outgrows the prompt's universal scale: clamped, unlike the oracle.
  EXPECT_GT(m.at("drift_synthetic_drift_p64_prefill_clamp_rate_k").first, 0.0);
  EXPECT_EQ(m.at("drift_synthetic_drift_p64_oracle_clamp_rate_k").first, 0.0);
  EXPECT_GT(m.at("drift_synthetic_drift_p64_prefill_rel_l1_last64").first,
            m.at("drift_synthetic_drift_p64_oracle_rel_l1_last64").first);

  // The errors table has every experiment; decode rows start at the prompt.
  const Rows er = parse_csv(slurp(path("f2_errors.csv")));
  ASSERT_GT(er.size(), 100u);
  const auto ec = columns(er);
  std::set<std::string> exps;
  for (std::size_t i = 1; i < er.size(); ++i) {
    exps.insert(er[i][ec.at("experiment")]);
    const int rows = std::stoi(er[i][ec.at("rows")]), pre = std::stoi(er[i][ec.at("prefill")]);
    if (er[i][ec.at("mode")] == "decode") {
      EXPECT_EQ(rows + pre, 192) << i;
    } else {
      EXPECT_EQ(pre, 0) << i;
    }
  }
  EXPECT_EQ(exps, (std::set<std::string>{"E3", "E4", "E5", "E6", "E9"}));
  // The drift table: one row per decode step, consecutive, per (input, configuration).
  const Rows dr = parse_csv(slurp(path("f2_drift.csv")));
  ASSERT_GT(dr.size(), 1u);
  const auto dc = columns(dr);
  std::map<std::string, int> next;
  for (std::size_t i = 1; i < dr.size(); ++i) {
    const std::string key = dr[i][dc.at("input")] + "|" + dr[i][dc.at("label")];
    const int step = std::stoi(dr[i][dc.at("step")]);
    if (!next.count(key)) next[key] = std::stoi(dr[i][dc.at("prefill")]);
    EXPECT_EQ(step, next[key]) << key;
    next[key] = step + 1;
    EXPECT_EQ(std::stoi(dr[i][dc.at("t_mod")]), step % 64);
  }
  EXPECT_EQ(next.size(), 9u);  // (2 SmolLM2 layers + the synthetic sequence) x 3 (prompt 64)
  for (const auto& [k, n] : next) EXPECT_EQ(n, 192) << k;
}

TEST_F(ReproTurbo, ABadTokenCountIsAOneLineError) {
  const std::string so = path("bad.txt");
  const std::string cmd = "cd " + std::string(ATTNSIM_SOURCE_DIR) + " && ATTNSIM_TURBO_TOKENS=12 " +
                          ATTNSIM_EXE + " repro turbo --quiet >" + so + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string text = slurp(so);
  EXPECT_NE(text.find("attnsim: error: ATTNSIM_TURBO_TOKENS"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

}  // namespace
}  // namespace attnsim
