// experiments/sweep/sweep_*: --grid, per-head rows, bit-identical results across thread counts,
// resume after interruption, MPI ranks, `attnsim run`, `compare`, `gate` and `repro` end to end.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/sweep/measure.hpp"
#include "experiments/sweep/sweep_engine.hpp"
#include "experiments/sweep/sweep_metrics.hpp"
#include "formats/encoding.hpp"
#include "numerics/isa.hpp"
#include "numerics/metrics.hpp"
#include "sim/pipeline/counters.hpp"
#include "sim/sage/sage.hpp"

namespace attnsim {
namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Defined below: every dataset of a equals b's bit for bit.
void expect_same_datasets(const std::string& a, const std::string& b);

class Exp : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnsim_exp_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Runs attnsim (or `prefix attnsim`) from the source directory, so relative data paths work.
  CmdResult run(const std::string& args, const std::string& prefix = "") const {
    const std::string cmd = "cd " + std::string(ATTNSIM_SOURCE_DIR) + " && " + prefix + " " +
                            ATTNSIM_EXE + " " + args + " >" + path("stdout.txt") + " 2>" +
                            path("stderr.txt");
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout.txt")),
            slurp(path("stderr.txt"))};
  }
  // The sweep of `config` passes `attnsim gate` against `baseline` (the CI numeric gate), and
  // gives the same results file bit for bit under the stage references alone (`attnsim --isa
  // scalar`): every metric of every point, so the baseline holds both ways and not only within
  // the gate's tolerances (those absorb libm differences between machines). The second sweep is
  // skipped where the fast kernels are off already (a CPU without them, ATTNSIM_ISA=scalar).
  void expect_gate_passes(const std::string& config, const std::string& baseline) const {
    const std::string sweep = "sweep --quiet --config " + config + " --output ";
    CmdResult r = run(sweep + path("gate_new.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    r = run("gate --baseline " + baseline + " --results " + path("gate_new.h5") +
            " --rules experiments/configs/gate.toml");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("gate: PASS"), std::string::npos) << r.out;
    if (active_isa() == Isa::kScalar) return;
    r = run("--isa scalar " + sweep + path("gate_ref.h5"));
    ASSERT_EQ(r.code, 0) << "--isa scalar: " << r.err;
    expect_same_datasets(path("gate_new.h5"), path("gate_ref.h5"));
  }
  fs::path dir_;
};

// Every dataset of `a` equals the one of `b` bit for bit (strings, integers, doubles), and the
// two files hold the same datasets. Attributes (date, command line) are not compared.
void expect_same_datasets(const std::string& a, const std::string& b) {
  const H5Reader ra(a), rb(b);
  const auto da = ra.datasets(), db = rb.datasets();
  ASSERT_EQ(da.size(), db.size());
  for (std::size_t i = 0; i < da.size(); ++i) {
    ASSERT_EQ(da[i].name, db[i].name);
    EXPECT_EQ(da[i].dims, db[i].dims) << da[i].name;
    if (da[i].kind == 's') {
      EXPECT_EQ(ra.read_strings(da[i].name), rb.read_strings(db[i].name)) << da[i].name;
    } else {
      const auto va = ra.read_numeric(da[i].name), vb = rb.read_numeric(db[i].name);
      ASSERT_EQ(va.size(), vb.size());
      for (std::size_t k = 0; k < va.size(); ++k) {
        EXPECT_TRUE(std::memcmp(&va[k], &vb[k], sizeof(double)) == 0)
            << da[i].name << "[" << k << "] " << va[k] << " vs " << vb[k];
      }
    }
  }
}

const char* kSweep =
    "sweep --quiet --methods golden,flash,flash:qkv=bf16,p=bf16,out=bf16 --grid bk=16,32 "
    "--synthetic normal:hq=2,nq=48,d=16 --synthetic kbias:b=2,hq=2,hkv=1,nq=40,d=8,causal=1 "
    "--seeds 2";

TEST(GridAxis, ParsesAndExpands) {
  const GridAxis a = parse_grid_axis("qkv=bf16,fp16,bf16");
  EXPECT_EQ(a.key, "qkv");
  EXPECT_EQ(a.values, (std::vector<std::string>{"bf16", "fp16"}));
  EXPECT_THROW(parse_grid_axis("qkv"), UsageError);
  EXPECT_THROW(parse_grid_axis("qkv=bf16,,fp16"), UsageError);
  const auto m = expand_grid({parse_method("golden"), parse_method("flash:qkv=e4m3fn,bk=32")},
                             {parse_grid_axis("qkv=bf16,fp16"), parse_grid_axis("bq=16,32")});
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].canonical(), "golden");
  EXPECT_EQ(m[1].short_name(), "flash:qkv=bf16,bq=16,bk=32");  // first axis outermost; bk kept
  EXPECT_EQ(m[2].short_name(), "flash:qkv=bf16,bq=32,bk=32");
  EXPECT_EQ(m[4].short_name(), "flash:qkv=fp16,bq=32,bk=32");
  try {
    expand_grid({parse_method("golden")}, {parse_grid_axis("qkv=bf16")});
    ADD_FAILURE() << "a grid key no method has must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("none of the methods"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand_grid({parse_method("flash")}, {parse_grid_axis("qkv=int3")}), UsageError);
}

// measure() spreads the per-element work over the OpenMP threads: its values must not depend
// on how many there are, and equal a brute-force computation (every distance and row error
// listed, fully sorted, ranked) on outputs with NaN, Inf, cancelling rows and a short last row.
TEST(Measure, ValuesDoNotDependOnTheThreadCountAndEqualSortedRanks) {
  std::uint64_t st = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return st >> 11;
  };
  const std::size_t n = 200003, row = 96;  // a part is whole rows; the last row is short
  std::vector<double> out(n), ref(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double r = (double(next() % 2000001) - 1e6) * 1e-6 * std::ldexp(1.0, int(next() % 9) - 4);
    ref[i] = r;
    const int kind = int(next() % 1000);
    out[i] = kind == 0 ? std::nan("") : kind == 1 ? HUGE_VAL : kind < 5 ? -r
             : r * (1.0 + (double(next() % 2001) - 1000.0) * 1e-5);
  }
  ref[17] = std::nan("");
  for (const char* fmt : {"fp32", "bf16", "e4m3fn"}) {
    const UlpFormat uf = parse_ulp_format(fmt);
    // The oracle: per element, then std::sort and the rank rule of numerics/metrics.hpp.
    std::vector<std::uint64_t> d(n);
    std::vector<double> err(n);
    std::uint64_t nan = 0, max_ulp = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t u = ulp_distance(out[i], ref[i], uf);
      const bool is_nan = std::isnan(out[i]) || std::isnan(ref[i]);
      nan += is_nan;
      if (!is_nan) max_ulp = std::max(max_ulp, u);
      d[i] = is_nan ? kUlpNanMismatch : std::min(u, kUlpNanMismatch - 1);
    }
    for (std::size_t r0 = 0; r0 < n; r0 += row) {
      double mag = 0;
      for (std::size_t i = r0; i < std::min(n, r0 + row); ++i)
        if (std::isfinite(ref[i])) mag = std::max(mag, std::fabs(ref[i]));
      for (std::size_t i = r0; i < std::min(n, r0 + row); ++i) {
        const double e = std::fabs(out[i] - ref[i]);
        err[i] = std::isfinite(e) ? e / ulp_at(mag, uf) : HUGE_VAL;
      }
    }
    std::sort(d.begin(), d.end());
    std::sort(err.begin(), err.end());
    const std::size_t k50 = (50 * n + 99) / 100 - 1, k99 = (99 * n + 99) / 100 - 1;
    const ErrorMetrics e = error_metrics(out.data(), ref.data(), n);
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      const MetricValues m = measure(out.data(), ref.data(), n, fmt, row);
      EXPECT_EQ(std::uint64_t(m.ulp_p50), d[k50]) << fmt << threads;
      EXPECT_EQ(std::uint64_t(m.ulp_p99), d[k99]) << fmt << threads;
      EXPECT_EQ(std::uint64_t(m.ulp_max), nan > 0 ? kUlpNanMismatch : max_ulp) << fmt << threads;
      EXPECT_EQ(m.ulp_row_p50, err[k50]) << fmt << threads;
      EXPECT_EQ(m.ulp_row_p99, err[k99]) << fmt << threads;
      EXPECT_EQ(m.ulp_row_max, err[n - 1]) << fmt << threads;
      EXPECT_TRUE(std::isnan(m.rel_l1) && std::isnan(e.rel_l1)) << fmt << threads;
      EXPECT_EQ(m.nonfinite, std::int64_t(e.nonfinite)) << fmt << threads;
      std::uint64_t counted = 0;
      for (auto c : m.ulp_hist) counted += std::uint64_t(c);
      EXPECT_EQ(counted + nan, n) << fmt << threads;
    }
    omp_set_num_threads(saved);
  }
  // Finite outputs: the compensated sums, in element order on one thread, equal error_metrics'.
  std::vector<double> fo(out), fr(ref);
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(fo[i]) || !std::isfinite(fr[i])) fo[i] = fr[i] = 0.5;
  const ErrorMetrics e = error_metrics(fo.data(), fr.data(), n);
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    const MetricValues m = measure(fo.data(), fr.data(), n, "fp32", row);
    EXPECT_EQ(m.rel_l1, e.rel_l1);
    EXPECT_EQ(m.cosine, e.cosine);
    EXPECT_EQ(m.rmse, e.rmse);
    EXPECT_EQ(m.max_abs, e.max_abs);
  }
}

TEST(RowRecord, RoundTripsExactlyAndRejectsCutLines) {
  const AttentionInput in = make_synthetic("normal:b=2,hq=2,nq=8,d=4");
  const MethodConfig m = parse_method("flash:qkv=e4m3fn");
  Goldens golden(in);
  PointRow r = measure_point(7, m, "syn\tthetic%\n", 3, in, m.run(in), golden);
  ASSERT_EQ(r.heads.size(), 4u);
  const std::string line = serialize_row(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  PointRow back;
  ASSERT_TRUE(parse_row(line, &back));
  EXPECT_EQ(serialize_row(back), line);
  EXPECT_EQ(back.input, "syn\tthetic%\n");
  EXPECT_EQ(back.m.rel_fro, r.m.rel_fro);
  EXPECT_EQ(back.heads[3].m.ulp_hist, r.heads[3].m.ulp_hist);
  for (std::size_t cut : {std::size_t(0), std::size_t(5), line.size() / 2, line.size() - 1}) {
    EXPECT_FALSE(parse_row(line.substr(0, cut), &back)) << cut;
  }
}

TEST_F(Exp, SweepGridAndPerHeadTables) {
  const CmdResult r = run(std::string(kSweep) + " --output " + path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const H5Reader h(path("r.h5"));
  // (golden + 2 flash × 2 bk) × (2 specs × 2 seeds) = 5 × 4 points.
  const auto method = h.read_strings("method");
  ASSERT_EQ(method.size(), 20u);
  EXPECT_EQ(h.read_strings("label")[1], "flash:bk=16");
  EXPECT_EQ(h.read_strings("label")[4], "flash:qkv=bf16,p=bf16,out=bf16,bk=32");
  EXPECT_EQ(h.read_i64("point"), [] {
    std::vector<std::int64_t> v(20);
    for (int i = 0; i < 20; ++i) v[std::size_t(i)] = i;
    return v;
  }());
  // Per head: 2 heads for the normal spec, 2 batches × 2 heads for kbias.
  const auto ph_point = h.read_i64("per_head/point");
  ASSERT_EQ(ph_point.size(), 10u * 2 + 10u * 4);
  EXPECT_EQ(h.read_i64("per_head/head")[1], 1);
  EXPECT_EQ(h.read_i64("per_head/batch_index")[40 + 2], 1);
  std::vector<std::uint64_t> dims;
  h.read_f64("per_head/ulp_hist", &dims);
  EXPECT_EQ(dims, (std::vector<std::uint64_t>{60, 23}));
  // The overall max_abs is the largest per-head max_abs of the point.
  const auto max_abs = h.read_f64("max_abs"), ph_max = h.read_f64("per_head/max_abs");
  for (std::size_t p = 0; p < 20; ++p) {
    double m = 0;
    for (std::size_t i = 0; i < ph_point.size(); ++i) {
      if (ph_point[i] == std::int64_t(p)) m = std::max(m, ph_max[i]);
    }
    EXPECT_EQ(m, max_abs[p]) << p;
  }
  const CmdResult bad = run("sweep --methods golden --grid qkv=bf16 --synthetic normal");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--grid key 'qkv' is an option of none of the methods"), std::string::npos)
      << bad.err;
}

TEST_F(Exp, ResultsIdenticalForAnyThreadCount) {
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("t1.h5"), "OMP_NUM_THREADS=1").code, 0);
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("t2.h5"), "OMP_NUM_THREADS=2").code, 0);
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("t3.h5"), "OMP_NUM_THREADS=3").code, 0);
  expect_same_datasets(path("t1.h5"), path("t2.h5"));
  expect_same_datasets(path("t1.h5"), path("t3.h5"));
}

// Equal scores, V = 512: the exact P·V sum n · 512 passes fp16's 65504 in every element, so
// sage2's fp16 P·V accumulator overflows rows · dv times (`*overflow`) and the fp32 one never.
AttentionInput pv_overflow_input(std::int64_t* overflow, int heads = 1) {
  AttentionInput in;
  const int n = 256, d = 64, rows = 16;
  in.shape = AttentionShape{1, heads, heads, rows, n, d, d};
  in.q.assign(std::size_t(heads) * rows * d, 0.5f);
  in.k.assign(std::size_t(heads) * n * d, 0.5f);
  in.v.assign(std::size_t(heads) * n * d, 512.0f);
  *overflow = double(n) * 512.0 > 65504.0 ? std::int64_t(heads) * rows * d : 0;
  return in;
}

// sweep --counters: each point's counters as cnt_<stage>_<event> columns, equal to brute-force
// counts from FP64 conditions on constructed inputs, whichever points share the threads.
TEST_F(Exp, SweepCounterColumnsMatchBruteForceForAnyThreadCount) {
  // Input A: one query row repeated, q = e_0, k_j = a_j e_0 (score a_j, sm_scale 1), V = 1.
  // flash:p=e4m3fn zeroes the p = exp(a_j - max) below half e4m3fn's least subnormal (2^-10).
  std::vector<double> a(64, -1.0);
  a[0] = 0.0;
  for (int j = 3; j < 64; j += 4) a[std::size_t(j)] = -9.0 - j * 0.25;
  AttentionInput pa;
  const int rows = 8, d = 4, n = int(a.size());
  pa.shape = AttentionShape{1, 1, 1, rows, n, d, d};
  pa.sm_scale = 1.0;
  pa.q.assign(std::size_t(rows) * d, 0.0f);
  pa.k.assign(std::size_t(n) * d, 0.0f);
  pa.v.assign(std::size_t(n) * d, 1.0f);
  for (int i = 0; i < rows; ++i) pa.q[std::size_t(i) * d] = 1.0f;
  for (int j = 0; j < n; ++j) pa.k[std::size_t(j) * d] = float(a[std::size_t(j)]);
  std::int64_t vanished = 0;
  for (double x : a) vanished += std::exp(x) < std::ldexp(1.0, -10);
  vanished *= rows;
  ASSERT_GT(vanished, 0);
  std::int64_t overflow = 0;
  const AttentionInput pb = pv_overflow_input(&overflow);
  ASSERT_GT(overflow, 0);
  write_attention_dump(path("a.h5"), pa, "test");
  write_attention_dump(path("b.h5"), pb, "test");
  const std::string sweep =
      "sweep --quiet --counters --methods flash:p=e4m3fn "
      "--methods sage2:arch=sm80,pv_accum=fp16,in=fp16 --methods sage2:arch=sm80,pv_accum=fp32,in=fp16 "
      "--methods golden --input " +
      path("a.h5") + " --input " + path("b.h5");
  CmdResult r = run(sweep + " --output " + path("c1.h5"), "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(sweep + " --output " + path("c2.h5"), "OMP_NUM_THREADS=2");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_datasets(path("c1.h5"), path("c2.h5"));
  const H5Reader h(path("c2.h5"));
  const auto method = h.read_strings("method"), input = h.read_strings("input");
  ASSERT_EQ(method.size(), 8u);
  const auto pv_vanished = h.read_i64("cnt_p_cast_p_vanished");
  const auto pv_over = h.read_i64("cnt_pv_overflow_inf");
  for (std::size_t i = 0; i < method.size(); ++i) {
    const bool on_a = input[i].find("a.h5") != std::string::npos;
    const std::string& m = method[i];
    const bool flash = m.rfind("flash", 0) == 0, f16 = m.find("pv_accum=fp16") != std::string::npos;
    if (flash && on_a) {
      EXPECT_EQ(pv_vanished[i], vanished) << input[i];
    }
    if (!on_a) {
      EXPECT_EQ(pv_over[i], f16 ? overflow : 0) << m;
    }
    if (m == "golden") {
      // Golden runs no pipeline stage: every counter column is 0.
      for (const auto& name : StageCounters::column_names())
        EXPECT_EQ(h.read_i64(name)[i], 0) << name;
    }
  }
  // A point alone (one method, one input) runs the simulator on the threads: their counts too.
  std::int64_t overflow4 = 0;
  write_attention_dump(path("b4.h5"), pv_overflow_input(&overflow4, 4), "test");
  for (const char* threads : {"OMP_NUM_THREADS=1", "OMP_NUM_THREADS=2"}) {
    r = run("sweep --quiet --counters --methods sage2:arch=sm80,pv_accum=fp16,in=fp16 --input " +
                path("b4.h5") + " --output " + path("one.h5"),
            threads);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(H5Reader(path("one.h5")).read_i64("cnt_pv_overflow_inf"),
              std::vector<std::int64_t>{overflow4})
        << threads;
  }
  // Without --counters no cnt_ columns; a checkpoint of one kind does not resume the other.
  r = run("sweep --quiet --methods flash --input " + path("a.h5") + " --output " + path("n.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const H5Reader hn(path("n.h5"));
  for (const auto& ds : hn.datasets()) EXPECT_NE(ds.name.rfind("cnt_", 0), 0u) << ds.name;
  r = run(sweep + " --output " + path("p.h5") + " --max-points 3", "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.code, 3) << r.err;
  r = run(sweep + " --output " + path("p.h5") + " --resume", "OMP_NUM_THREADS=2");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_datasets(path("c1.h5"), path("p.h5"));
}

TEST_F(Exp, InterruptedSweepResumesToTheSameFile) {
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("full.h5")).code, 0);
  CmdResult r = run(std::string(kSweep) + " --output " + path("part.h5") + " --max-points 7",
                    "OMP_NUM_THREADS=2");
  ASSERT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("part.h5")));
  ASSERT_TRUE(fs::exists(path("part.h5.ckpt.0")));
  // A record cut mid-write by a crash is ignored.
  std::ofstream(path("part.h5.ckpt.0"), std::ios::app) << "row1\t8\tflash";
  r = run(std::string(kSweep) + " --output " + path("part.h5") + " --max-points 5 --resume");
  ASSERT_EQ(r.code, 3) << r.err;
  r = run(std::string(kSweep) + " --output " + path("part.h5") + " --resume", "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 computed, 12 from checkpoints"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("part.h5.ckpt.0")));
  expect_same_datasets(path("full.h5"), path("part.h5"));
  // A checkpoint of another sweep is refused.
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("x.h5") + " --max-points 1").code, 3);
  std::string other = kSweep;
  other.replace(other.find("--seeds 2"), 9, "--seeds 3");
  r = run(other + " --output " + path("x.h5") + " --resume");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("different sweep"), std::string::npos) << r.err;
}

std::string mpirun_prefix(int ranks) {
  return "OMP_NUM_THREADS=1 mpirun -n " + std::to_string(ranks) +
         " --oversubscribe --bind-to none" + (::geteuid() == 0 ? " --allow-run-as-root" : "");
}

TEST_F(Exp, MpiRanksWriteTheSameFileAsOneProcess) {
#if !defined(ATTNSIM_HAVE_MPI)
  GTEST_SKIP() << "attnsim built without MPI";
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  ASSERT_EQ(run(std::string(kSweep) + " --output " + path("one.h5")).code, 0);
  CmdResult r = run(std::string(kSweep) + " --output " + path("two.h5"), mpirun_prefix(2));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_datasets(path("one.h5"), path("two.h5"));
  // Interrupted with 2 ranks, resumed with 3 and then 1: still the same file.
  r = run(std::string(kSweep) + " --output " + path("mix.h5") + " --max-points 3",
          mpirun_prefix(2));
  ASSERT_NE(r.code, 0);
  EXPECT_TRUE(fs::exists(path("mix.h5.ckpt.1")));
  r = run(std::string(kSweep) + " --output " + path("mix.h5") + " --max-points 2 --resume",
          mpirun_prefix(3));
  ASSERT_NE(r.code, 0);
  r = run(std::string(kSweep) + " --output " + path("mix.h5") + " --resume");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 computed, 12 from checkpoints"), std::string::npos) << r.out;
  expect_same_datasets(path("one.h5"), path("mix.h5"));
#endif
}

TEST_F(Exp, RunWritesOutputInItsFormatWithMetrics) {
  ASSERT_EQ(
      run("synth --synthetic kbias:b=1,hq=2,hkv=1,nq=24,d=8,causal=1,seed=5 --out " + path("d.h5"))
          .code,
      0);
  CmdResult r = run("run --method flash:qkv=bf16,p=bf16,out=bf16 --input " + path("d.h5") +
                    " --output " + path("o.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(run("sweep --quiet --methods flash:qkv=bf16,p=bf16,out=bf16 --input " + path("d.h5") +
                " --output " + path("s.h5"))
                .code,
            0);
  const H5Reader o(path("o.h5")), s(path("s.h5"));
  const H5DatasetInfo info = o.dataset_info("o");
  EXPECT_EQ(info.kind, 'u');
  EXPECT_EQ(info.size, 2u);
  EXPECT_EQ(info.dtype_attr, "bfloat16");
  EXPECT_EQ(info.dims, (std::vector<std::uint64_t>{1, 2, 24, 8}));
  EXPECT_EQ(o.attr_f64("o", "rel_fro"), s.read_f64("rel_fro")[0]);
  EXPECT_EQ(o.read_f64("metrics/rel_fro")[0], s.read_f64("rel_fro")[0]);
  EXPECT_EQ(o.read_i64("metrics/ulp_hist"), s.read_i64("ulp_hist"));
  EXPECT_EQ(o.read_i64("metrics/per_head/ulp_max"), s.read_i64("per_head/ulp_max"));
  // Every stored value is a bf16 (the low 16 bits of its float32 pattern are zero) and not all
  // zero.
  const H5Array a = o.read_array("o");
  double sum = 0;
  for (float v : a.data) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    EXPECT_EQ(bits & 0xFFFFu, 0u);
    sum += std::fabs(v);
  }
  EXPECT_GT(sum, 1.0);
  // fp16 output is an HDF5 half (numpy float16), fp32 a float32.
  ASSERT_EQ(run("run --quiet --method flash:out=fp16 --input " + path("d.h5") + " --output " +
                path("h.h5"))
                .code,
            0);
  const H5Reader h(path("h.h5"));
  EXPECT_EQ(h.dataset_info("o").kind, 'f');
  EXPECT_EQ(h.dataset_info("o").size, 2u);
  EXPECT_EQ(h.read_array("o").dtype, "float16");
  // Bad input: one line, exit 2, no output.
  r = run("run --method flash:qkv=int3 --input " + path("d.h5") + " --output " + path("bad.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run("run --method flash --input " + path("d.h5") + " --group layer_07 --output " +
          path("bad.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no group 'layer_07'"), std::string::npos) << r.err;
  r = run("run --method flash --input " + path("d.h5") + " --output /nonexistent/dir/o.h5");
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(path("bad.h5")));
}

TEST_F(Exp, CompareReportsTensorAndMetricDifferences) {
  ASSERT_EQ(run("sweep --quiet --methods golden,flash:qkv=bf16,p=bf16 --synthetic "
                "normal:nq=32,d=16 --output " +
                path("a.h5"))
                .code,
            0);
  ASSERT_EQ(run("sweep --quiet --methods golden,flash:qkv=bf16,p=bf16 --synthetic "
                "normal:nq=32,d=16,sigma=2 --output " +
                path("b.h5"))
                .code,
            0);
  CmdResult r = run("compare " + path("a.h5") + " " + path("a.h5"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = run("compare " + path("a.h5") + " " + path("b.h5"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("rel_fro"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flash:qkv=bf16,p=bf16 | synthetic:normal:nq=32,d=16,sigma=2 | seed 0"),
            std::string::npos)
      << r.out;
  // Tensors: two run outputs of different methods.
  ASSERT_EQ(run("synth --synthetic normal:nq=16,d=8 --out " + path("d.h5")).code, 0);
  ASSERT_EQ(
      run("run --quiet --method flash --input " + path("d.h5") + " --output " + path("o1.h5")).code,
      0);
  ASSERT_EQ(run("run --quiet --method flash:qkv=fp16 --input " + path("d.h5") + " --output " +
                path("o2.h5"))
                .code,
            0);
  r = run("compare --exclude metrics/ " + path("o1.h5") + " " + path("o2.h5"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("ulp (fp32)"), std::string::npos) << r.out;
  r = run("compare --tol 1 --exclude metrics/ " + path("o1.h5") + " " + path("o2.h5"));
  EXPECT_EQ(r.code, 0) << r.out;
  r = run("compare " + path("a.h5") + " " + path("missing.h5"));
  EXPECT_EQ(r.code, 2);
}

// Copies a results file, multiplying column `metric` of row `row` by `factor`.
void perturbed_copy(const std::string& from, const std::string& to, const std::string& metric,
                    std::size_t row, double factor) {
  const H5Reader r(from);
  H5Writer w(to);
  for (const auto& d : r.datasets()) {
    if (d.kind == 's') {
      w.write_strings(d.name, r.read_strings(d.name));
    } else if (d.kind == 'f') {
      std::vector<double> v = r.read_numeric(d.name);
      if (d.name == metric) v.at(row) *= factor;
      w.write_f64(d.name, d.dims, v.data());
    } else {
      const std::vector<std::int64_t> v = r.read_i64(d.name);
      w.write_i64(d.name, d.dims, v.data());
    }
  }
  w.commit();
}

const char* kBaseline = "data/baselines/flash_small.h5";
const char* kRules = "experiments/configs/gate.toml";

TEST_F(Exp, GatePassesOnTheBundledBaseline) {
  expect_gate_passes("experiments/configs/baseline_small.toml", kBaseline);
}

TEST_F(Exp, GatePassesOnThePipelineCompositionsBaseline) {
  // Cross-paper compositions of pipeline stage models (experiments/configs/baseline_pipeline.toml):
  // tensor-core, MUFU, quantizer and integer-add models all under the gate.
  expect_gate_passes("experiments/configs/baseline_pipeline.toml",
                     "data/baselines/pipeline_compositions.h5");
}

// `attnsim run` with a SageAttention method writes o in the kernel's 16-bit dtype: bf16 (uint16 +
// dtype="bfloat16") for an fp32 input rounded by in=bf16, an HDF5 half for an fp16 dump (used as
// it is, whatever `in` says), with the bits sim/sage computes.
TEST_F(Exp, RunWritesSageOutputsInTheKernelsDtype) {
  CmdResult r = run("run --quiet --method sage2:arch=sm90 --synthetic kbias:hq=2,hkv=1,nq=100,d=64,"
                    "causal=1,seed=3 --output " + path("o.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const AttentionInput in = make_synthetic("kbias:hq=2,hkv=1,nq=100,d=64,causal=1,seed=3");
  {
    const H5Reader o(path("o.h5"));
    const H5DatasetInfo info = o.dataset_info("o");
    EXPECT_EQ(info.kind, 'u');
    EXPECT_EQ(info.size, 2u);
    EXPECT_EQ(info.dtype_attr, "bfloat16");
    const std::vector<std::int64_t> bits = o.read_i64("o");
    SageOptions so;
    const SageResult want = sage_attention(in, so);
    ASSERT_EQ(bits.size(), want.r.o.size());
    constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
    for (std::size_t i = 0; i < bits.size(); ++i)
      ASSERT_EQ(std::uint16_t(bits[i]),
                encode_float_bits(Encoding::kBf16, float(want.r.o[i]), kExact)) << i;
  }
  // An fp16 dump of the same tensors.
  {
    H5Writer w(path("half.h5"));
    auto half = [](const std::vector<float>& x) {
      constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
      std::vector<std::uint16_t> b(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        b[i] = std::uint16_t(encode_float_bits(Encoding::kFp16, x[i], kRne));
      return b;
    };
    const AttentionShape& s = in.shape;
    auto u = [](int x) { return std::uint64_t(x); };
    w.write_f16("q", {u(s.batch), u(s.heads_q), u(s.len_q), u(s.head_dim)}, half(in.q).data());
    w.write_f16("k", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim)}, half(in.k).data());
    w.write_f16("v", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim)}, half(in.v).data());
    w.attr_i64("/", "causal", 1);
    w.commit();
  }
  r = run("run --quiet --method sage2:arch=sm80,in=bf16 --input " + path("half.h5") +
          " --output " + path("o16.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const H5Reader o(path("o16.h5"));
  const H5DatasetInfo info = o.dataset_info("o");
  EXPECT_EQ(info.kind, 'f');
  EXPECT_EQ(info.size, 2u);
  const std::vector<double> got = o.read_numeric("o");
  SageOptions so;
  so.arch = SageArch::kSm80;
  so.in = Encoding::kFp16;  // what the dump holds
  const SageResult want = sage_attention(in, so);
  ASSERT_EQ(got.size(), want.r.o.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want.r.o[i]) << i;
  // A head dim above 128 is refused with one line.
  r = run("run --quiet --method sage2 --synthetic normal:nq=16,d=160");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("head_dim 160 > 128"), std::string::npos) << r.err;
}

TEST_F(Exp, GatePassesOnTheSageBaseline) {
  // Every SageAttention method (experiments/configs/baseline_sage.toml) under the gate.
  expect_gate_passes("experiments/configs/baseline_sage.toml", "data/baselines/sage.h5");
}

TEST_F(Exp, GatePassesOnTheAmlaBaseline) {
  // Every AMLA variant and accumulation model (experiments/configs/baseline_amla.toml).
  expect_gate_passes("experiments/configs/baseline_amla.toml", "data/baselines/amla.h5");
}

TEST_F(Exp, GatePassesOnTheLeanBaseline) {
  // LeanAttention and the split/merge peers (experiments/configs/baseline_lean.toml).
  expect_gate_passes("experiments/configs/baseline_lean.toml", "data/baselines/lean.h5");
}

TEST_F(Exp, GatePassesOnTheTurboBaseline) {
  // TurboAttention's stages and caches and the KIVI baseline (experiments/configs/
  // baseline_turbo.toml).
  expect_gate_passes("experiments/configs/baseline_turbo.toml", "data/baselines/turbo.h5");
}

TEST_F(Exp, GatePassesOnTheSdpaBaseline) {
  // PyTorch SDPA's backends and FlashAttention-3 (experiments/configs/baseline_sdpa.toml).
  expect_gate_passes("experiments/configs/baseline_sdpa.toml", "data/baselines/sdpa.h5");
}

TEST_F(Exp, GatePassesOnTheFlexBaseline) {
  // FlexAttention's prefill and decode templates (experiments/configs/baseline_flex.toml).
  expect_gate_passes("experiments/configs/baseline_flex.toml", "data/baselines/flex.h5");
}

TEST_F(Exp, GatePassesOnTheVllmBaseline) {
  // vLLM's Triton unified_attention, 2D and 3D (experiments/configs/baseline_vllm.toml).
  expect_gate_passes("experiments/configs/baseline_vllm.toml", "data/baselines/vllm.h5");
}

TEST_F(Exp, GatePassesOnTheVllmFa3Baseline) {
  // vLLM's FlashAttention-3 fork, its prefill and decode tiles, FP8 with two-level accumulation
  // (experiments/configs/baseline_vllm_fa3.toml).
  expect_gate_passes("experiments/configs/baseline_vllm_fa3.toml", "data/baselines/vllm_fa3.h5");
}

TEST_F(Exp, AttributeWritesOneRowPerStage) {
  const std::string m =
      "flash:qkv=bf16,p=e4m3fn,out=bf16,qk_dot=sm90.hmma.bf16.f32,exp=ex2.approx.ftz";
  CmdResult r = run("attribute --method " + m +
                    " --synthetic kbias:hq=2,nq=96,d=64,causal=1 --out " + path("attr.csv"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(b) qk made exact too"), std::string::npos) << r.out;
  std::ifstream f(path("attr.csv"));
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(f, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 12u);  // header, "all", 11 stages
  EXPECT_EQ(lines[0].rfind("input,stage,method,exact,differs,rel_fro,cosine,max_abs,", 0), 0u);
  EXPECT_NE(lines[1].find(",all,"), std::string::npos);
  // Each stage's choice in the method-string spelling (pasteable: `attnsim methods --stages`).
  EXPECT_NE(lines[7].find(",exp,exp=ex2.approx.ftz,exp=exp2.exact,1,"), std::string::npos) << lines[7];
  // The same through HDF5, one dataset per column; a dump group; errors are one line, exit 2.
  r = run("attribute --method " + m + " --input data/bundled/kbias_gqa.h5 --quiet --output " +
          path("attr.h5"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run("attribute --method golden --synthetic normal:nq=8,d=8").code, 2);
  r = run("attribute --method flash:rescale=int_add --synthetic normal:nq=8,d=8");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("max_round"), std::string::npos) << r.err;
  EXPECT_EQ(run("attribute --method flash --input data/bundled/kbias_gqa.h5 --group nope").code, 2);
}

// attribute --counters: the method's own run's counters on the `all` row, -1 on the stage rows;
// the fp16 P·V overflow count equals the brute-force count.
TEST_F(Exp, AttributeCountersOfTheMethodsRun) {
  std::int64_t overflow = 0;
  write_attention_dump(path("b.h5"), pv_overflow_input(&overflow), "test");
  const std::string m = "sage2:arch=sm80,pv_accum=fp16,in=fp16";
  CmdResult r = run("attribute --counters --method " + m + " --input " + path("b.h5") + " --out " +
                    path("attr.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("pv: overflow_inf " + std::to_string(overflow)), std::string::npos) << r.out;
  const H5Reader h(path("attr.h5"));
  const auto stage = h.read_strings("stage");
  const auto pv = h.read_numeric("cnt_pv_overflow_inf");
  ASSERT_EQ(pv.size(), stage.size());
  ASSERT_GT(stage.size(), 2u);
  for (std::size_t i = 0; i < stage.size(); ++i)
    EXPECT_EQ(pv[i], stage[i] == "all" ? double(overflow) : -1.0) << stage[i];
  // The fp32 accumulator: no overflow; without --counters no cnt_ columns.
  r = run("attribute --counters --quiet --method sage2:arch=sm80,pv_accum=fp32,in=fp16 --input " +
          path("b.h5") + " --out " + path("attr32.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(H5Reader(path("attr32.h5")).read_numeric("cnt_pv_overflow_inf")[0], 0.0);
  r = run("attribute --quiet --method " + m + " --input " + path("b.h5") + " --out " +
          path("plain.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& ds : H5Reader(path("plain.h5")).datasets())
    EXPECT_NE(ds.name.rfind("cnt_", 0), 0u) << ds.name;
}

TEST_F(Exp, GateFailsOnAPerturbedBaseline) {
  const std::string base = std::string(ATTNSIM_SOURCE_DIR) + "/" + kBaseline;
  // The baseline claims row 3 was twice as accurate: the unchanged results are a regression.
  perturbed_copy(base, path("better_base.h5"), "rel_fro", 3, 0.5);
  CmdResult r = run("gate --baseline " + path("better_base.h5") + " --results " + kBaseline +
                    " --rules " + kRules);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("REGRESSION  rel_fro"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gate: FAIL: 1 regression"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("gate failed"), std::string::npos) << r.err;
  // The baseline claims row 3 was worse: the results improved, which passes.
  perturbed_copy(base, path("worse_base.h5"), "rel_fro", 3, 2.0);
  r = run("gate --baseline " + path("worse_base.h5") + " --results " + kBaseline + " --rules " +
          kRules);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("improved"), std::string::npos) << r.out;
  // A cosine drop of 1e-6 on one row is beyond abs 1e-9.
  perturbed_copy(base, path("cos_base.h5"), "cosine", 5, 1.0 + 1e-6);
  EXPECT_EQ(run("gate --baseline " + path("cos_base.h5") + " --results " + kBaseline + " --rules " +
                kRules)
                .code,
            1);
  // Errors are exit 2: unknown rule keys, metrics the files lack, unreadable files.
  std::ofstream(path("bad.toml")) << "[rel_fro]\ntolerance = 1\n";
  r = run(std::string("gate --baseline ") + kBaseline + " --results " + kBaseline + " --rules " +
          path("bad.toml"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown key 'tolerance' in [rel_fro]"), std::string::npos) << r.err;
  std::ofstream(path("nometric.toml")) << "[speed]\nabs = 1\n";
  EXPECT_EQ(run(std::string("gate --baseline ") + kBaseline + " --results " + kBaseline +
                " --rules " + path("nometric.toml"))
                .code,
            2);
  EXPECT_EQ(run(std::string("gate --baseline ") + kBaseline + " --results " + path("none.h5") +
                " --rules " + kRules)
                .code,
            2);
}

TEST_F(Exp, ReproFlashFormatsQuickWritesTheTableItPrints) {
  CmdResult r = run("repro flash-formats --quick --samples 1 --out " + path("r.csv"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = slurp(path("r.csv"));
  EXPECT_EQ(csv.rfind("method,dist,samples,cos_min,rel_l1_mean", 0), 0u) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 16);  // header + 5 formats × 3 distributions
  EXPECT_NE(r.out.find("flash:qkv=e4m3fn,p=e4m3fn  outlier"), std::string::npos) << r.out;
  ASSERT_EQ(run("repro flash-formats --quick --samples 1 --out " + path("r.h5")).code, 0);
  const H5Reader h(path("r.h5"));
  const auto l1 = h.read_f64("rel_l1_mean");
  ASSERT_EQ(l1.size(), 15u);
  // Row order: fp32, fp16, bf16, e4m3fn, e5m2 (× normal, kbias, outlier): errors grow with coarser
  // formats.
  EXPECT_LT(l1[0], 1e-5);
  EXPECT_LT(l1[3], l1[6]);
  EXPECT_LT(l1[6], l1[9]);
  EXPECT_LT(l1[9], l1[12]);
  EXPECT_EQ(h.attr_string("/", "repro"), "flash-formats");
  r = run("repro sage9");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected flash-formats"), std::string::npos) << r.err;
  r = run("repro flash-formats --quick --out " + path("r.txt"));
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(path("r.txt")));
  EXPECT_EQ(run("repro --list").code, 0);
}

}  // namespace
}  // namespace attnsim
