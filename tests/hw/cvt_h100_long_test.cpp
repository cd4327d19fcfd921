// formats/ conversions against the H100 over ALL 2^32 FP32 inputs: recomputes the per-chunk
// digests that cuda_check/cvt_probe.cu recorded in data/hw/h100/cvt_summary.json.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/digest.hpp"
#include "numerics/special.hpp"

namespace attnsim {
namespace {

// The 256 digests recorded for one instruction (by its short name) in the probe's JSON.
std::vector<std::uint64_t> recorded_digests(const std::string& op) {
  std::ifstream in(std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/cvt_summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::size_t pos = text.find("\"file\": \"" + op + "\"");
  if (pos == std::string::npos) return {};
  pos = text.find("\"digests\": [", pos);
  const std::size_t end = text.find(']', pos);
  pos += 12;
  std::vector<std::uint64_t> out;
  while ((pos = text.find('"', pos)) < end) {
    const std::size_t close = text.find('"', pos + 1);
    out.push_back(std::stoull(text.substr(pos + 1, close - pos - 1), nullptr, 16));
    pos = close + 1;
  }
  return out;
}

template <class F>
void check_all_inputs(const std::string& op, F model) {
  const std::vector<std::uint64_t> want = recorded_digests(op);
  ASSERT_EQ(want.size(), std::size_t(kDigestChunks)) << op;
  std::vector<std::uint64_t> got(kDigestChunks, 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < kDigestChunks; ++c) {
    std::uint64_t sum = 0;
    const std::uint32_t base = std::uint32_t(c) << kDigestChunkBits;
    for (std::uint32_t k = 0; k < (1u << kDigestChunkBits); ++k) {
      sum += digest_term(base + k, model(base + k));
    }
    got[c] = sum;
  }
  int bad = 0;
  for (int c = 0; c < kDigestChunks; ++c) {
    if (got[c] != want[c] && ++bad <= 5) {
      ADD_FAILURE() << op << ": chunk " << c << " (inputs 0x" << std::hex
                    << (std::uint32_t(c) << 24) << "..) differs from the H100 recording";
    }
  }
  EXPECT_EQ(bad, 0) << op << ": chunks that differ from the H100";
}

constexpr Policy kRn{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
constexpr Policy kRz{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda};
constexpr Policy kRm{Round::kDown, Overflow::kInf, NanEncoding::kCuda};
constexpr Policy kRp{Round::kUp, Overflow::kInf, NanEncoding::kCuda};

TEST(CvtH100AllInputs, DigestParserReadsRecording) {
  EXPECT_EQ(recorded_digests("bf16_rn").size(), std::size_t(kDigestChunks));
  EXPECT_TRUE(recorded_digests("no_such_op").empty());
}
TEST(CvtH100AllInputs, E4m3Satfinite) {
  check_all_inputs("e4m3_satfinite", [](std::uint32_t b) {
    return std::uint32_t(convert<e4m3fn, fp32>(b, kCudaSatfinite));
  });
}
TEST(CvtH100AllInputs, E5m2Satfinite) {
  check_all_inputs("e5m2_satfinite", [](std::uint32_t b) {
    return std::uint32_t(convert<e5m2, fp32>(b, kCudaSatfinite));
  });
}
TEST(CvtH100AllInputs, Bf16Rn) {
  check_all_inputs("bf16_rn",
                   [](std::uint32_t b) { return std::uint32_t(convert<bf16, fp32>(b, kRn)); });
}
TEST(CvtH100AllInputs, Bf16Rz) {
  check_all_inputs("bf16_rz",
                   [](std::uint32_t b) { return std::uint32_t(convert<bf16, fp32>(b, kRz)); });
}
TEST(CvtH100AllInputs, F16Rn) {
  check_all_inputs("f16_rn",
                   [](std::uint32_t b) { return std::uint32_t(convert<fp16, fp32>(b, kRn)); });
}
TEST(CvtH100AllInputs, F16Rz) {
  check_all_inputs("f16_rz",
                   [](std::uint32_t b) { return std::uint32_t(convert<fp16, fp32>(b, kRz)); });
}
TEST(CvtH100AllInputs, F16Rm) {
  check_all_inputs("f16_rm",
                   [](std::uint32_t b) { return std::uint32_t(convert<fp16, fp32>(b, kRm)); });
}
TEST(CvtH100AllInputs, F16Rp) {
  check_all_inputs("f16_rp",
                   [](std::uint32_t b) { return std::uint32_t(convert<fp16, fp32>(b, kRp)); });
}
TEST(CvtH100AllInputs, RcpApproxFtzModel) {
  const RcpApproxFtz& rcp = RcpApproxFtz::h100();
  check_all_inputs("rcp_approx_ftz", [&rcp](std::uint32_t b) { return rcp.bits(b); });
}
TEST(CvtH100AllInputs, Ex2ApproxFtzModel) {
  const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100();
  check_all_inputs("ex2_approx_ftz", [&ex2](std::uint32_t b) { return ex2.bits(b); });
}
TEST(CvtH100AllInputs, Lg2ApproxFtzModel) {
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  check_all_inputs("lg2_approx_ftz", [&lg2](std::uint32_t b) { return lg2.bits(b); });
}
// The variants without .ftz: range scaling around the same MUFU (numerics/special.hpp).
TEST(CvtH100AllInputs, Ex2ApproxModel) {
  check_all_inputs("ex2_approx", [](std::uint32_t b) { return ex2_approx_bits(b); });
}
TEST(CvtH100AllInputs, RcpApproxModel) {
  check_all_inputs("rcp_approx", [](std::uint32_t b) { return rcp_approx_bits(b); });
}
TEST(CvtH100AllInputs, Lg2ApproxModel) {
  check_all_inputs("lg2_approx", [](std::uint32_t b) { return lg2_approx_bits(b); });
}
TEST(CvtH100AllInputs, S8RniSat) {
  check_all_inputs("s8_rni_sat", [](std::uint32_t b) {
    return std::uint32_t(cvt_rni_sat_s8(f32_from_bits(b))) & 0xFFu;
  });
}

}  // namespace
}  // namespace attnsim
