// numerics/mma models against the H100's matrix instructions, recorded by cuda_check/mma_probe.cu
// in data/hw/h100/mma_h100.h5: every recorded output must match bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/hdf5_io.hpp"
#include "numerics/mma.hpp"

namespace attnsim {
namespace {

const std::string kFile = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/mma_h100.h5";

class MmaH100 : public ::testing::TestWithParam<const char*> {};

TEST_P(MmaH100, EveryRecordedOutputMatches) {
  const std::string group = GetParam();
  H5Reader r(kFile);
  ASSERT_TRUE(r.exists(group + "/d")) << group;
  const std::string instr_name = r.attr_string(group, "instr");
  const auto instr = parse_mma_instr(instr_name);
  ASSERT_TRUE(instr.has_value()) << instr_name;
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")), K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems")), bits = int(r.attr_f64(group, "in_bits"));
  const std::vector<std::int64_t> a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"),
                                  c64 = r.read_i64(group + "/c"), d64 = r.read_i64(group + "/d"),
                                  tag = r.read_i64(group + "/tag");
  const std::size_t a_bytes = std::size_t(M) * K * bits / 8, b_bytes = std::size_t(N) * K * bits / 8;
  ASSERT_EQ(a64.size(), a_bytes * P);
  ASSERT_EQ(d64.size(), std::size_t(M) * N * P);
  std::vector<std::uint8_t> a(a64.begin(), a64.end()), b(b64.begin(), b64.end());
  std::vector<std::uint32_t> c(c64.begin(), c64.end()), d(d64.size());
  std::size_t mismatches = 0;
  for (int p = 0; p < P; ++p) {
    mma_gemm(*instr, M, N, K, a.data() + p * a_bytes, b.data() + p * b_bytes, c.data() + std::size_t(p) * M * N,
             d.data() + std::size_t(p) * M * N);
    for (int i = 0; i < M * N; ++i) {
      const std::size_t idx = std::size_t(p) * M * N + i;
      if (d[idx] != std::uint32_t(d64[idx]) && ++mismatches <= 8) {
        ADD_FAILURE() << group << " problem " << p << " (tag " << tag[p] << ") element " << i << ": H100 0x"
                      << std::hex << std::uint32_t(d64[idx]) << ", model 0x" << d[idx] << " (C 0x" << c[idx] << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << group << ": " << d64.size() << " recorded outputs";
}

INSTANTIATE_TEST_SUITE_P(
    Recordings, MmaH100,
    ::testing::Values("sm90.hmma.f16.f32_k16", "sm90.hmma.f16.f32_k128", "sm90.hmma.bf16.f32_k16",
                      "sm90.hmma.bf16.f32_k128", "sm90.hmma.f16.f16_k16", "sm90.hmma.f16.f16_k128",
                      "sm90.mma_sync.e4m3.f32_k32", "sm90.mma_sync.e4m3.f32_k256", "sm90.mma_sync.e5m2.f32_k32",
                      "sm90.mma_sync.e5m2.f32_k256", "sm90.imma.s8.s32_k32", "sm90.imma.s8.s32_k256",
                      "sm90.imma.s8.s32.satfinite_k32", "sm90.imma.s8.s32.satfinite_k256", "sm90.imma.s4.s32_k64",
                      "sm90.imma.s4.s32_k512", "sm90.wgmma.e4m3.f32_k32", "sm90.wgmma.e4m3.f32_k256",
                      "sm90.wgmma.e5m2.f32_k32", "sm90.wgmma.e5m2.f32_k256"),
    [](const auto& info) {
      std::string s = info.param;
      for (auto& ch : s) ch = (ch == '.' ? '_' : ch);
      return s;
    });

}  // namespace
}  // namespace attnsim

namespace attnsim {
namespace {

// Negative controls: plausible alternative models must disagree with the recordings, or the
// recordings would not be evidence for the chosen one.
std::size_t mismatches_of(const std::string& group, MmaIn in, const BlockFmaParams& prm, bool fp8_natural_halves) {
  H5Reader r(kFile);
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")), K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems")), bits = int(r.attr_f64(group, "in_bits"));
  const auto a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"), c64 = r.read_i64(group + "/c"),
             d64 = r.read_i64(group + "/d");
  std::vector<std::uint8_t> a(a64.begin(), a64.end()), b(b64.begin(), b64.end());
  const std::size_t ab = std::size_t(M) * K * bits / 8, bb = std::size_t(N) * K * bits / 8;
  std::size_t bad = 0;
  std::vector<std::uint32_t> ar(K), br(K);
  for (int p = 0; p < P; ++p) {
    for (int m = 0; m < M; ++m) {
      for (int j = 0; j < K; ++j) ar[j] = mma_element(a.data() + p * ab + m * (ab / M), bits, j);
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < K; ++j) br[j] = mma_element(b.data() + p * bb + n * (bb / N), bits, j);
        const std::size_t idx = (std::size_t(p) * M + m) * N + n;
        std::uint32_t c = std::uint32_t(c64[idx]);
        for (int k0 = 0; k0 < K; k0 += prm.block) {
          c = block_fma(in, ar.data() + k0, br.data() + k0, prm.block, c, prm);
        }
        (void)fp8_natural_halves;
        bad += c != std::uint32_t(d64[idx]);
      }
    }
  }
  std::printf("control %-28s block %2d neab %3d %s: %zu of %zu outputs differ\n", group.c_str(), prm.block, prm.neab,
              prm.out_rne ? "RNE" : "RZ ", bad, d64.size());
  return bad;
}

TEST(MmaH100Controls, AlternativeModelsDisagreeWithTheHardware) {
  // FP8 mma.sync as the published provisional model has it: natural k halves, C inside the first
  // 16-block, no separate FADD.
  const std::size_t natural = mismatches_of("sm90.mma_sync.e4m3.f32_k32", MmaIn::kE4m3, {16, 2, 23, false, -133, false}, true);
  EXPECT_GT(natural, 100u);
  // HMMA with Ampere's 8-product blocks and one extra bit.
  EXPECT_GT(mismatches_of("sm90.hmma.f16.f32_k16", MmaIn::kFp16, {8, 1, 23, false, -132, false}, false), 100u);
  // HMMA rounding to nearest instead of truncating.
  EXPECT_GT(mismatches_of("sm90.hmma.bf16.f32_k16", MmaIn::kBf16, {16, 2, 23, true, -133, false}, false), 100u);
  // QGMMA with a full FP32 window (no FP22 truncation).
  EXPECT_GT(mismatches_of("sm90.wgmma.e4m3.f32_k32", MmaIn::kE4m3, {32, 2, 23, false, -133, false}, false), 100u);
  // QGMMA as two 16-product blocks.
  EXPECT_GT(mismatches_of("sm90.wgmma.e4m3.f32_k32", MmaIn::kE4m3, {16, -10, 13, false, -133, false}, false), 10u);
}

}  // namespace
}  // namespace attnsim
