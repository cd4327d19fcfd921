// formats/ conversions against the H100's cvt instructions, recorded in data/hw/h100/cvt_sample.h5
// (every FP32 upper half with ten low halves on and around the rounding points: 655,360 inputs).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/digest.hpp"

namespace attnsim {
namespace {

const std::string kSample = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/cvt_sample.h5";

// The model of each recorded instruction: formats/ with the policy that names it.
std::uint32_t model(const std::string& op, std::uint32_t bits) {
  constexpr Policy kRn{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRz{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRm{Round::kDown, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRp{Round::kUp, Overflow::kInf, NanEncoding::kCuda};
  if (op == "e4m3_satfinite") return convert<e4m3fn, fp32>(bits, kCudaSatfinite);
  if (op == "e5m2_satfinite") return convert<e5m2, fp32>(bits, kCudaSatfinite);
  if (op == "bf16_rn") return convert<bf16, fp32>(bits, kRn);
  if (op == "bf16_rz") return convert<bf16, fp32>(bits, kRz);
  if (op == "f16_rn") return convert<fp16, fp32>(bits, kRn);
  if (op == "f16_rz") return convert<fp16, fp32>(bits, kRz);
  if (op == "f16_rm") return convert<fp16, fp32>(bits, kRm);
  if (op == "f16_rp") return convert<fp16, fp32>(bits, kRp);
  if (op == "s8_rni_sat") return std::uint32_t(cvt_rni_sat_s8(f32_from_bits(bits))) & 0xFFu;
  ADD_FAILURE() << "no model for " << op;
  return 0;
}

class CvtH100 : public ::testing::TestWithParam<const char*> {};

TEST_P(CvtH100, SampleMatchesBitForBit) {
  const std::string op = GetParam();
  H5Reader r(kSample);
  const std::vector<std::int64_t> input = r.read_i64("input");
  const std::vector<std::int64_t> hw = r.read_i64(op);
  ASSERT_EQ(input.size(), std::size_t(kSampleSize));
  ASSERT_EQ(hw.size(), input.size());
  // The recording's inputs are the documented sample (guards against a stale or foreign file).
  for (std::uint32_t i = 0; i < kSampleSize; i += 997)
    ASSERT_EQ(std::uint32_t(input[i]), sample_input(i));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::uint32_t bits = std::uint32_t(input[i]);
    const std::uint32_t want = std::uint32_t(hw[i]);
    const std::uint32_t got = model(op, bits);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << op << " input 0x" << std::hex << bits << ": H100 0x" << want
                    << ", attnsim 0x" << got;
    }
  }
  EXPECT_EQ(mismatches, 0u) << op << " over " << input.size() << " recorded inputs";
}

INSTANTIATE_TEST_SUITE_P(AllConversions, CvtH100,
                         ::testing::Values("e4m3_satfinite", "e5m2_satfinite", "bf16_rn", "bf16_rz",
                                           "f16_rn", "f16_rz", "f16_rm", "f16_rp", "s8_rni_sat"));

// The recorded NaN encodings are CUDA's (NanEncoding::kCuda): sign dropped, all-ones magnitude.
TEST(CvtH100, NanEncodingsAreCanonicalAllOnes) {
  H5Reader r(kSample);
  const std::vector<std::int64_t> input = r.read_i64("input");
  const std::vector<std::int64_t> e4 = r.read_i64("e4m3_satfinite"),
                                  e5 = r.read_i64("e5m2_satfinite"), b16 = r.read_i64("bf16_rn"),
                                  h16 = r.read_i64("f16_rn");
  int nans = 0;
  for (std::size_t i = 0; i < input.size(); ++i) {
    if ((input[i] & 0x7FFFFFFF) <= 0x7F800000) continue;
    ++nans;
    EXPECT_EQ(e4[i], 0x7F);
    EXPECT_EQ(e5[i], 0x7F);
    EXPECT_EQ(b16[i], 0x7FFF);
    EXPECT_EQ(h16[i], 0x7FFF);
  }
  EXPECT_GT(nans, 2000);  // both signs, quiet and signalling payloads
}

}  // namespace
}  // namespace attnsim
