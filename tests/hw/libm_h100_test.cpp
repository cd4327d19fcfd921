// numerics/special: CUDA's expf, logf, __expf and __logf models (expf_libdevice, logf_libdevice,
// fast_expf, fast_logf) against the H100's outputs on libm_probe's 65,536-input adversarial sample
// in three builds (data/hw/h100/libm/libm_h100.h5; over all 2^32 inputs the probe found no
// mismatch either: data/hw/h100/libm/README.md), bit for bit, with controls showing the sample
// separates the variants.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/float32.hpp"
#include "numerics/special.hpp"

namespace attnsim {
namespace {

const std::string kFile = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/libm/libm_h100.h5";

using Model = std::uint32_t (*)(std::uint32_t);

std::uint32_t expf_ieee(std::uint32_t x) {
  return f32_bits(expf_libdevice(f32_from_bits(x), false));
}
std::uint32_t expf_ftz(std::uint32_t x) { return f32_bits(expf_libdevice(f32_from_bits(x), true)); }
std::uint32_t logf_ieee(std::uint32_t x) {
  return f32_bits(logf_libdevice(f32_from_bits(x), false));
}
std::uint32_t logf_ftz(std::uint32_t x) { return f32_bits(logf_libdevice(f32_from_bits(x), true)); }
std::uint32_t fexp_ieee(std::uint32_t x) { return f32_bits(fast_expf(f32_from_bits(x), false)); }
std::uint32_t fexp_ftz(std::uint32_t x) { return f32_bits(fast_expf(f32_from_bits(x), true)); }
std::uint32_t flog_ieee(std::uint32_t x) { return f32_bits(fast_logf(f32_from_bits(x), false)); }
std::uint32_t flog_ftz(std::uint32_t x) { return f32_bits(fast_logf(f32_from_bits(x), true)); }

struct Case {
  const char* dataset;
  Model model;
};

// What each build compiles each function to (the PTX and SASS in data/hw/h100/libm): without
// --use_fast_math the libdevice routines, IEEE or .ftz; with it, expf and logf become __expf and
// __logf, .ftz.
const Case kCases[] = {
    {"plain/expf", expf_ieee},   {"plain/logf", logf_ieee}, {"plain/__expf", fexp_ieee},
    {"plain/__logf", flog_ieee}, {"ftz/expf", expf_ftz},    {"ftz/logf", logf_ftz},
    {"ftz/__expf", fexp_ftz},    {"ftz/__logf", flog_ftz},  {"fast/expf", fexp_ftz},
    {"fast/logf", flog_ftz},     {"fast/__expf", fexp_ftz}, {"fast/__logf", flog_ftz},
};

// Outputs of `model` that differ from the recorded dataset.
std::size_t misses(const H5Reader& r, const std::vector<std::int64_t>& in, const char* dataset,
                   Model model, bool report) {
  const std::vector<std::int64_t> out = r.read_i64(dataset);
  EXPECT_EQ(out.size(), in.size()) << dataset;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size() && i < out.size(); ++i) {
    const std::uint32_t got = model(std::uint32_t(in[i]));
    if (got != std::uint32_t(out[i]) && ++bad <= 5 && report) {
      ADD_FAILURE() << dataset << " input 0x" << std::hex << in[i] << ": H100 0x" << out[i]
                    << ", model 0x" << got;
    }
  }
  return bad;
}

TEST(LibmH100, ModelsMatchTheRecordingBitForBit) {
  H5Reader r(kFile);
  const std::vector<std::int64_t> in = r.read_i64("input");
  ASSERT_EQ(in.size(), 65536u);
  for (const Case& c : kCases) EXPECT_EQ(misses(r, in, c.dataset, c.model, true), 0u) << c.dataset;
}

// Controls: the sample tells the IEEE branch from the .ftz one (subnormal results and inputs), the
// libdevice routines from the MUFU-only ones, and the directed rounding of expf's FFMA.RM from
// round to nearest.
TEST(LibmH100, TheSampleSeparatesTheVariants) {
  H5Reader r(kFile);
  const std::vector<std::int64_t> in = r.read_i64("input");
  EXPECT_GT(misses(r, in, "plain/expf", expf_ftz, false), 1000u);
  EXPECT_GT(misses(r, in, "ftz/expf", expf_ieee, false), 1000u);
  EXPECT_GT(misses(r, in, "plain/logf", logf_ftz, false), 1000u);
  EXPECT_GT(misses(r, in, "ftz/logf", logf_ieee, false), 1000u);
  EXPECT_GT(misses(r, in, "plain/__expf", fexp_ftz, false), 1000u);
  EXPECT_GT(misses(r, in, "plain/__logf", flog_ftz, false), 1000u);
  EXPECT_GT(misses(r, in, "plain/expf", fexp_ieee, false), 10000u);
  EXPECT_GT(misses(r, in, "plain/logf", flog_ieee, false), 10000u);
  // expf with FFMA.RN in place of FFMA.RM: the exponent n comes out one too high wherever 252·t
  // rounds up to the next integer, and ex2.approx then sees r − 1.
  const Model expf_rn = [](std::uint32_t xb) {
    const float x = f32_from_bits(xb);
    const float t0 = std::fma(x, f32_from_bits(0x3BBB989Du), 0.5f);
    const float t = std::isnan(t0) ? 0.0f : std::fmin(std::fmax(t0, 0.0f), 1.0f);
    const float j = std::fma(t, 252.0f, 12582913.0f);  // round to nearest
    const float n = j - 12583039.0f;
    const float rr =
        std::fma(x, f32_from_bits(0x32A57060u), std::fma(x, f32_from_bits(0x3FB8AA3Bu), -n));
    const float e = Ex2ApproxFtz::h100()(rr) * f32_from_bits(f32_bits(j) << 23);
    return std::isnan(e) ? 0x7FFFFFFFu : f32_bits(e);
  };
  EXPECT_GT(misses(r, in, "plain/expf", expf_rn, false), 1000u);
}

// Golden values: inputs of the sample and the bit patterns the H100 gave for them (the loop's in
// both the plain and the ftz build).
TEST(LibmH100, SpecialValues) {
  for (bool ftz : {false, true}) {
    EXPECT_EQ(f32_bits(expf_libdevice(0.0f, ftz)), 0x3F800000u);
    EXPECT_EQ(f32_bits(expf_libdevice(1.0f, ftz)), 0x402DF854u);   // e, correctly rounded
    EXPECT_EQ(f32_bits(expf_libdevice(-1.0f, ftz)), 0x3EBC5AB3u);  // 1/e + 1 ulp (RN: ...B2)
    EXPECT_EQ(f32_bits(expf_libdevice(INFINITY, ftz)), 0x7F800000u);
    EXPECT_EQ(f32_bits(expf_libdevice(-INFINITY, ftz)), 0x00000000u);
    EXPECT_EQ(f32_bits(expf_libdevice(f32_from_bits(0xFFC00000u), ftz)), 0x7FFFFFFFu);
    EXPECT_EQ(f32_bits(expf_libdevice(128.0f, ftz)), 0x7F800000u);  // past ln(FLT_MAX)
    EXPECT_EQ(f32_bits(logf_libdevice(1.0f, ftz)), 0x00000000u);
    EXPECT_EQ(f32_bits(logf_libdevice(0.0f, ftz)), 0xFF800000u);
    EXPECT_EQ(f32_bits(logf_libdevice(-0.0f, ftz)), 0xFF800000u);  // -0: -Inf, not NaN
    EXPECT_EQ(f32_bits(logf_libdevice(-1.0f, ftz)), 0x7FFFFFFFu);
    EXPECT_EQ(f32_bits(logf_libdevice(INFINITY, ftz)), 0x7F800000u);
    EXPECT_EQ(f32_bits(logf_libdevice(-INFINITY, ftz)), 0x7FFFFFFFu);
  }
  // x = -100: e^-100 = 26.55 · 2^-149 is subnormal: rounded by the IEEE FMUL, flushed under ftz.
  EXPECT_EQ(f32_bits(expf_libdevice(-100.0f, false)), 0x0000001Bu);
  EXPECT_EQ(f32_bits(expf_libdevice(-100.0f, true)), 0x00000000u);
  // The smallest subnormal: log(2^-149) in the IEEE branch, -Inf under ftz; its negative: NaN and
  // -Inf (the ftz compare and FMUL make it a -0).
  EXPECT_EQ(f32_bits(logf_libdevice(f32_from_bits(1), false)), 0xC2CE8ED0u);  // -103.27893
  EXPECT_EQ(f32_bits(logf_libdevice(f32_from_bits(1), true)), 0xFF800000u);
  EXPECT_EQ(f32_bits(logf_libdevice(f32_from_bits(0x80000001u), false)), 0x7FFFFFFFu);
  EXPECT_EQ(f32_bits(logf_libdevice(f32_from_bits(0x80000001u), true)), 0xFF800000u);
}

}  // namespace
}  // namespace attnsim
