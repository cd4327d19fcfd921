// formats/ conversions against the H100 over ALL 2^32 FP32 inputs: recomputes the per-chunk
// digests that cuda_check/cvt_probe.cu recorded in data/hw/h100/cvt_summary.json. The conversions
// go through numerics/convert_array (whole blocks): by default its vector kernels, under
// ATTNSIM_ISA=scalar its references (the formats/ encoders), so one run proves either against
// the hardware; likewise ex2/rcp.approx{.ftz} through numerics/special_array (gathers vs the
// scalar models); lg2 per element. The digests are summed by numerics/digest_array (its vector
// kernel, or its reference under ATTNSIM_ISA=scalar; the two are equal by DigestArray's test).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/digest.hpp"
#include "numerics/digest_array.hpp"
#include "numerics/isa.hpp"
#include "numerics/special.hpp"
#include "numerics/special_array.hpp"

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

// Every FP32 input, over blocks of 2^16 inputs: block(x, n, out) writes the outputs of x[0, n).
// The chunks' digests against the recorded ones.
template <class Block>
void check_all_inputs_blocks(const std::string& op, const Block& block) {
  const std::vector<std::uint64_t> want = recorded_digests(op);
  ASSERT_EQ(want.size(), std::size_t(kDigestChunks)) << op;
  std::vector<std::uint64_t> got(kDigestChunks, 0);
  constexpr std::uint32_t kBlock = 1u << 16;
#pragma omp parallel
  {
    std::vector<float> x(kBlock);
    std::vector<std::uint32_t> y(kBlock);
#pragma omp for schedule(dynamic, 1)
    for (int c = 0; c < kDigestChunks; ++c) {
      std::uint64_t sum = 0;
      for (std::uint32_t b0 = 0; b0 < (1u << kDigestChunkBits); b0 += kBlock) {
        const std::uint32_t base = (std::uint32_t(c) << kDigestChunkBits) + b0;
        for (std::uint32_t k = 0; k < kBlock; ++k) x[k] = f32_from_bits(base + k);
        block(x.data(), std::size_t(kBlock), y.data());
        sum += digest_sum(base, y.data(), std::size_t(kBlock));
      }
      got[c] = sum;
    }
  }
  int bad = 0;
  for (int c = 0; c < kDigestChunks; ++c) {
    if (got[c] != want[c] && ++bad <= 5) {
      ADD_FAILURE() << op << " (" << isa_name(active_isa()) << "): chunk " << c << " (inputs 0x"
                    << std::hex << (std::uint32_t(c) << 24) << "..) differs from the H100 recording";
    }
  }
  EXPECT_EQ(bad, 0) << op << ": chunks that differ from the H100";
}

// The same for a model of one input's bits at a time.
template <class F>
void check_all_inputs(const std::string& op, F model) {
  check_all_inputs_blocks(op, [&model](const float* x, std::size_t n, std::uint32_t* out) {
    for (std::size_t k = 0; k < n; ++k) out[k] = model(f32_bits(x[k]));
  });
}

// encode_array to `e` under `p`, the code in the low bits of each output: at the format's own
// width (bytes for FP8, halves for bf16 and fp16: the outputs the pipeline writes, whose kernels
// store differently), and at 32 bits, which must hold the same codes (an output where the two
// differ is replaced by 0xFFFFFFFF, a value no code has, so its chunk fails).
auto encoder(Encoding e, Policy p) {
  return [e, p](const float* x, std::size_t n, std::uint32_t* out) {
    thread_local std::vector<std::uint8_t> b8;
    thread_local std::vector<std::uint16_t> b16;
    encode_array(e, x, n, out, p);
    const int bits = encoding_traits(e).bits;
    if (bits == 8) {
      b8.resize(n);
      encode_array(e, x, n, b8.data(), p);
    } else {
      b16.resize(n);
      encode_array(e, x, n, b16.data(), p);
    }
    // (A select per width, which the compiler vectorises.)
    if (bits == 8) {
      for (std::size_t i = 0; i < n; ++i) out[i] = b8[i] == out[i] ? out[i] : 0xFFFFFFFFu;
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = b16[i] == out[i] ? out[i] : 0xFFFFFFFFu;
    }
  };
}

// An FP32 array function's results as bits.
template <class F>
void float_bits_of(F f, const float* x, std::size_t n, std::uint32_t* out) {
  thread_local std::vector<float> y;
  y.resize(n);
  f(x, n, y.data());
  std::memcpy(out, y.data(), n * sizeof(float));
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
  check_all_inputs_blocks("e4m3_satfinite", encoder(Encoding::kE4m3fn, kCudaSatfinite));
}
TEST(CvtH100AllInputs, E5m2Satfinite) {
  check_all_inputs_blocks("e5m2_satfinite", encoder(Encoding::kE5m2, kCudaSatfinite));
}
TEST(CvtH100AllInputs, Bf16Rn) {
  check_all_inputs_blocks("bf16_rn", encoder(Encoding::kBf16, kRn));
}
TEST(CvtH100AllInputs, Bf16Rz) {
  check_all_inputs_blocks("bf16_rz", encoder(Encoding::kBf16, kRz));
}
TEST(CvtH100AllInputs, F16Rn) {
  check_all_inputs_blocks("f16_rn", encoder(Encoding::kFp16, kRn));
}
TEST(CvtH100AllInputs, F16Rz) {
  check_all_inputs_blocks("f16_rz", encoder(Encoding::kFp16, kRz));
}
TEST(CvtH100AllInputs, F16Rm) {
  check_all_inputs_blocks("f16_rm", encoder(Encoding::kFp16, kRm));
}
TEST(CvtH100AllInputs, F16Rp) {
  check_all_inputs_blocks("f16_rp", encoder(Encoding::kFp16, kRp));
}
TEST(CvtH100AllInputs, RcpApproxFtzModel) {
  check_all_inputs_blocks("rcp_approx_ftz", [](const float* x, std::size_t n, std::uint32_t* out) {
    float_bits_of([](const float* a, std::size_t k, float* b) { rcp_approx_ftz_array(a, k, b); }, x, n, out);
  });
}
TEST(CvtH100AllInputs, Ex2ApproxFtzModel) {
  check_all_inputs_blocks("ex2_approx_ftz", [](const float* x, std::size_t n, std::uint32_t* out) {
    float_bits_of([](const float* a, std::size_t k, float* b) { ex2_approx_ftz_array(a, k, b); }, x, n, out);
  });
}
TEST(CvtH100AllInputs, Lg2ApproxFtzModel) {
  const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100();
  check_all_inputs("lg2_approx_ftz", [&lg2](std::uint32_t b) { return lg2.bits(b); });
}
// The variants without .ftz: range scaling around the same MUFU (numerics/special.hpp).
TEST(CvtH100AllInputs, Ex2ApproxModel) {
  check_all_inputs_blocks("ex2_approx", [](const float* x, std::size_t n, std::uint32_t* out) {
    float_bits_of([](const float* a, std::size_t k, float* b) { ex2_approx_array(a, k, b); }, x, n, out);
  });
}
TEST(CvtH100AllInputs, RcpApproxModel) {
  check_all_inputs_blocks("rcp_approx", [](const float* x, std::size_t n, std::uint32_t* out) {
    float_bits_of([](const float* a, std::size_t k, float* b) { rcp_approx_array(a, k, b); }, x, n, out);
  });
}
TEST(CvtH100AllInputs, Lg2ApproxModel) {
  check_all_inputs("lg2_approx", [](std::uint32_t b) { return lg2_approx_bits(b); });
}
TEST(CvtH100AllInputs, S8RniSat) {
  check_all_inputs_blocks("s8_rni_sat", [](const float* x, std::size_t n, std::uint32_t* out) {
    round_to_int_array(x, n, reinterpret_cast<std::int32_t*>(out), Round::kNearestEven, 8);
    for (std::size_t k = 0; k < n; ++k) out[k] &= 0xFFu;
  });
}

}  // namespace
}  // namespace attnsim
