// numerics/special: the rcp, ex2 and lg2 .approx.ftz models against the recordings of their tables
// and against recordings they were not derived from: the cvt_probe's full outputs on the
// 655,360-input sample (its digests over all 2^32 inputs: cvt_h100_long_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/float32.hpp"
#include "numerics/digest.hpp"
#include "numerics/special.hpp"

namespace attnsim {
namespace {

const std::string kDir = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/";

TEST(RcpApproxFtzH100, DeltaTableReproducesTheRecordedTable) {
  H5Reader r(kDir + "rcp_table_h100.h5");
  const std::vector<std::int64_t> t = r.read_i64("rcp_table");
  ASSERT_EQ(t.size(), std::size_t{1} << 23);
  const RcpApproxFtz& rcp = RcpApproxFtz::h100();
  for (std::uint32_t m = 0; m < (1u << 23); ++m) ASSERT_EQ(rcp.table(m), std::uint32_t(t[m])) << m;
}

TEST(RcpApproxFtzH100, MatchesTheCvtProbeSample) {
  H5Reader r(kDir + "cvt_sample.h5");
  const std::vector<std::int64_t> in = r.read_i64("input"), out = r.read_i64("rcp_approx_ftz");
  const RcpApproxFtz& rcp = RcpApproxFtz::h100();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t got = rcp.bits(std::uint32_t(in[i]));
    if (got != std::uint32_t(out[i]) && ++bad <= 5) {
      ADD_FAILURE() << "input 0x" << std::hex << in[i] << ": H100 0x" << out[i] << ", model 0x"
                    << got;
    }
  }
  EXPECT_EQ(bad, 0u) << in.size() << " recorded inputs";
}

TEST(Ex2ApproxFtzH100, StepTablesReproduceTheRecordedTables) {
  H5Reader r(kDir + "ex2_lg2_tables_h100.h5");
  const std::vector<std::int64_t> t = r.read_i64("ex2_table");
  ASSERT_EQ(t.size(), std::size_t{1} << 24);
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  for (std::uint32_t f = 0; f < (1u << 23); ++f) {
    ASSERT_EQ(ex2.table(false, f), std::uint32_t(t[f])) << f;
    ASSERT_EQ(ex2.table(true, f), std::uint32_t(t[(std::size_t{1} << 23) + f])) << f;
  }
}

TEST(Ex2ApproxFtzH100, MatchesTheCvtProbeSample) {
  H5Reader r(kDir + "cvt_sample.h5");
  const std::vector<std::int64_t> in = r.read_i64("input"), out = r.read_i64("ex2_approx_ftz");
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t got = ex2.bits(std::uint32_t(in[i]));
    if (got != std::uint32_t(out[i]) && ++bad <= 5) {
      ADD_FAILURE() << "input 0x" << std::hex << in[i] << ": H100 0x" << out[i] << ", model 0x"
                    << got;
    }
  }
  EXPECT_EQ(bad, 0u) << in.size() << " recorded inputs";
}

TEST(Lg2ApproxFtzH100, FixedLogReproducesTheRecordedTables) {
  // The two recordings the table was packed from: lg2(1.m) and lg2(0.5 * 1.m).
  H5Reader r0(kDir + "ex2_lg2_tables_h100.h5"), r1(kDir + "lg2_half_table_h100.h5");
  const std::vector<std::int64_t> t0 = r0.read_i64("lg2_table"), t1 = r1.read_i64("lg2_half_table");
  ASSERT_EQ(t0.size(), std::size_t{1} << 23);
  ASSERT_EQ(t1.size(), std::size_t{1} << 23);
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    ASSERT_EQ(lg2.bits(0x3F800000u | m), std::uint32_t(t0[m])) << m;
    ASSERT_EQ(lg2.bits(0x3F000000u | m), std::uint32_t(t1[m])) << m;
  }
}

TEST(Lg2ApproxFtzH100, MatchesTheCvtProbeSample) {
  H5Reader r(kDir + "cvt_sample.h5");
  const std::vector<std::int64_t> in = r.read_i64("input"), out = r.read_i64("lg2_approx_ftz");
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t got = lg2.bits(std::uint32_t(in[i]));
    if (got != std::uint32_t(out[i]) && ++bad <= 5) {
      ADD_FAILURE() << "input 0x" << std::hex << in[i] << ": H100 0x" << out[i] << ", model 0x"
                    << got;
    }
  }
  EXPECT_EQ(bad, 0u) << in.size() << " recorded inputs";
}

TEST(Lg2ApproxFtzH100, GoldenCases) {
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  EXPECT_EQ(lg2.bits(0x3F800000u), 0x00000000u);  // x = 1: +0 (special case; L(0) >= 2^-24)
  EXPECT_EQ(lg2.bits(0x40000000u), 0x3F800000u);  // x = 2: 1 + L(0) truncated = 1
  // x = 0.5: -(1 - L(0) - 2^-36) truncated to 24 bits = -(1 - 2^-23), not -1 (ones' complement)
  EXPECT_EQ(lg2.bits(0x3F000000u), 0xBF7FFFFEu);
  EXPECT_EQ(lg2.bits(0x00800000u), 0xC2FBFFFFu);  // x = 2^-126: -(126 - 2^-17)
  EXPECT_EQ(lg2.bits(0x00000000u), 0xFF800000u);  // +0 -> -Inf
  EXPECT_EQ(lg2.bits(0x80000000u), 0xFF800000u);  // -0 -> -Inf
  EXPECT_EQ(lg2.bits(0x007FFFFFu), 0xFF800000u);  // subnormal, flushed -> -Inf
  EXPECT_EQ(lg2.bits(0xBF800000u), 0x7FFFFFFFu);  // -1 -> canonical NaN
  EXPECT_EQ(lg2.bits(0xFF800000u), 0x7FFFFFFFu);  // -Inf -> NaN
  EXPECT_EQ(lg2.bits(0x7F800000u), 0x7F800000u);  // +Inf -> +Inf
  EXPECT_EQ(lg2.bits(0x7FC00001u), 0x7FFFFFFFu);  // NaN -> canonical NaN
}

TEST(Lg2ApproxFtzH100, OneFp32AdditionOfTheTableDoesNotFit) {
  // Negative control: e + lg2(1.m) rounded by one FP32 addition toward zero (the closest
  // single-rounding alternative, 27,432,120 misses over all inputs on the GPU) misses part of the
  // sample; the fixed-point model above misses none.
  H5Reader r(kDir + "cvt_sample.h5");
  const std::vector<std::int64_t> in = r.read_i64("input"), out = r.read_i64("lg2_approx_ftz");
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  std::size_t misses = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t x = std::uint32_t(in[i]), e = (x >> 23) & 0xFF;
    if ((x >> 31) || e == 0 || e == 0xFF) continue;
    const double sum =
        double(int(e) - 127) + double(f32_from_bits(lg2.bits(0x3F800000u | (x & 0x7FFFFF))));
    float rz = float(sum);  // nearest; step toward zero if it rounded away
    if (std::fabs(double(rz)) > std::fabs(sum)) rz = std::nextafter(rz, 0.0f);
    misses += f32_bits(rz) != std::uint32_t(out[i]);
  }
  EXPECT_GT(misses, 1000u);
}

// ex2/rcp/lg2.approx.f32 without .ftz (range scaling + the same MUFU) against every recorded
// sample output, and a control: the plausible alternative ex2.ftz(x + 24) · 2^-24 for subnormal
// results disagrees with the H100 (by 1 ulp on 18 sample inputs).
TEST(ApproxNoFtzH100, MatchesTheCvtProbeSample) {
  H5Reader r(kDir + "cvt_sample.h5");
  const std::vector<std::int64_t> in = r.read_i64("input");
  struct Fn {
    const char* name;
    std::uint32_t (*model)(std::uint32_t);
  };
  const Fn fns[] = {{"ex2_approx", [](std::uint32_t x) { return ex2_approx_bits(x); }},
                    {"rcp_approx", [](std::uint32_t x) { return rcp_approx_bits(x); }},
                    {"lg2_approx", [](std::uint32_t x) { return lg2_approx_bits(x); }}};
  for (const Fn& fn : fns) {
    const std::vector<std::int64_t> out = r.read_i64(fn.name),
                                    ftz = r.read_i64(std::string(fn.name) + "_ftz");
    std::size_t bad = 0, differs_from_ftz = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint32_t got = fn.model(std::uint32_t(in[i]));
      differs_from_ftz += out[i] != ftz[i];
      if (got != std::uint32_t(out[i]) && ++bad <= 5) {
        ADD_FAILURE() << fn.name << " input 0x" << std::hex << in[i] << ": H100 0x" << out[i]
                      << ", model 0x" << got;
      }
    }
    EXPECT_EQ(bad, 0u) << fn.name;
    EXPECT_GT(differs_from_ftz, 250u) << fn.name << ": the sample must exercise the scaled paths";
  }
  const std::vector<std::int64_t> out = r.read_i64("ex2_approx");
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  std::size_t alt_bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const float x = f32_from_bits(std::uint32_t(in[i]));
    if (!(x < -126.0f)) continue;
    const float alt = ex2(x + 24.0f) * 0x1p-24f;
    alt_bad += f32_bits(alt) != std::uint32_t(out[i]);
  }
  EXPECT_GT(alt_bad, 0u);
}

TEST(RcpApproxFtzH100, FastDivisionIsAMultiplyByTheReciprocal) {
  // div.approx.ftz(a, b) = FMUL.FTZ(a, rcp(b)), measured on the H100 (special_probe_log.txt);
  // here the composition's own invariants: exact for powers of two, within 2 ulp of a/b.
  EXPECT_EQ(div_approx_ftz(3.0f, 2.0f), 1.5f);
  EXPECT_EQ(div_approx_ftz(1.0f, 0.0f), INFINITY);
  EXPECT_EQ(fmul_ftz(1e-20f, 1e-20f), 0.0f);               // subnormal result flushed
  EXPECT_EQ(std::signbit(fmul_ftz(-1e-45f, 1.0f)), true);  // subnormal input flushed, sign kept
  for (float a : {1.0f, 3.0f, 0.1f, 7.77f}) {
    for (float b : {3.0f, 0.7f, 1e-3f, 123.456f}) {
      const float q = div_approx_ftz(a, b);
      EXPECT_LE(std::fabs(double(q) - double(a) / double(b)),
                2.5 * std::ldexp(1.0, std::ilogb(q) - 23));
    }
  }
}

}  // namespace
}  // namespace attnsim
