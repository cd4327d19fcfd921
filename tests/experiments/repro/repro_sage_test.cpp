// experiments/repro/repro_sage.cpp: `attnsim repro sage2 --quick` end to end: the table's shape,
// the same numbers for one and two threads (HDF5 and CSV), and the effects the paper's tables
// rest on that the simulator must reproduce (each checked with a margin several times the one
// measured on the bundled inputs, see the comments).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "tests/experiments/repro/repro_harness.hpp"

namespace attnsim {
namespace {

namespace fs = std::filesystem;

// One row of the sage2 table.
struct Row {
  std::string table, inputs, label;
  std::int64_t len_kv = 0, n = 0;
  double cos_mean = 0, rel_l1_mean = 0, rmse_mean = 0, cos_min = 0, rel_l1_max = 0, rmse_max = 0;
};

class ReproSage2 : public ReproTest<ReproSage2> {
 public:
  static constexpr const char* kName = "sage2";

 protected:
  // The quick reproduction, run once for the whole suite: two threads to HDF5, one thread to CSV.
  static void SetUpTestSuite() {
    ReproTest::SetUpTestSuite();
    code2_ = run("OMP_NUM_THREADS=2", "--out " + path("t2.h5"), &out2_);
    code1_ = run("OMP_NUM_THREADS=1", "--out " + path("t1.csv"), nullptr);
  }
  static int run(const std::string& env, const std::string& args, std::string* out) {
    return ReproTest::run(env, "sage2 " + args, out);
  }
  static std::vector<Row> rows_h5(const std::string& p) {
    const H5Reader h(p);
    const auto table = h.read_strings("table"), inputs = h.read_strings("inputs"),
               label = h.read_strings("label");
    const auto len = h.read_i64("len_kv"), n = h.read_i64("n");
    const auto cm = h.read_f64("cos_mean"), lm = h.read_f64("rel_l1_mean"),
               rm = h.read_f64("rmse_mean"), cw = h.read_f64("cos_min"),
               lw = h.read_f64("rel_l1_max"), rw = h.read_f64("rmse_max");
    std::vector<Row> r;
    for (std::size_t i = 0; i < table.size(); ++i)
      r.push_back(
          {table[i], inputs[i], label[i], len[i], n[i], cm[i], lm[i], rm[i], cw[i], lw[i], rw[i]});
    return r;
  }
  static std::vector<Row> rows_csv(const std::string& p) {
    std::istringstream in(slurp(p));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line,
              "table,inputs,label,len_kv,n,cos_mean,rel_l1_mean,rmse_mean,cos_min,rel_l1_max,"
              "rmse_max");
    std::vector<Row> r;
    while (std::getline(in, line)) {
      std::vector<std::string> c;
      std::stringstream ls(line);
      for (std::string x; std::getline(ls, x, ',');) c.push_back(x);
      if (c.size() != 11) {
        ADD_FAILURE() << "bad CSV line: " << line;
        continue;
      }
      auto d = [](const std::string& s) { return std::strtod(s.c_str(), nullptr); };
      r.push_back({c[0], c[1], c[2], std::stoll(c[3]), std::stoll(c[4]), d(c[5]), d(c[6]), d(c[7]),
                   d(c[8]), d(c[9]), d(c[10])});
    }
    return r;
  }
  static int code1_, code2_;
  static std::string out2_;
};

int ReproSage2::code1_ = -1;
int ReproSage2::code2_ = -1;
std::string ReproSage2::out2_;

// Rows by "table|inputs|label|len_kv" (len_kv of a table row: 0).
std::map<std::string, Row> index_rows(const std::vector<Row>& rows) {
  std::map<std::string, Row> m;
  for (const auto& r : rows)
    m[r.table + "|" + r.inputs + "|" + r.label + "|" +
      std::to_string(r.table == "fig17" ? r.len_kv : 0)] = r;
  return m;
}

// The effects the paper's tables rest on, which the simulator must reproduce (margins several
// times below the ratios measured on the bundled inputs, given in the comments).
void expect_paper_effects(const std::vector<Row>& rows) {
  const auto r = index_rows(rows);
  auto l1 = [&](const std::string& table, const std::string& set, const std::string& label,
                int len = 0) {
    const std::string k = table + "|" + set + "|" + label + "|" + std::to_string(len);
    EXPECT_TRUE(r.count(k)) << k;
    return r.count(k) ? r.at(k).rel_l1_mean : NAN;
  };
  for (const std::string set : {"smollm2", "minilm", "kbias_d64", "kbias_d128"}) {
    // Smoothing Q and K removes channel means INT4 would otherwise spend its 15 levels on
    // (measured ratio 0.32..0.75).
    EXPECT_LT(l1("table4_17", set, "Smooth Q+K"), 0.9 * l1("table4_17", set, "None")) << set;
    // INT8 Q/K has 16x finer steps than INT4 (measured 5x..17x lower error).
    for (const std::string g : {"Per-token", "Per-thread", "Per-block", "Per-tensor"})
      EXPECT_LT(3 * l1("table6_15", set, g + " INT8"), l1("table6_15", set, g + " INT4")) << set;
    // One scale per tensor is coarser than one per token (measured 1.5x..2x).
    EXPECT_GT(l1("table6_15", set, "Per-tensor INT4"), 1.2 * l1("table6_15", set, "Per-token INT4"))
        << set;
    // E5M2 keeps 2 mantissa bits of P~ and V, E4M3 3 (measured 1.04x..1.26x).
    EXPECT_GT(l1("table7_16", set, "E5M2"), l1("table7_16", set, "E4M3")) << set;
  }
  for (const std::string set : {"kbias_d64", "kbias_d128"}) {
    // K's per-channel bias (4 sigma) is what smooth K subtracts (measured ratio 0.30..0.35).
    EXPECT_LT(l1("table4_17", set, "Smooth K"), 0.6 * l1("table4_17", set, "None")) << set;
  }
  // §3.4: an FP22 accumulator carried over 8K keys of V with channel means (kbias) loses bits
  // that a per-block FP32 flush keeps (measured 59x on sm90, 65x on the Ada model); the error
  // grows with the keys (measured 9x from 1K to 8K). On the H100, sm89's FP8 mma.sync is fp16
  // HMMAs accumulating in FP32, so both accumulations agree (measured equal).
  EXPECT_GT(l1("fig17", "kbias_q64", "sm90 fp32", 8192),
            10 * l1("fig17", "kbias_q64", "sm90 fp32+fp32", 8192));
  EXPECT_GT(l1("fig17", "kbias_q64", "sm89/ada fp32", 8192),
            10 * l1("fig17", "kbias_q64", "sm89/ada fp32+fp32", 8192));
  EXPECT_GT(l1("fig17", "kbias_q64", "sm90 fp32", 8192),
            3 * l1("fig17", "kbias_q64", "sm90 fp32", 1024));
  EXPECT_NEAR(l1("fig17", "kbias_q64", "sm89/h100 fp32", 8192) /
                  l1("fig17", "kbias_q64", "sm89/h100 fp32+fp32", 8192),
              1.0, 0.1);
}

// One test (the quick run takes ~30 s on one and two threads; CTest runs each test alone).
TEST_F(ReproSage2, QuickRunIsThreadIndependentAndShowsThePapersEffects) {
  ASSERT_EQ(code2_, 0) << slurp(path("stderr.txt"));
  ASSERT_EQ(code1_, 0) << slurp(path("stderr.txt"));
  EXPECT_NE(out2_.find("Paper orderings"), std::string::npos) << out2_;
  EXPECT_NE(out2_.find("table7_16  kbias_d128  INT8"), std::string::npos) << out2_;
  EXPECT_NE(out2_.find("table7_16  kbias_d128  INT8 static"), std::string::npos) << out2_;
  const auto h5 = rows_h5(path("t2.h5"));
  const auto csv = rows_csv(path("t1.csv"));
  // (6 smoothing + 8 granularity + 5 P/V rows) × 4 input sets + 6 accumulations × 2 inputs ×
  // 1K..8K keys.
  ASSERT_EQ(h5.size(), 19u * 4 + 6 * 2 * 4);
  ASSERT_EQ(csv.size(), h5.size());
  for (std::size_t i = 0; i < h5.size(); ++i) {
    const Row &a = h5[i], &b = csv[i];
    EXPECT_EQ(a.table + a.inputs + a.label, b.table + b.inputs + b.label) << i;
    EXPECT_EQ(a.len_kv, b.len_kv) << i;
    EXPECT_EQ(a.n, b.n) << i;
    for (auto [x, y] : {std::pair{a.cos_mean, b.cos_mean},
                        {a.rel_l1_mean, b.rel_l1_mean},
                        {a.rmse_mean, b.rmse_mean},
                        {a.cos_min, b.cos_min},
                        {a.rel_l1_max, b.rel_l1_max},
                        {a.rmse_max, b.rmse_max}})
      EXPECT_TRUE(std::memcmp(&x, &y, sizeof x) == 0)
          << i << " " << a.label << ": " << x << " vs " << y;
    // Worst case bounds the mean; every row measured something.
    EXPECT_LE(a.cos_min, a.cos_mean) << i;
    EXPECT_GE(a.rel_l1_max, a.rel_l1_mean) << i;
    EXPECT_GE(a.rmse_max, a.rmse_mean) << i;
    EXPECT_GT(a.rel_l1_mean, 0) << i;
    const std::map<std::string, std::int64_t> heads{{"smollm2", 27},   {"minilm", 36},
                                                    {"kbias_d64", 2},  {"kbias_d128", 2},
                                                    {"normal_q64", 1}, {"kbias_q64", 1}};
    ASSERT_TRUE(heads.count(a.inputs)) << a.inputs;
    EXPECT_EQ(a.n, heads.at(a.inputs)) << i;
  }
  const H5Reader h(path("t2.h5"));
  EXPECT_EQ(h.attr_string("/", "repro"), "sage2");
  EXPECT_NE(h.attr_string("/", "notes").find("sage2:arch=paper"), std::string::npos);
  expect_paper_effects(h5);
}

}  // namespace
}  // namespace attnsim
