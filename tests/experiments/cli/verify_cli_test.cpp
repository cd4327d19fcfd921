// `attnsim verify` end to end: exit codes 0 (bit-identical), 1 (within the band), 3 (outside it,
// the row named), 2 for bad input with one line on stderr and no report written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "experiments/io/dump.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "formats/encoding.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {
namespace {

namespace fs = std::filesystem;

class VerifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnsim_verify_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    in_.shape = AttentionShape{1, 2, 2, 96, 160, 64, 64};
    std::mt19937 g(7);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (auto* t : {&in_.q, &in_.k, &in_.v}) {
      t->resize(t == &in_.q ? in_.shape.q_size() : in_.shape.k_size());
      for (float& x : *t) x = n(g);
    }
    // V with a channel bias (real V, SageAttention Fig. 2): outputs near 4, far from zero.
    for (float& x : in_.v) x += 4.0f;
    write_attention_dump(path("dump.h5"), in_, "verify_cli_test");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  struct Run {
    int code;
    std::string out, err;
  };
  Run run(const std::string& args) const {
    const int status = std::system((std::string(ATTNSIM_EXE) + " verify " + args + " >" +
                                    path("stdout.txt") + " 2>" + path("stderr.txt"))
                                       .c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout.txt")),
            slurp(path("stderr.txt"))};
  }
  // Writes o (values of bf16, or fp16) as uint16 bits with dtype="bfloat16" (an HDF5 half).
  void write_bf16(const std::string& name, const std::vector<double>& o,
                  std::vector<std::uint64_t> dims = {}, bool fp16 = false) const {
    if (dims.empty()) dims = {1, 2, 96, 64};
    constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
    std::vector<std::uint16_t> b(o.size());
    for (std::size_t i = 0; i < o.size(); ++i)
      b[i] = std::uint16_t(encode_float_bits(fp16 ? Encoding::kFp16 : Encoding::kBf16, float(o[i]), kRne));
    H5Writer w(path(name));
    if (fp16) {
      w.write_f16("o", dims, b.data());
    } else {
      w.write_u16("o", dims, b.data());
      w.attr_string("o", "dtype", "bfloat16");
    }
    w.commit();
  }
  void write_fp16(const std::string& name, const std::vector<double>& o) const {
    write_bf16(name, o, {}, true);
  }
  std::vector<double> method_o(const std::string& m) const { return parse_method(m).run(in_).o; }
  void expect_bad(const std::string& args, const std::string& needle) const {
    const Run r = run(args + " --out " + path("report.csv"));
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("report.csv")));
  }
  AttentionInput in_;
  fs::path dir_;
};

// An fp16 FA2: its error against golden is a few fp16 ULPs (0.05 % each), so a 1 % change of a
// row is outside FlashAttention's band. (With bf16 output a 1 % change is one or two ULPs, within
// the band's one-ULP floor; with an FP8 method the method's own error exceeds 1 %.)
const char* kMethod = "flash:qkv=fp16,p=fp16,out=fp16";

TEST_F(VerifyCli, IdenticalWithinAndOutsideTheBand) {
  const std::vector<double> o = method_o(kMethod);
  write_fp16("k.h5", o);
  Run r = run("--input " + path("dump.h5") + " --kernel-output " + path("k.h5") +
              " --method " + kMethod + " --out " + path("r.csv"));
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("verdict: bit-identical"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(path("r.csv")));
  // FP64 golden rounded to bf16: off the method's bits but closer to golden.
  write_fp16("g.h5", golden_attention_ref(in_));
  r = run("--input " + path("dump.h5") + " --kernel-output " + path("g.h5") + " --method " + kMethod);
  EXPECT_EQ(r.code, 1) << r.err << r.out;
  // Row 40 of head 1 scaled by 1.01.
  std::vector<double> bug = o;
  for (int c = 0; c < 64; ++c) bug[(96 + 40) * 64 + c] *= 1.01;
  write_fp16("b.h5", bug);
  r = run("--input " + path("dump.h5") + " --kernel-output " + path("b.h5") + " --method " +
          kMethod + " --out " + path("b.h5.report.h5") + " --counters");
  EXPECT_EQ(r.code, 3) << r.err << r.out;
  EXPECT_NE(r.out.find("batch 0 head 1 row 40"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("counters of"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("b.h5.report.h5")));
  // Without --method: the registered candidates, and which one is bit-identical.
  write_bf16("s.h5", method_o("sage2:arch=sm90"));
  r = run("--input " + path("dump.h5") + " --kernel-output " + path("s.h5"));
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("bit-identical candidates: sage2:"), std::string::npos) << r.out;
}

TEST_F(VerifyCli, BadInputIsOneLineExitTwoNothingWritten) {
  const std::vector<double> o = method_o(kMethod);
  const std::string base = "--input " + path("dump.h5") + " --method " + kMethod;
  // Shape mismatch.
  write_bf16("short.h5", std::vector<double>(o.begin(), o.begin() + 2 * 95 * 64), {1, 2, 95, 64}, true);
  expect_bad(base + " --kernel-output " + path("short.h5"), "shape");
  // Format mismatch: fp32 output for a bf16 method.
  {
    std::vector<float> f(o.begin(), o.end());
    H5Writer w(path("f32.h5"));
    w.write_f32("o", {1, 2, 96, 64}, f.data());
    w.commit();
  }
  expect_bad(base + " --kernel-output " + path("f32.h5"), "returns fp16 but the kernel output is fp32");
  // NaN in the output.
  std::vector<double> nan = o;
  nan[5 * 64 + 3] = NAN;
  write_fp16("nan.h5", nan);
  expect_bad(base + " --kernel-output " + path("nan.h5"), "NaN at (batch 0, head 0, row 5, column 3)");
  // Missing dataset.
  {
    H5Writer w(path("empty.h5"));
    std::vector<float> x(4, 0.0f);
    w.write_f32("x", {4}, x.data());
    w.commit();
  }
  expect_bad(base + " --kernel-output " + path("empty.h5"), "has no dataset 'o'");
  // Missing file, bad method, bad --out name.
  expect_bad(base + " --kernel-output " + path("nope.h5"), "nope.h5");
  write_fp16("k.h5", o);
  expect_bad("--input " + path("dump.h5") + " --kernel-output " + path("k.h5") + " --method nosuch",
             "nosuch");
  const Run r = run(base + " --kernel-output " + path("k.h5") + " --out " + path("r.txt"));
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(path("r.txt")));
}

}  // namespace
}  // namespace attnsim
