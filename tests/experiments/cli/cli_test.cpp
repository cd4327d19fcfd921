// The `attnsim` executable end to end: the convert contract, one-line errors, no partial outputs,
// sweeps and their HDF5 results.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "numerics/isa.hpp"
#include "tests/experiments/io/hdf5_chunks.hpp"

namespace attnsim {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnsim_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  CliRun run(const std::string& args) const {
    const std::string err = path("stderr.txt");
    const int status = std::system(
        (std::string(ATTNSIM_EXE) + " " + args + " >" + path("stdout.txt") + " 2>" + err).c_str());
    std::ifstream in(err);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
  }
  void write_floats(const std::string& name, const std::vector<float>& v) const {
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
  }
  std::vector<std::uint8_t> read_bytes(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::string read_text(const std::string& name) const {
    std::ifstream in(path(name));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // A small flat dump (q [1, 2, 16, 64], k and v [1, 1, 16, 64]) written by attnsim itself.
  void synth(const std::string& name, const std::string& extra = "") const {
    ASSERT_EQ(
        run("synth --synthetic normal:hq=2,hkv=1,nq=16,d=64" + extra + " --out " + path(name)).code,
        0);
  }
  fs::path dir_;
};

// An ATTNSIM_ISA the CPU cannot apply is refused in one line (exit 2), not ignored; --isa
// replaces it.
TEST_F(Cli, UnappliedIsaEnvironmentIsRefused) {
  ::setenv("ATTNSIM_ISA", "avx3", 1);
  const CliRun bad = run("info");
  const CliRun replaced = run("--isa scalar info");
  ::setenv("ATTNSIM_ISA", "scalar", 1);
  const CliRun good = run("info");
  ::unsetenv("ATTNSIM_ISA");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "attnsim: error: ATTNSIM_ISA=avx3: not an instruction set (scalar, neon, avx2, "
                     "avx512, amx) (the fast kernels use " +
                         std::string(isa_name(detected_isa())) + ")\n");
  EXPECT_EQ(replaced.code, 0) << replaced.err;
  EXPECT_EQ(good.code, 0) << good.err;
}

TEST_F(Cli, ConvertContractE4m3AndBack) {
  write_floats("x.f32", {1.0f, 464.0f, 465.0f, -0.0f, 0.0009765625f});
  const CliRun r = run("convert --to e4m3fn --round rne --overflow saturate --in " + path("x.f32") +
                       " --out " + path("x.u8"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_bytes("x.u8"), (std::vector<std::uint8_t>{0x38, 0x7E, 0x7E, 0x80, 0x00}));
  ASSERT_EQ(
      run("convert --to e4m3fn --decode --in " + path("x.u8") + " --out " + path("y.f32")).code, 0);
  const auto y = read_bytes("y.f32");
  ASSERT_EQ(y.size(), 20u);
  float f[5];
  std::memcpy(f, y.data(), 20);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 448.0f);
  EXPECT_TRUE(std::signbit(f[3]));
  // ml_dtypes' non-saturating convention.
  ASSERT_EQ(run("convert --to e4m3fn --round rne --overflow nan --nan-encoding ml_dtypes --in " +
                path("x.f32") + " --out " + path("z.u8"))
                .code,
            0);
  EXPECT_EQ(read_bytes("z.u8")[2], 0x7F);
}

TEST_F(Cli, ConvertU16AndF64) {
  std::vector<double> d{1.0 + 0x1p-8 + 0x1p-40};
  std::ofstream(path("x.f64"), std::ios::binary).write(reinterpret_cast<const char*>(d.data()), 8);
  ASSERT_EQ(run("convert --to bf16 --from f64 --round rne --overflow inf --in " + path("x.f64") +
                " --out " + path("x.u16"))
                .code,
            0);
  EXPECT_EQ(read_bytes("x.u16"), (std::vector<std::uint8_t>{0x81, 0x3F}));  // little-endian 0x3F81
}

TEST_F(Cli, BadInputGivesOneLineAndNoOutput) {
  write_floats("x.f32", {1.0f, NAN});
  struct Bad {
    std::string args, needle;
  } cases[] = {
      {"convert --to fp8 --round rne --overflow saturate --in X --out O", "unknown format 'fp8'"},
      {"convert --to e4m3fn --round rnz --overflow saturate --in X --out O",
       "unknown rounding mode"},
      {"convert --to e4m3fn --round rne --overflow inf --in X --out O", "no infinity"},
      {"convert --to e4m3fn --round rne --in X --out O", "--overflow is required"},
      {"convert --to int8 --round rne --overflow saturate --scale 1 --in X --out O", "NaN"},
      {"convert --to int8 --round rne --overflow saturate --in X --out O", "--scale"},
      {"convert --to bf16 --round rne --overflow inf --in MISSING --out O", "cannot read"},
      {"convert --to bf16 --decode --in TRUNC --out O", "whole number"},
  };
  std::ofstream(path("trunc.u16"), std::ios::binary) << "abc";
  for (const auto& c : cases) {
    std::string args = c.args;
    auto sub = [&](const std::string& from, const std::string& to) {
      const auto p = args.find(from);
      if (p != std::string::npos) args.replace(p, from.size(), to);
    };
    sub("MISSING", path("missing.f32"));
    sub("TRUNC", path("trunc.u16"));
    // Built with append, not operator+ on a temporary: GCC 12's -Wrestrict misfires on the latter.
    std::string x_arg(" ");
    x_arg.append(path("x.f32")).append(" ");
    std::string o_arg(" ");
    o_arg.append(path("out.bin"));
    sub(" X ", x_arg);
    sub(" O", o_arg);
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << args << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("attnsim: error: ", 0), 0u) << r.err;
    EXPECT_FALSE(fs::exists(path("out.bin"))) << args;
  }
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos)
        << "leftover temp file " << e.path();
  }
}

TEST_F(Cli, SweepWritesColumnarResults) {
  const CliRun r =
      run("sweep --methods golden,flash:qkv=bf16,p=bf16 --synthetic normal:nq=40,d=16 --seeds 2 "
          "--quiet --output " +
          path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  H5Reader h(path("r.h5"));
  const auto methods = h.read_strings("method");
  ASSERT_EQ(methods.size(), 4u);
  EXPECT_EQ(methods[0], "golden");
  EXPECT_EQ(methods[1].rfind("flash:qkv=bf16,p=bf16,", 0), 0u);
  const auto rel = h.read_f64("rel_fro");
  EXPECT_EQ(rel[0], 0.0);
  EXPECT_GT(rel[1], 1e-4);
  EXPECT_LT(rel[1], 1e-2);
  EXPECT_EQ(h.read_i64("seed"), (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_FALSE(h.attr_string("/", "git_commit").empty());
  EXPECT_NE(h.attr_string("/", "command_line").find("sweep"), std::string::npos);
}

TEST_F(Cli, SweepFromConfigFileAndDump) {
  ASSERT_EQ(
      run("synth --synthetic kbias:hq=2,hkv=1,nq=32,d=16,causal=1 --out " + path("d.h5")).code, 0);
  std::ofstream(path("c.toml")) << "methods = [\"golden\", \"flash:bq=16,bk=16\"]\ninput = [\""
                                << path("d.h5") << "\"]\n";
  const CliRun r = run("sweep --config " + path("c.toml") + " --quiet --output " + path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  H5Reader h(path("r.h5"));
  EXPECT_EQ(h.read_i64("causal"), (std::vector<std::int64_t>{1, 1}));
  EXPECT_LT(h.read_f64("rel_fro")[1], 2e-6);
  std::ofstream(path("bad.toml")) << "method = [\"golden\"]\n";
  const CliRun bad = run("sweep --config " + path("bad.toml"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown key 'method'"), std::string::npos) << bad.err;
}

TEST_F(Cli, SweepRejectsBadMethodsAndDumps) {
  CliRun r = run("sweep --methods flash:qkv=int3 --synthetic normal");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected fp32, bf16"), std::string::npos) << r.err;
  r = run("sweep --methods flash:speed=fast --synthetic normal");
  EXPECT_NE(r.err.find("allowed: qkv"), std::string::npos) << r.err;
  std::ofstream(path("junk.h5")) << "not hdf5";
  r = run("sweep --methods golden --input " + path("junk.h5") + " --output " + path("o.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a readable HDF5 file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("o.h5")));
}

// `attnsim quantize` on a synthetic dump: one row per head × quantizer × granularity × smoothing,
// the table readable back, errors ordered as granularity dictates (per-token ≤ per-tensor on a
// per-token-scaled K), and bad arguments rejected with one line and no output file.
TEST_F(Cli, QuantizeWritesTableAndRejectsBadInput) {
  ASSERT_EQ(
      run("synth --synthetic kbias:hq=2,hkv=2,nq=128,nkv=128,d=32,seed=3 --out " + path("d.h5"))
          .code,
      0);
  const CliRun r =
      run("quantize --input " + path("d.h5") +
          " --quantizers symmetric_int8,e4m3fn --granularities per_tensor,per_token --output " +
          path("q.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  H5Reader in(path("q.h5"));
  const std::vector<double> fro = in.read_f64("rel_fro");
  const std::vector<std::string> quant = in.read_strings("quantizer");
  const std::vector<std::string> gran = in.read_strings("granularity");
  const std::vector<std::int64_t> smooth = in.read_i64("smooth");
  ASSERT_EQ(fro.size(), 2u * 2 * 2 * 2);  // heads × quantizers × granularities × {raw, smooth}
  for (std::size_t i = 0; i < fro.size(); ++i) {
    EXPECT_GT(fro[i], 0.0);
    EXPECT_LT(fro[i], quant[i] == "e4m3fn" ? 0.1 : 0.02) << quant[i] << " " << gran[i];
  }
  EXPECT_EQ(in.attr_string("/", "tensor"), "k");
  struct Bad {
    std::string args, needle;
  };
  for (const Bad& b : std::vector<Bad>{{"--quantizers int3", "unknown quantizer 'int3'"},
                                       {"--granularities per_block:0", "per_block:0"},
                                       {"--tensor o", "--tensor must be q, k or v"},
                                       {"--smooth maybe", "--smooth must be"},
                                       {"--group layer_07", "no group 'layer_07'"}}) {
    const CliRun e =
        run("quantize --input " + path("d.h5") + " " + b.args + " --output " + path("bad.h5"));
    EXPECT_EQ(e.code, 2) << b.args;
    EXPECT_NE(e.err.find(b.needle), std::string::npos) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
    EXPECT_FALSE(fs::exists(path("bad.h5"))) << b.args;
  }
  const CliRun missing = run("quantize --input " + path("none.h5") + " --output " + path("bad.h5"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_FALSE(fs::exists(path("bad.h5")));
}

// `attnsim mma --promote`: the two-level accumulation through the raw-file contract (float32 C
// and D), on the hand-derived case of tests/numerics/mma_test.cpp (1 + 128 products of 2^-15:
// the FP22 chain keeps 1.0, promotion every 32 gives 1 + 2^-8), and its argument checks.
TEST_F(Cli, MmaPromoteContract) {
  {
    std::ofstream(path("a.u8"), std::ios::binary) << std::string(128, char(0x08));
    std::ofstream(path("b.u8"), std::ios::binary) << std::string(128, char(0x01));
  }
  write_floats("c.f32", {1.0f});
  const std::string files = " --m 1 --n 1 --k 128 --a " + path("a.u8") + " --b " + path("b.u8") +
                            " --c " + path("c.f32") + " --out " + path("d.f32");
  ASSERT_EQ(run("mma --instr sm90.wgmma.e4m3.f32" + files).code, 0);
  std::vector<std::uint8_t> d = read_bytes("d.f32");
  float v = 0;
  ASSERT_EQ(d.size(), 4u);
  std::memcpy(&v, d.data(), 4);
  EXPECT_EQ(v, 1.0f);
  ASSERT_EQ(run("mma --instr sm90.wgmma.e4m3.f32 --promote 32" + files).code, 0);
  d = read_bytes("d.f32");
  std::memcpy(&v, d.data(), 4);
  EXPECT_EQ(v, 1.0f + 0x1p-8f);
  fs::remove(path("d.f32"));
  for (const std::string& bad : {std::string("sm90.wgmma.e4m3.f32 --promote 48"),
                                 std::string("sm90.wgmma.e4m3.f32 --promote -32"),
                                 std::string("sm90.wgmma.e4m3.f32 --promote 256")}) {
    const CliRun r = run("mma --instr " + bad + files);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("d.f32"))) << bad;
  }
  const CliRun integer = run("mma --instr sm90.imma.s8.s32 --promote 32" + files);
  EXPECT_EQ(integer.code, 2);
  EXPECT_NE(integer.err.find("floating-point accumulators"), std::string::npos) << integer.err;
}

// `attnsim special --no-ftz` on inputs whose H100 results (data/hw/h100/cvt_sample.h5) take the
// scaled paths: subnormal results of ex2 and rcp, subnormal inputs of lg2.
TEST_F(Cli, SpecialNoFtzReproducesRecordedOutputs) {
  struct Case {
    const char* fn;
    std::uint32_t x, ftz, no_ftz;
  };
  for (const Case& c : {Case{"ex2", 0xc3090000u, 0x00000000u, 0x00001000u},
                        Case{"rcp", 0x7f7fffffu, 0x00000000u, 0x00200000u},
                        Case{"rcp", 0x00200001u, 0x7f800000u, 0x7f7ffff8u},
                        Case{"lg2", 0x00000001u, 0xff800000u, 0xc3150000u},
                        Case{"lg2", 0x802a8000u, 0xff800000u, 0x7fffffffu}}) {
    float xf;
    std::memcpy(&xf, &c.x, 4);
    write_floats("x.f32", {xf});
    for (bool no_ftz : {false, true}) {
      const CliRun r = run(std::string("special --fn ") + c.fn + (no_ftz ? " --no-ftz" : "") +
                           " --in " + path("x.f32") + " --out " + path("y.f32"));
      ASSERT_EQ(r.code, 0) << r.err;
      const std::vector<std::uint8_t> y = read_bytes("y.f32");
      ASSERT_EQ(y.size(), 4u);
      std::uint32_t got;
      std::memcpy(&got, y.data(), 4);
      EXPECT_EQ(got, no_ftz ? c.no_ftz : c.ftz)
          << c.fn << " 0x" << std::hex << c.x << (no_ftz ? " --no-ftz" : "");
    }
  }
}

TEST_F(Cli, InfoListsFormatsAndPolicies) {
  const CliRun r = run("info");
  ASSERT_EQ(r.code, 0);
  std::ifstream in(path("stdout.txt"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* s :
       {"e4m3fn", "e5m2", "bf16", "fp16", "fp22", "int4", "rne", "saturate-finite", "ml_dtypes"}) {
    EXPECT_NE(text.find(s), std::string::npos) << s;
  }
  EXPECT_NE(text.find("max 448"), std::string::npos);
}

// The commit `attnsim info` (and every result file) reports is the checkout's HEAD at build time,
// not at configure time (experiments/common/git_commit.cmake): the binary under test was built
// from this checkout's HEAD, since the tests are built with it. Outside a git checkout: "unknown".
TEST_F(Cli, InfoReportsTheCommitTheBuildWasMadeFrom) {
  std::string head;
  if (FILE* p = popen("git -C '" ATTNSIM_SOURCE_DIR "' rev-parse --short=12 HEAD 2>/dev/null", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, p)) head = buf;
    pclose(p);
  }
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  const CliRun r = run("info");
  ASSERT_EQ(r.code, 0);
  std::ifstream in(path("stdout.txt"));
  std::string first;
  std::getline(in, first);
  const std::string want = "(commit " + (head.empty() ? std::string("unknown") : head);
  EXPECT_NE(first.find(want), std::string::npos) << first << " | HEAD " << head;
}

// ---- issue 10: TOML, synthetic specs and dumps refused with one line, nothing written ----------

// Every file left in `dir` whose name marks an output or a leftover (temp files, checkpoints).
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp.") != std::string::npos || n.find(".ckpt.") != std::string::npos ||
        n.rfind("out", 0) == 0)
      out.push_back(n);
  }
  return out;
}

void expect_one_line_error(const CliRun& r, const std::string& needle, const std::string& what) {
  EXPECT_EQ(r.code, 2) << what << " -> " << r.err;
  EXPECT_EQ(r.err.rfind("attnsim: error: ", 0), 0u) << what << " -> " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << " -> " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << what << " -> " << r.err;
  EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << what;
  EXPECT_EQ(r.err.find("std::"), std::string::npos) << what;
}

TEST_F(Cli, MalformedTomlNamesFileLineAndColumn) {
  struct Bad {
    std::string text, needle;
  } sweeps[] = {
      // An unclosed array: the old reader dropped both lines, then said "needs --input".
      {"methods = [\"golden\"\nsynthetic = [\"normal:nq=8,d=4\"]\n", ":2:1: "},
      {"methods = [\"golden\"]\nsynthetic = [\"normal:nq=8,d=4\"]\nmethods = [\"flash\"]\n", ":3:"},
      {"mehtods = [\"golden\"]\n", ":1:1: unknown key 'mehtods' in the config (allowed: methods,"},
      {"methods = [\"golden\"]\nsynthetic = [\"normal:nq=8,d=4\"]\nseeds = \"2\"\n",
       ":3:9: seeds must be an integer, not a string"},
      {"methods = \"golden\"\nsynthetic = [\"normal:nq=8,d=4\"]\n",
       ":1:11: methods must be an array"},
      {"methods = [\"golden\"]\nsynthetic = [\"normal:nq=8,d=4\"]\nallow_nonfinite = \"yes\"\n",
       ":3:19: allow_nonfinite must be true or false"},
      {"methods = [\"golden\"]\nsynthetic = [\"normal:nq=8,d=4\"]\n[other]\nx = 1\n",
       ":3:2: unknown key 'other'"},
  };
  for (const auto& b : sweeps) {
    std::ofstream(path("c.toml")) << b.text;
    const CliRun r =
        run("sweep --quiet --config " + path("c.toml") + " --output " + path("out.h5"));
    expect_one_line_error(r, "attnsim: error: " + path("c.toml") + b.needle, b.text);
    EXPECT_TRUE(leftovers(dir_).empty()) << b.text;
  }
  const std::string base = std::string(ATTNSIM_SOURCE_DIR) + "/data/baselines/flash_small.h5";
  Bad rules[] = {
      {"[rel_fro\nrel = 1e-6\n", ":1:9: "},
      {"[rel_fro]\nrel = \"1e-6\"\n", ":2:7: rel must be a number, not a string"},
      {"[rel_fro]\nrel = -1\n", ":2:7: [rel_fro] rel must be a finite number >= 0"},
      {"[rel_fro]\ntolerance = 1\n", ":2:1: unknown key 'tolerance' in [rel_fro] (allowed: abs,"},
      {"key = \"method\"\n[rel_fro]\nrel = 1\n", ":1:7: key must be an array of strings"},
      {"[rel_fro]\nbetter = \"up\"\n", ":2:10: [rel_fro] better must be"},
  };
  for (const auto& b : rules) {
    std::ofstream(path("g.toml")) << b.text;
    const CliRun r =
        run("gate --baseline " + base + " --results " + base + " --rules " + path("g.toml"));
    expect_one_line_error(r, "attnsim: error: " + path("g.toml") + b.needle, b.text);
  }
}

TEST_F(Cli, BadSyntheticSpecsWriteNothing) {
  struct Bad {
    std::string spec, needle;
  } cases[] = {
      {"normal:nq=8,nq=16,d=4", "key 'nq' given twice"},
      {"normal:nq=8,d=4,sigma=-1", "sigma must be >= 0"},
      {"uniform:nq=8,d=4,lo=2,hi=1", "lo must be <= hi"},
      {"outlier:nq=8,d=4,frac=1.5", "frac must be in [0, 1]"},
      {"normal:nq=8,d=4,causal=5", "causal must be 0 or 1"},
      {"kbias:nq=8,d=4,bias=nan", "not a finite number"},
      {"normal:nq=0,d=4", "nq must be a positive integer"},
      // The old behaviour: exit 0 with all-NaN metrics (sweep) or a dump full of Inf (synth).
      {"normal:nq=8,d=4,sigma=1e39", "overflow"},
  };
  for (const auto& c : cases) {
    for (const std::string& cmd :
         {"synth --synthetic " + c.spec + " --out " + path("out.h5"),
          "sweep --quiet --methods golden --synthetic " + c.spec + " --output " + path("out.h5"),
          "run --method golden --synthetic " + c.spec + " --output " + path("out.h5")}) {
      expect_one_line_error(run(cmd), c.needle, cmd);
      EXPECT_TRUE(leftovers(dir_).empty()) << cmd;
    }
  }
}

using testio::first_chunk;

TEST_F(Cli, CorruptDumpsAreOneLineWithoutTheHdf5Stack) {
  ASSERT_EQ(run("synth --synthetic normal:hq=2,nq=64,d=16 --out " + path("d.h5")).code, 0);
  ASSERT_EQ(run("run --method golden --input " + path("d.h5") + " --output " + path("r.h5")).code,
            0);
  // A flipped bit in k's stored bytes: Fletcher-32 catches it (before: read silently when the
  // dataset was uncompressed).
  fs::copy_file(path("d.h5"), path("flip.h5"));
  {
    const auto [addr, size] = first_chunk(path("flip.h5"), "k");
    ASSERT_GT(size, 8u);
    std::fstream io(path("flip.h5"), std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(addr + size / 2));
    char c = 0;
    io.read(&c, 1);
    c = char(c ^ 0x04);
    io.seekp(std::streamoff(addr + size / 2));
    io.write(&c, 1);
  }
  const std::string mismatch =
      "checksum mismatch in dataset 'k' of '" + path("flip.h5") + "' (the file is corrupt)";
  CliRun r = run("run --method golden --input " + path("flip.h5") + " --output " + path("out.h5"));
  expect_one_line_error(r, mismatch, "run");
  EXPECT_EQ(run("compare " + path("flip.h5") + " " + path("d.h5")).err.find("HDF5-DIAG"),
            std::string::npos);
  // Read on OpenMP worker threads (HDF5's error printing is per thread).
  fs::copy_file(path("d.h5"), path("d2.h5"));  // a third input (the same file twice is a warning)
  r = run("sweep --quiet --methods golden --input " + path("d.h5") + " --input " + path("flip.h5") +
          " --input " + path("d2.h5") + " --output " + path("out.h5"));
  expect_one_line_error(r, mismatch, "sweep");
  // Truncated, not HDF5, a bfloat16 attribute on float32.
  fs::copy_file(path("d.h5"), path("trunc.h5"));
  fs::resize_file(path("trunc.h5"), fs::file_size(path("d.h5")) / 2);
  r = run("run --method golden --input " + path("trunc.h5") + " --output " + path("out.h5"));
  expect_one_line_error(r, "'" + path("trunc.h5") + "'", "truncated");
  std::ofstream(path("junk.h5")) << "not hdf5";
  r = run("run --method golden --input " + path("junk.h5") + " --output " + path("out.h5"));
  expect_one_line_error(r, "not a readable HDF5 file", "junk");
  {
    H5Writer w(path("bf.h5"));
    const std::vector<float> x(16, 0.5f);
    for (const char* n : {"q", "k", "v"}) w.write_f32(n, {1, 1, 4, 4}, x.data());
    w.attr_string("k", "dtype", "bfloat16");
    w.commit();
  }
  r = run("run --method golden --input " + path("bf.h5") + " --output " + path("out.h5"));
  expect_one_line_error(r,
                        "dataset 'k' in '" + path("bf.h5") +
                            "' has the attribute dtype = \"bfloat16\" but holds float32",
                        "bf16");
  EXPECT_TRUE(leftovers(dir_).empty());
}


TEST_F(Cli, LeanPlanContract) {
  // MHA decode on an H100 (ORT's only caller): 8 heads of 4,096 keys -> 32 n-tiles per head,
  // 256 tiles, grid min(128, ceil(32·256/32)) = 128, two tiles per CTA (lean_api.cc).
  const CliRun r = run("lean plan --batch 1 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 4096 "
                       "--head-dim 128 --out " + path("plan.csv"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream out(path("stdout.txt"));
  const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  for (const char* line : {"grid 128\n", "max_tiles_per_tb 2\n", "high_load_tbs 128\n",
                           "num_splits 17\n", "tiles_per_head 32\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in " << text;
  std::ifstream csv(path("plan.csv"));
  std::string header, first;
  std::getline(csv, header);
  std::getline(csv, first);
  EXPECT_EQ(header, "cta,batch,head,m_block,n_tile_begin,n_tile_end,host,finisher,split");
  EXPECT_EQ(first, "0,0,0,0,0,2,1,0,0");
  int rows = 0;
  for (std::string l; std::getline(csv, l);) ++rows;
  EXPECT_EQ(rows + 1, 128);
  // GQA prefill: ORT's kernel leaves heads out, and says so.
  ASSERT_EQ(run("lean plan --batch 1 --heads-q 8 --heads-kv 2 --len-q 64 --len-kv 64 --head-dim 64 "
                "--causal --out " + path("gqa.csv")).code, 0);
  std::ifstream out2(path("stdout.txt"));
  const std::string t2((std::istreambuf_iterator<char>(out2)), std::istreambuf_iterator<char>());
  EXPECT_NE(t2.find("warning: ONNX Runtime's kernel: GQA prefill"), std::string::npos) << t2;
}

TEST_F(Cli, LeanPlanBadShapesAreOneLineErrors) {
  for (const std::string args :
       {"--batch 0 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 10 --head-dim 128",
        "--batch 1 --heads-q 6 --heads-kv 4 --len-q 1 --len-kv 10 --head-dim 128",
        "--batch 1 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 10 --head-dim 96",
        "--batch 1 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 0 --head-dim 128",
        "--batch 1 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 10 --head-dim 128 --sms 0",
        "--batch 2 --heads-q 8 --heads-kv 8 --len-q 1 --len-kv 10 --head-dim 128 --ragged 5,x"}) {
    const CliRun r = run("lean plan " + args + " --out " + path("p.csv"));
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("attnsim: error: ", 0), 0u) << r.err;
    EXPECT_FALSE(fs::exists(path("p.csv"))) << args;
  }
}

// ---- issue 28: what a newcomer hit --------------------------------------------------------------

TEST_F(Cli, SweepConfigPathsAreRelativeToTheConfigFile) {
  fs::create_directories(dir_ / "cfg");
  synth("cfg/d.h5");
  std::ofstream(path("cfg/c.toml")) << "methods = [\"flash\"]\ninput = [\"d.h5\"]\n"
                                       "output = \"r.h5\"\n";
  // Run from another directory: d.h5 and r.h5 are the config's neighbours.
  const CliRun r = run("sweep --quiet --config " + path("cfg/c.toml"));
  ASSERT_EQ(r.code, 0) << r.err;
  H5Reader h(path("cfg/r.h5"));
  EXPECT_EQ(h.read_strings("input"), std::vector<std::string>{path("cfg/d.h5")});
}

TEST_F(Cli, SweepRunsDuplicatesOnceAndSaysSo) {
  synth("d.h5");
  const CliRun r = run("sweep --quiet --methods flash,flash:acc=fp32,golden --input " +
                       path("d.h5") + " --input " + (dir_ / "." / "d.h5").string() +
                       " --synthetic normal:nq=8 --synthetic normal:nq=8 --output " + path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("attnsim: warning: --methods gives flash twice"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("attnsim: warning: --input gives"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attnsim: warning: --synthetic gives normal:nq=8"), std::string::npos)
      << r.err;
  H5Reader h(path("r.h5"));
  EXPECT_EQ(h.read_strings("label").size(), 4u);  // 2 methods x 2 inputs
}

TEST_F(Cli, NestedGroupsRunAndFileGroupSelectsOne) {
  {
    H5Writer w(path("n.h5"));
    const std::vector<float> x(1 * 2 * 8 * 4, 0.25f);
    for (const std::string g : {"blocks/0/", "blocks/1/", "top/"}) {
      for (const char* t : {"q", "k", "v"}) w.write_f32(g + t, {1, 2, 8, 4}, x.data());
    }
    w.commit();
  }
  CliRun r =
      run("run --quiet --method flash --input " + path("n.h5") + " --output " + path("o.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  {
    H5Reader h(path("o.h5"));
    EXPECT_TRUE(h.exists("blocks/0/o"));
    EXPECT_TRUE(h.exists("blocks/1/o"));
    EXPECT_TRUE(h.exists("top/o"));
  }
  r = run("sweep --quiet --methods flash --input " + path("n.h5") + ":blocks/1 --output " +
          path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  H5Reader h(path("r.h5"));
  EXPECT_EQ(h.read_strings("input"), std::vector<std::string>{path("n.h5") + ":blocks/1"});
}

TEST_F(Cli, DatasetAttributesThatDisagreeAreRefused) {
  {
    H5Writer w(path("a.h5"));
    const std::vector<float> x(1 * 1 * 8 * 4, 0.5f);
    for (const char* t : {"q", "k", "v"}) w.write_f32(t, {1, 1, 8, 4}, x.data());
    w.attr_i64("q", "causal", 1);  // the slip: on the dataset, not the root
    w.commit();
  }
  const CliRun r = run("run --quiet --method flash --input " + path("a.h5"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("on dataset 'q'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("non-causal"), std::string::npos) << r.err;
}

TEST_F(Cli, SkippedMethodsResolvedValuesAndTheSummaryTable) {
  synth("d.h5", ",causal=1");
  const CliRun r =
      run("sweep --methods flash,sage2,splitkv:splits=1000,kivi:mode=decode,group=16,"
          "residual=16 --synthetic normal:nq=8,d=200 --input " +
          path("d.h5") + " --skip-unsupported --summary rel_l1 --output " + path("r.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string out = read_text("stdout.txt");
  EXPECT_NE(out.find("rel_l1 against FP64 golden attention"), std::string::npos) << out;
  EXPECT_NE(out.find("n/a"), std::string::npos) << out;
  EXPECT_NE(out.find("head_dim 200 > 128"), std::string::npos) << out;
  H5Reader h(path("r.h5"));
  const auto label = h.read_strings("label"), skipped = h.read_strings("skipped"),
             resolved = h.read_strings("resolved");
  ASSERT_EQ(label.size(), 8u);                                // 4 methods x (the dump, the spec)
  EXPECT_TRUE(skipped[0].empty());                            // flash on the dump
  EXPECT_EQ(resolved[2], "block_n=256,dtype=fp16,splits=1");  // splits=1000 on 16 keys: one tile
  EXPECT_NE(resolved[3].find("mode=decode"), std::string::npos) << resolved[3];
  EXPECT_NE(skipped[5].find("head_dim 200 > 128"), std::string::npos) << skipped[5];  // sage2
  EXPECT_TRUE(std::isnan(h.read_f64("rel_l1")[5]));
  EXPECT_NE(r.err.find("attnsim: warning: splitkv: every block ran as one split"),
            std::string::npos)
      << r.err;
  // The row-scaled ULP columns are there, and small for FP32 flash.
  EXPECT_LT(h.read_f64("ulp_row_p99")[0], 64.0);
}

TEST_F(Cli, RunWritesResolvedValuesAndKiviWarnsInPrefill) {
  synth("d.h5");
  CliRun r =
      run("run --quiet --method turbo --input " + path("d.h5") + " --output " + path("o.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  {
    H5Reader h(path("o.h5"));
    EXPECT_EQ(h.attr_string("o", "resolved_mode"), "prefill");  // non-causal: Algorithm 1
    EXPECT_NE(h.attr_string("o", "resolved").find("mode=prefill"), std::string::npos);
  }
  r = run("run --quiet --method kivi:group=16,residual=16 --input " + path("d.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("attnsim: warning: kivi ran in prefill mode"), std::string::npos) << r.err;
}

TEST_F(Cli, MessagesNameWhatTheUserGave) {
  // The limit's source; no 256 MiB floor under a trivial run.
  CliRun r = run("run --quiet --method flash --synthetic normal:nq=8 --max-memory 1k");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("(--max-memory)"), std::string::npos) << r.err;
  r = run("run --quiet --method flash --synthetic normal:nq=8 --max-memory 40M");
  EXPECT_EQ(r.code, 0) << r.err;
  // One point, one thread: no "1 points".
  r = run("sweep --quiet --methods flash --synthetic normal:nq=8 --max-memory 20k");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find("1 points"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--grid"), std::string::npos) << r.err;
  r = run("sweep --quiet --methods flash --synthetic normal:nq=8 --output " + path("one.h5"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_text("stdout.txt").find("(1 point, 1 computed"), std::string::npos)
      << read_text("stdout.txt");
  // splitkv speaks in its own name and the input's terms.
  r = run("run --quiet --method splitkv --synthetic normal:nq=8,d=200");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.find("--head-dim"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("splitkv: the input's head_dim 200"), std::string::npos) << r.err;
  // A 10,000-character method string is not echoed whole.
  r = run("run --quiet --method " + std::string(10000, 'x') + " --synthetic normal:nq=8");
  EXPECT_EQ(r.code, 2);
  EXPECT_LT(r.err.size(), 600u);
}

// turbo's head_bits: a free-text option checked by the method (one line, exit 2, before any
// computation), one digit per KV head; it changes the decode rows it should and no others.
TEST_F(Cli, TurboHeadBitsAreCheckedAndApplied) {
  const std::string in = " --synthetic normal:hq=2,hkv=2,nq=96,d=64,causal=1";
  for (const char* bad : {"head_bits=", "head_bits=4", "head_bits=43/44", "head_bits=44/4",
                          "head_bits=4/4/4", "head_bits=44/44,n_h=1", "head_bits=44/44,kv_bits=2"}) {
    const CliRun r = run(std::string("run --quiet --method turbo:") + bad + in);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("head_bits"), std::string::npos) << bad << ": " << r.err;
  }
  // Three digits for two KV heads: refused at run time, still one line.
  CliRun r = run("run --quiet --method turbo:head_bits=444/444" + in);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("one value per KV head"), std::string::npos) << r.err;
  // Every head at 4 bits is kv_bits=4; a 2-bit head differs.
  auto out = [&](const std::string& m) {
    const CliRun x = run("run --quiet --method " + m + in + " --out " + path("o.h5"));
    EXPECT_EQ(x.code, 0) << m << ": " << x.err;
    return H5Reader(path("o.h5")).read_f64("o");
  };
  const std::vector<double> a = out("turbo:mode=decode,prefill=64,head_bits=44/44");
  const std::vector<double> b = out("turbo:mode=decode,prefill=64,kv_bits=4");
  const std::vector<double> c = out("turbo:mode=decode,prefill=64,head_bits=42/44");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace attnsim
