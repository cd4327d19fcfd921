// experiments/repro/repro_lean.cpp: `attnsim repro lean`, `lean-ragged --quick` and `lean-cta`
// end to end: the contract's columns, the measured columns equal to data/hw/h100/lean's
// timings, the held-out r recomputed here from the CSV (equal to the printed one, and >= 0.9),
// the same rows for one and two threads, the ragged sweep's shape (speedup falls as the batch
// context ratio rises) and the per-CTA table's conservation of tiles; a missing timings file is a
// one-line error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/experiments/repro/repro_harness.hpp"

namespace attnsim {
namespace {

namespace fs = std::filesystem;

using Rows = std::vector<std::vector<std::string>>;

Rows csv_rows(const std::string& text) { return parse_csv(text); }

std::map<std::string, std::size_t> columns(const Rows& rows) {
  std::map<std::string, std::size_t> c;
  for (std::size_t i = 0; i < rows.at(0).size(); ++i) c[rows[0][i]] = i;
  return c;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= double(x.size());
  my /= double(y.size());
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

class ReproLean : public ReproTest<ReproLean> {
 public:
  static constexpr const char* kName = "lean";
};

TEST_F(ReproLean, TableHasTheContractColumnsTheRecordedTimesAndTheHeldOutR) {
  std::string out;
  ASSERT_EQ(run("OMP_NUM_THREADS=2", "lean --out " + path("l2.csv"), &out), 0);
  const Rows rows = csv_rows(slurp(path("l2.csv")));
  ASSERT_GE(rows.size(), 2u);
  const std::vector<std::string> contract{"config",
                                          "kind",
                                          "batch",
                                          "hq",
                                          "hk",
                                          "lk_max",
                                          "ratio",
                                          "measured_lean_us",
                                          "measured_fd_us",
                                          "predicted_lean_us",
                                          "predicted_fd_us",
                                          "measured_speedup",
                                          "predicted_speedup",
                                          "split"};
  ASSERT_GE(rows[0].size(), contract.size());
  EXPECT_EQ(std::vector<std::string>(rows[0].begin(), rows[0].begin() + contract.size()), contract);
  const auto c = columns(rows);

  // The measured columns are the recording's medians (lean, fd) for every configuration.
  const Rows data =
      csv_rows(slurp(std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/lean/lean_timings.csv"));
  const auto dc = columns(data);
  std::map<std::string, double> recorded;  // "config/kernel" -> time_us
  for (std::size_t i = 1; i < data.size(); ++i)
    if (data[i].size() == data[0].size())
      recorded[data[i][dc.at("config")] + "/" + data[i][dc.at("kernel")]] =
          std::stod(data[i][dc.at("time_us")]);
  ASSERT_EQ(rows.size() - 1, recorded.size() / 3);

  std::vector<double> ms, ps;
  int calib = 0, held = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string id = r[c.at("config")];
    const double ml = std::stod(r[c.at("measured_lean_us")]),
                 mf = std::stod(r[c.at("measured_fd_us")]);
    const double pl = std::stod(r[c.at("predicted_lean_us")]),
                 pf = std::stod(r[c.at("predicted_fd_us")]);
    EXPECT_DOUBLE_EQ(ml, recorded.at(id + "/lean")) << id;
    EXPECT_DOUBLE_EQ(mf, recorded.at(id + "/fd")) << id;
    EXPECT_NEAR(std::stod(r[c.at("measured_speedup")]), mf / ml, 1e-12 * mf / ml) << id;
    EXPECT_NEAR(std::stod(r[c.at("predicted_speedup")]), pf / pl, 1e-12 * pf / pl) << id;
    EXPECT_GT(pl, 0);
    EXPECT_GT(pf, 0);
    const std::string split = r[c.at("split")];
    const bool uniform = r[c.at("kind")] == "uniform";
    if (uniform) {
      EXPECT_NEAR(std::stod(r[c.at("ratio")]), 1.0, 1e-12) << id;
    }
    // Calibration = uniform configurations of even id; no ragged batch is ever fit.
    EXPECT_EQ(split, uniform && std::stoi(id) % 2 == 0 ? "calib" : "heldout") << id;
    if (split == "calib") {
      ++calib;
    } else {
      ++held;
      ms.push_back(mf / ml);
      ps.push_back(pf / pl);
    }
  }
  EXPECT_GT(calib, 50);
  EXPECT_GT(held, 200);

  // The r printed is the r of the CSV's held-out rows, and it meets the goal.
  const double r = pearson(ms, ps);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex("held-out r = ([0-9.]+) \\(goal r >= 0.9: (met|missed)\\)")))
      << out.substr(out.size() > 3000 ? out.size() - 3000 : 0);
  EXPECT_NEAR(std::stod(m[1]), r, 1e-4);
  EXPECT_GE(r, 0.9);
  EXPECT_EQ(m[2].str(), r >= 0.9 ? "met" : "missed");
  EXPECT_NE(out.find("agree with the recorded lean grid"), std::string::npos);

  // One thread: the same rows (the fit's objective sums in sample order).
  ASSERT_EQ(run("OMP_NUM_THREADS=1", "lean --out " + path("l1.csv"), nullptr), 0);
  EXPECT_EQ(slurp(path("l1.csv")), slurp(path("l2.csv")));
}

TEST_F(ReproLean, RaggedSweepSpeedupFallsAsTheContextRatioRises) {
  ASSERT_EQ(run("OMP_NUM_THREADS=2", "lean-ragged --out " + path("r.csv"), nullptr), 0);
  const Rows rows = csv_rows(slurp(path("r.csv")));
  ASSERT_GT(rows.size(), 20u);
  const auto c = columns(rows);
  for (const char* col : {"batch", "hq", "hk", "lk_max", "ratio", "predicted_lean_us",
                          "predicted_fd_us", "predicted_speedup", "lean_idle_frac", "fd_idle_frac",
                          "lean_max_cta_tiles", "fd_max_cta_tiles", "measured_speedup"})
    EXPECT_TRUE(c.count(col)) << col;
  // Per (batch >= 4, heads, max): the lowest ratio's speedup beats the highest ratio's by > 10%,
  // and at ratio 1 (uniform) the two kernels are within 5%; lean's SM slots idle less.
  std::map<std::string, std::map<double, double>> curve;
  std::map<std::string, int> fd_grid;  // the most FlashDecoding CTAs on the curve
  int measured = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (std::stoi(r[c.at("batch")]) < 4) continue;
    const std::string key = r[c.at("batch")] + "/" + r[c.at("hk")] + "/" + r[c.at("lk_max")];
    curve[key][std::stod(r[c.at("ratio")])] = std::stod(r[c.at("predicted_speedup")]);
    fd_grid[key] = std::max(fd_grid[key], std::stoi(r[c.at("fd_grid")]));
    EXPECT_LE(std::stod(r[c.at("lean_idle_frac")]), std::stod(r[c.at("fd_idle_frac")]) + 0.05)
        << key;
    measured += r[c.at("measured_speedup")] != "nan";
  }
  EXPECT_GT(measured, 5);  // --quick's points include measured ones (32K, ratios 0.1..1)
  int uniform_points = 0;
  for (const auto& [key, pts] : curve) {
    if (pts.count(1.0)) {  // absent where the uniform batch's K+V would exceed 80 GB
      EXPECT_NEAR(pts.at(1.0), 1.0, 0.05) << key;
      ++uniform_points;
    }
    // With many waves of FlashDecoding CTAs (64 entries x 32 KV heads = 2048) the in-order
    // dispatch balances most of the batch by itself: only curves of at most two waves.
    if (pts.size() >= 2 && pts.begin()->first <= 0.25 && fd_grid[key] <= 2 * 264) {
      EXPECT_GT(pts.begin()->second, 1.1 * pts.rbegin()->second) << key;
    }
  }
  EXPECT_GT(uniform_points, 5);
}

TEST_F(ReproLean, PerCtaTableConservesTilesAndLeanBalancesThem) {
  ASSERT_EQ(run("OMP_NUM_THREADS=2", "lean-cta --out " + path("c.csv"), nullptr), 0);
  const Rows rows = csv_rows(slurp(path("c.csv")));
  const auto c = columns(rows);
  long long tiles[2] = {0, 0}, most[2] = {0, 0};
  double makespan[2] = {0, 0};
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const int k = r[c.at("kernel")] == "lean" ? 0 : 1;
    const long long t = std::stoll(r[c.at("tiles")]);
    tiles[k] += t;
    most[k] = std::max(most[k], t);
    makespan[k] = std::stod(r[c.at("makespan_us")]);
    EXPECT_LE(std::stod(r[c.at("end_us")]), makespan[k] + 1e-9);
    EXPECT_LE(std::stod(r[c.at("start_us")]), std::stod(r[c.at("end_us")]));
  }
  EXPECT_EQ(tiles[0], tiles[1]);
  EXPECT_GT(tiles[0], 0);
  EXPECT_LT(most[0], most[1]);
  EXPECT_LT(makespan[0], makespan[1]);
}

TEST_F(ReproLean, AMissingTimingsFileIsAOneLineError) {
  ASSERT_EQ(run("ATTNSIM_LEAN_TIMINGS=" + path("none.csv"), "lean", nullptr), 2);
  const std::string err = slurp((*dir_ / "stderr.txt").string());
  EXPECT_NE(err.find("cannot read the timings"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

}  // namespace
}  // namespace attnsim
