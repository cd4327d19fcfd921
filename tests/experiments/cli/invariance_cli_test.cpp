// `attnsim schedule` and `attnsim invariance` end to end: the schedule printed with its rules,
// exit 0 when the target's rows keep their bits, 1 when they differ, 2 with one line for bad
// situations (B = 0, lengths that do not fit, an unknown kernel), the CSV of a table.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace attnsim {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out, err;
};

class InvarianceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnsim_invariance_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  CliRun run(const std::string& args) const {
    const int status = std::system((std::string(ATTNSIM_EXE) + " " + args + " >" +
                                    path("out.txt") + " 2>" + path("err.txt"))
                                       .c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("out.txt")),
            slurp(path("err.txt"))};
  }
  fs::path dir_;
};

TEST_F(InvarianceCli, SchedulePrintsTheChoicesAndTheirRules) {
  const CliRun r = run("schedule --method sdpa:backend=flash,dtype=bf16 --heads 32/8 --head-dim 128 "
                    "1:4096x16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("flash_fwd_splitkv_kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("splits    2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_splits_heuristic"), std::string::npos) << r.out;
  const CliRun v = run("schedule --method vllm_triton --heads 8/2 --head-dim 128 --causal "
                    "1:500+1:300x3+2:2");
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("path"), std::string::npos);
  EXPECT_NE(v.out.find("2d"), std::string::npos) << v.out;
}

TEST_F(InvarianceCli, ExitCodesAnswerTheQuestion) {
  const std::string base = "invariance --method sdpa:backend=flash,dtype=bf16 --heads 32/8 "
                           "--head-dim 128 ";
  EXPECT_EQ(run(base + "1:4096x27 1:4096x64").code, 0);
  EXPECT_EQ(run(base + "1:4096 1:4096x2").code, 1);
  EXPECT_EQ(run(base + "1:4096x27 1:4096x64 --ulp --quiet").code, 0);
  const CliRun t = run(base + "1:4096 '1:4096x{n}' --range 1..64 --csv " + path("t.csv"));
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.out.find("first changes at n = 2"), std::string::npos) << t.out;
  std::ifstream f(path("t.csv"));
  std::string header, line;
  std::getline(f, header);
  EXPECT_EQ(header.rfind("n,situation_a,situation_b,schedule_a,schedule_b,differs_in,", 0), 0u);
  int lines = 0;
  while (std::getline(f, line)) ++lines;
  EXPECT_EQ(lines, 64);
}

// A top-left causal kernel's decode target runs without the mask: the report says so.
TEST_F(InvarianceCli, TheReportSaysWhenADecodeRowRunsUnmasked) {
  const CliRun r = run("invariance --method sdpa:backend=efficient,dtype=bf16 --heads 8 "
                       "--head-dim 64 --causal 256:256 1:256");
  EXPECT_LE(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("B: the one-query target of this top-left causal kernel runs without the "
                       "mask"),
            std::string::npos)
      << r.out;
}

TEST_F(InvarianceCli, BadSituationsGetOneLineAndExit2) {
  const std::string base = "invariance --method vllm_triton --heads 8/2 --head-dim 128 --causal ";
  for (const std::string& bad :
       {base + "1:500 1:500x0", base + "1:500 0:500", base + "600:500 1:500",
        base + "1:500 1:500+1:300xq", base + "'1:500x{n}' 1:500",
        std::string("invariance --method nosuchkernel --heads 8 --head-dim 64 1:10 1:10x2"),
        std::string("invariance --method flash --heads 8 --head-dim 64 1:10 1:10x2"),
        std::string("invariance --method sdpa --heads 8/3 --head-dim 64 1:10 1:10x2"),
        std::string("schedule --method sdpa --heads 8 --head-dim 64 1:10+1:20"),
        // Options that would change nothing are refused, not ignored.
        base + "1:500 1:500x2 --seed 3", base + "1:500 1:500x2 --dist uniform",
        std::string("run --method sdpa --synthetic normal:nq=1,nkv=64 --sms 100"),
        std::string("run --method flash --synthetic normal:nq=1,nkv=64 --launch 1:64x2")}) {
    const bool inv = bad.rfind("invariance", 0) == 0;  // run's --out is checked elsewhere
    const CliRun r = run(bad + (inv ? " --csv " + path("x.csv") : std::string()));
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.find("attnsim: error: "), 0u) << bad << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << bad << ": " << r.err;
    EXPECT_FALSE(fs::exists(path("x.csv"))) << bad;
  }
}

}  // namespace
}  // namespace attnsim
