// numerics/special: the rcp.approx.ftz model against recordings it was not derived from: the
// cvt_probe's full outputs on the 655,360-input sample and its digests over all 2^32 inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/hdf5_io.hpp"
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
      ADD_FAILURE() << "input 0x" << std::hex << in[i] << ": H100 0x" << out[i] << ", model 0x" << got;
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
      ADD_FAILURE() << "input 0x" << std::hex << in[i] << ": H100 0x" << out[i] << ", model 0x" << got;
    }
  }
  EXPECT_EQ(bad, 0u) << in.size() << " recorded inputs";
}

TEST(RcpApproxFtzH100, FastDivisionIsAMultiplyByTheReciprocal) {
  // div.approx.ftz(a, b) = FMUL.FTZ(a, rcp(b)), measured on the H100 (special_probe_log.txt);
  // here the composition's own invariants: exact for powers of two, within 2 ulp of a/b.
  EXPECT_EQ(div_approx_ftz(3.0f, 2.0f), 1.5f);
  EXPECT_EQ(div_approx_ftz(1.0f, 0.0f), INFINITY);
  EXPECT_EQ(fmul_ftz(1e-20f, 1e-20f), 0.0f);             // subnormal result flushed
  EXPECT_EQ(std::signbit(fmul_ftz(-1e-45f, 1.0f)), true);  // subnormal input flushed, sign kept
  for (float a : {1.0f, 3.0f, 0.1f, 7.77f}) {
    for (float b : {3.0f, 0.7f, 1e-3f, 123.456f}) {
      const float q = div_approx_ftz(a, b);
      EXPECT_LE(std::fabs(double(q) - double(a) / double(b)), 2.5 * std::ldexp(1.0, std::ilogb(q) - 23));
    }
  }
}

}  // namespace
}  // namespace attnsim
