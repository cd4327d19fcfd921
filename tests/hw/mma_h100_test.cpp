// numerics/mma models against the H100's matrix instructions, recorded by cuda_check/mma_probe.cu
// in data/hw/h100/mma_h100.h5 (designed and random operands), mma_h100_special.h5 (NaN payloads,
// Inf, overflow, Inf - Inf, signed zeros, subnormals; wgmma f16/bf16 = HGMMA) and
// mma_h100_igmma.h5 (INT8 wgmma = IGMMA: s8, s8 .satfinite, u8, s8 x u8, u8 x s8): every recorded
// output must match bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "numerics/block_fma.hpp"
#include "numerics/mma.hpp"

namespace attnsim {
namespace {

const std::string kFile = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/mma_h100.h5";
const std::string kSpecialFile =
    std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/mma_h100_special.h5";
const std::string kIgmmaFile = std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/mma_h100_igmma.h5";
const std::string kF16AccFile =
    std::string(ATTNSIM_SOURCE_DIR) + "/data/hw/h100/mma_h100_f16acc.h5";

// Groups of the special file: mma_h100.h5's groups with suffix _special, and HGMMA; INT8 wgmma
// (all its groups, _special too) lives in the IGMMA file.
const std::string& file_of(const std::string& group) {
  // FP8 wgmma with f16 accumulation (QGMMA .F16) and the two-level (promoted) e4m3 chains.
  if (group.find("wgmma.e4m3.f16") != std::string::npos ||
      group.find("wgmma.e5m2.f16") != std::string::npos ||
      group.find("_promote") != std::string::npos) {
    return kF16AccFile;
  }
  if (group.find("wgmma.s8") != std::string::npos || group.find("wgmma.u8") != std::string::npos)
    return kIgmmaFile;
  const bool special = group.find("_special") != std::string::npos ||
                       group.find("wgmma.f16") != std::string::npos ||
                       group.find("wgmma.bf16") != std::string::npos;
  return special ? kSpecialFile : kFile;
}

class MmaH100 : public ::testing::TestWithParam<const char*> {};

TEST_P(MmaH100, EveryRecordedOutputMatches) {
  const std::string group = GetParam();
  H5Reader r(file_of(group));
  ASSERT_TRUE(r.exists(group + "/d")) << group;
  const std::string instr_name = r.attr_string(group, "instr");
  const auto instr = parse_mma_instr(instr_name);
  ASSERT_TRUE(instr.has_value()) << instr_name;
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")),
            K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems")), bits = int(r.attr_f64(group, "in_bits"));
  // Promoted groups: the chain restarts from zero every `promote` elements and each chunk is added
  // to FP32 C with FADD (mma_dot_promoted); C and D are FP32 bits.
  const int promote = r.has_attr(group, "promote") ? int(r.attr_f64(group, "promote")) : 0;
  const std::vector<std::int64_t> a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"),
                                  c64 = r.read_i64(group + "/c"), d64 = r.read_i64(group + "/d"),
                                  tag = r.read_i64(group + "/tag");
  const std::size_t a_bytes = std::size_t(M) * K * bits / 8,
                    b_bytes = std::size_t(N) * K * bits / 8;
  ASSERT_EQ(a64.size(), a_bytes * P);
  ASSERT_EQ(d64.size(), std::size_t(M) * N * P);
  std::vector<std::uint8_t> a(a64.begin(), a64.end()), b(b64.begin(), b64.end());
  std::vector<std::uint32_t> c(c64.begin(), c64.end()), d(d64.size());
  std::size_t mismatches = 0;
  std::map<std::int64_t, std::size_t> by_tag;
  for (int p = 0; p < P; ++p) {
    mma_gemm(*instr, M, N, K, a.data() + p * a_bytes, b.data() + p * b_bytes,
             c.data() + std::size_t(p) * M * N, d.data() + std::size_t(p) * M * N, promote);
    for (int i = 0; i < M * N; ++i) {
      const std::size_t idx = std::size_t(p) * M * N + i;
      if (d[idx] == std::uint32_t(d64[idx])) continue;
      ++by_tag[tag[p]];
      if (++mismatches <= 8) {
        ADD_FAILURE() << group << " problem " << p << " (tag " << tag[p] << ") element " << i
                      << ": H100 0x" << std::hex << std::uint32_t(d64[idx]) << ", model 0x"
                      << d[idx] << " (C 0x" << c[idx] << ")";
      }
    }
  }
  for (const auto& [t, n] : by_tag)
    std::printf("%s tag %lld: %zu mismatches\n", group.c_str(), (long long)t, n);
  EXPECT_EQ(mismatches, 0u) << group << ": " << d64.size() << " recorded outputs";
}

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (auto& ch : s) ch = (ch == '.' ? '_' : ch);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Recordings, MmaH100,
    ::testing::Values("sm90.hmma.f16.f32_k16", "sm90.hmma.f16.f32_k128", "sm90.hmma.bf16.f32_k16",
                      "sm90.hmma.bf16.f32_k128", "sm90.hmma.f16.f16_k16", "sm90.hmma.f16.f16_k128",
                      "sm90.mma_sync.e4m3.f32_k32", "sm90.mma_sync.e4m3.f32_k256",
                      "sm90.mma_sync.e5m2.f32_k32", "sm90.mma_sync.e5m2.f32_k256",
                      "sm90.imma.s8.s32_k32", "sm90.imma.s8.s32_k256",
                      "sm90.imma.s8.s32.satfinite_k32", "sm90.imma.s8.s32.satfinite_k256",
                      "sm90.imma.s4.s32_k64", "sm90.imma.s4.s32_k512", "sm90.wgmma.e4m3.f32_k32",
                      "sm90.wgmma.e4m3.f32_k256", "sm90.wgmma.e5m2.f32_k32",
                      "sm90.wgmma.e5m2.f32_k256"),
    test_name);

INSTANTIATE_TEST_SUITE_P(
    SpecialOperands, MmaH100,
    ::testing::Values("sm90.hmma.f16.f32_k16_special", "sm90.hmma.f16.f32_k128_special",
                      "sm90.hmma.bf16.f32_k16_special", "sm90.hmma.bf16.f32_k128_special",
                      "sm90.hmma.f16.f16_k16_special", "sm90.hmma.f16.f16_k128_special",
                      "sm90.mma_sync.e4m3.f32_k32_special", "sm90.mma_sync.e4m3.f32_k256_special",
                      "sm90.mma_sync.e5m2.f32_k32_special", "sm90.mma_sync.e5m2.f32_k256_special",
                      "sm90.imma.s8.s32_k32_special", "sm90.imma.s8.s32_k256_special",
                      "sm90.imma.s8.s32.satfinite_k32_special",
                      "sm90.imma.s8.s32.satfinite_k256_special", "sm90.imma.s4.s32_k64_special",
                      "sm90.imma.s4.s32_k512_special", "sm90.wgmma.e4m3.f32_k32_special",
                      "sm90.wgmma.e4m3.f32_k256_special", "sm90.wgmma.e5m2.f32_k32_special",
                      "sm90.wgmma.e5m2.f32_k256_special", "sm90.wgmma.f16.f32_k16_special",
                      "sm90.wgmma.f16.f32_k128_special", "sm90.wgmma.bf16.f32_k16_special",
                      "sm90.wgmma.bf16.f32_k128_special"),
    test_name);

INSTANTIATE_TEST_SUITE_P(Hgmma, MmaH100,
                         ::testing::Values("sm90.wgmma.f16.f32_k16", "sm90.wgmma.f16.f32_k128",
                                           "sm90.wgmma.bf16.f32_k16", "sm90.wgmma.bf16.f32_k128"),
                         test_name);

// FP8 wgmma with f16 accumulation (QGMMA.64x8x32.F16.{E4M3.E4M3,E5M2.E5M2}).
INSTANTIATE_TEST_SUITE_P(QgmmaF16, MmaH100,
                         ::testing::Values("sm90.wgmma.e4m3.f16_k32", "sm90.wgmma.e4m3.f16_k256",
                                           "sm90.wgmma.e4m3.f16_k32_special",
                                           "sm90.wgmma.e4m3.f16_k256_special",
                                           "sm90.wgmma.e5m2.f16_k32", "sm90.wgmma.e5m2.f16_k256",
                                           "sm90.wgmma.e5m2.f16_k32_special",
                                           "sm90.wgmma.e5m2.f16_k256_special"),
                         test_name);

// Two-level accumulation on the GPU: e4m3 wgmma chains (FP32 or f16 accumulator) over chunks of 32,
// 64 or 128 elements from zero, each chunk's D added to FP32 registers with FADD.RN.
INSTANTIATE_TEST_SUITE_P(
    Promoted, MmaH100,
    ::testing::Values("sm90.wgmma.e4m3.f32_k256_promote32", "sm90.wgmma.e4m3.f32_k256_promote64",
                      "sm90.wgmma.e4m3.f32_k256_promote128", "sm90.wgmma.e4m3.f32_k512_promote128",
                      "sm90.wgmma.e4m3.f16_k256_promote32", "sm90.wgmma.e4m3.f16_k256_promote64",
                      "sm90.wgmma.e4m3.f16_k256_promote128", "sm90.wgmma.e4m3.f16_k512_promote128"),
    test_name);

INSTANTIATE_TEST_SUITE_P(
    Igmma, MmaH100,
    ::testing::Values("sm90.wgmma.s8.s32_k32", "sm90.wgmma.s8.s32_k256",
                      "sm90.wgmma.s8.s32_k32_special", "sm90.wgmma.s8.s32_k256_special",
                      "sm90.wgmma.s8.s32.satfinite_k32", "sm90.wgmma.s8.s32.satfinite_k256",
                      "sm90.wgmma.s8.s32.satfinite_k32_special",
                      "sm90.wgmma.s8.s32.satfinite_k256_special", "sm90.wgmma.u8.s32_k32",
                      "sm90.wgmma.u8.s32_k256", "sm90.wgmma.u8.s32_k32_special",
                      "sm90.wgmma.u8.s32_k256_special", "sm90.wgmma.s8.u8.s32_k32",
                      "sm90.wgmma.s8.u8.s32_k256", "sm90.wgmma.s8.u8.s32_k32_special",
                      "sm90.wgmma.s8.u8.s32_k256_special", "sm90.wgmma.u8.s8.s32_k32",
                      "sm90.wgmma.u8.s8.s32_k256", "sm90.wgmma.u8.s8.s32_k32_special",
                      "sm90.wgmma.u8.s8.s32_k256_special"),
    test_name);

}  // namespace
}  // namespace attnsim

namespace attnsim {
namespace {

// Negative controls: plausible alternative models must disagree with the recordings, or the
// recordings would not be evidence for the chosen one. Each alternative is a chain of block FMAs
// with other parameters, run over the recorded operands (in the instruction's input format).
std::size_t mismatches_of(const std::string& group, Encoding in, const BlockFmaParams& prm) {
  H5Reader r(file_of(group));
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")),
            K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems")), bits = int(r.attr_f64(group, "in_bits"));
  const auto a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"),
             c64 = r.read_i64(group + "/c"), d64 = r.read_i64(group + "/d");
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
        bad += c != std::uint32_t(d64[idx]);
      }
    }
  }
  std::printf("control %-28s block %2d neab %3d %s: %zu of %zu outputs differ\n", group.c_str(),
              prm.block, prm.neab, prm.out_rne ? "RNE" : "RZ ", bad, d64.size());
  return bad;
}

// A library parameter set with one field changed: most alternatives below differ from a model's
// parameters (block_fma.hpp) in one named field.
template <class T>
BlockFmaParams with(BlockFmaParams p, T BlockFmaParams::*field, T value) {
  p.*field = value;
  return p;
}

// Ampere's HMMA as Fasi et al. and Khattak & Mikaitis describe it (8-product blocks, one extra
// alignment bit): not a model of this library (no Ampere GPU in the evidence), an alternative only.
constexpr BlockFmaParams kAmpereHmmaF32{
    .block = 8, .neab = 1, .out_man = 23, .out_rne = false, .min_exp = -132, .acc_fp16 = false};

TEST(MmaH100Controls, AlternativeModelsDisagreeWithTheHardware) {
  // FP8 mma.sync as the published provisional model has it: the HMMA parameters over the natural
  // k halves of the e4m3 operands, C inside the first 16-block, no separate FADD.
  EXPECT_GT(mismatches_of("sm90.mma_sync.e4m3.f32_k32", Encoding::kE4m3fn, kHopperHmmaF32), 100u);
  // HMMA with Ampere's 8-product blocks and one extra bit.
  EXPECT_GT(mismatches_of("sm90.hmma.f16.f32_k16", Encoding::kFp16, kAmpereHmmaF32), 100u);
  // HMMA rounding to nearest instead of truncating.
  EXPECT_GT(mismatches_of("sm90.hmma.bf16.f32_k16", Encoding::kBf16,
                          with(kHopperHmmaF32, &BlockFmaParams::out_rne, true)),
            100u);
  // QGMMA with a full FP32 window (no FP22 truncation): HMMA's parameters over 32 products.
  EXPECT_GT(mismatches_of("sm90.wgmma.e4m3.f32_k32", Encoding::kE4m3fn,
                          with(kHopperHmmaF32, &BlockFmaParams::block, 32)),
            100u);
  // QGMMA as two 16-product blocks.
  EXPECT_GT(mismatches_of("sm90.wgmma.e4m3.f32_k32", Encoding::kE4m3fn,
                          with(kHopperQgmmaF32, &BlockFmaParams::block, 16)),
            10u);
  // HGMMA (wgmma f16/bf16): the HMMA parameters fit; Ampere's blocks of 8 with one extra bit, a
  // 26-bit window (neab 3), round-to-nearest, or an FP22-like window do not.
  EXPECT_GT(mismatches_of("sm90.wgmma.f16.f32_k16", Encoding::kFp16, kAmpereHmmaF32), 100u);
  EXPECT_GT(mismatches_of("sm90.wgmma.f16.f32_k16", Encoding::kFp16,
                          with(kHopperHmmaF32, &BlockFmaParams::neab, 3)),
            100u);
  EXPECT_GT(mismatches_of("sm90.wgmma.bf16.f32_k16", Encoding::kBf16,
                          with(kHopperHmmaF32, &BlockFmaParams::out_rne, true)),
            100u);
  EXPECT_GT(mismatches_of("sm90.wgmma.bf16.f32_k16", Encoding::kBf16,
                          with(kHopperQgmmaF32, &BlockFmaParams::block, 16)),
            100u);
  EXPECT_GT(mismatches_of("sm90.wgmma.f16.f32_k128", Encoding::kFp16, kAmpereHmmaF32), 100u);
}

TEST(MmaH100Controls, QgmmaF16IsOneFp22BlockRoundedToNearestFp16) {
  // The model's parameters (the instruction table's), through the same generic block loop (0
  // here, as in EveryRecordedOutputMatches).
  for (const char* g : {"sm90.wgmma.e4m3.f16_k32", "sm90.wgmma.e4m3.f16_k256",
                        "sm90.wgmma.e5m2.f16_k32", "sm90.wgmma.e5m2.f16_k256_special"}) {
    const MmaInstrInfo& info =
        mma_info(std::string(g).find("e4m3") != std::string::npos ? MmaInstr::kWgmmaE4m3F16
                                                                  : MmaInstr::kWgmmaE5m2F16);
    const BlockFmaParams& model = info.params;
    ASSERT_EQ(model.block, 32);
    EXPECT_EQ(mismatches_of(g, info.in, model), 0u) << g;
    // Truncation (RZ) into fp16, as the FP32-accumulating QGMMA truncates to FP22.
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::out_rne, false)), 100u) << g;
    // Two 16-product blocks (the UNVERIFIED sm_89 f16 configuration) or four of 8.
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::block, 16)), 100u) << g;
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::block, 8)), 100u) << g;
    // Windows one bit narrower or wider, or HMMA's 25 bits.
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::neab, -11)), 100u) << g;
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::neab, -9)), 100u) << g;
    EXPECT_GT(mismatches_of(g, info.in, with(model, &BlockFmaParams::neab, 2)), 100u) << g;
  }
  // The floor: 2^-18 and above lose designed subnormal sums of e5m2 products (2^-25 + 2^-32 and
  // the like); every floor at or below 2^-19 gives the same bits for FP8 inputs.
  const BlockFmaParams& e5m2_model = mma_info(MmaInstr::kWgmmaE5m2F16).params;
  EXPECT_GT(mismatches_of("sm90.wgmma.e5m2.f16_k32", Encoding::kE5m2,
                          with(e5m2_model, &BlockFmaParams::min_exp, -18)),
            0u);
  EXPECT_EQ(mismatches_of("sm90.wgmma.e5m2.f16_k32", Encoding::kE5m2,
                          with(e5m2_model, &BlockFmaParams::min_exp, -19)),
            0u);
}

// The promoted recordings against what they would be without promotion (one chain over all of K
// with C inside it, FP32 accumulator) or with a single chunk (promote = K): both must disagree.
std::size_t promoted_mismatches(const std::string& group, MmaInstr instr, int every) {
  H5Reader r(kF16AccFile);
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")),
            K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems"));
  const auto a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"),
             c64 = r.read_i64(group + "/c"), d64 = r.read_i64(group + "/d");
  std::vector<std::uint8_t> a(a64.begin(), a64.end()), b(b64.begin(), b64.end());
  std::vector<std::uint32_t> c(c64.begin(), c64.end()), d(d64.size());
  for (int p = 0; p < P; ++p) {
    mma_gemm(instr, M, N, K, a.data() + std::size_t(p) * M * K, b.data() + std::size_t(p) * N * K,
             c.data() + std::size_t(p) * M * N, d.data() + std::size_t(p) * M * N, every);
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < d.size(); ++i) bad += d[i] != std::uint32_t(d64[i]);
  std::printf("control %-40s every %3d: %zu of %zu outputs differ\n", group.c_str(), every, bad,
              d.size());
  return bad;
}

TEST(MmaH100Controls, PromotionIsVisibleInTheRecordings) {
  EXPECT_GT(promoted_mismatches("sm90.wgmma.e4m3.f32_k256_promote64", MmaInstr::kWgmmaE4m3F32, 0),
            1000u);
  EXPECT_GT(promoted_mismatches("sm90.wgmma.e4m3.f32_k256_promote64", MmaInstr::kWgmmaE4m3F32, 256),
            1000u);
  EXPECT_GT(promoted_mismatches("sm90.wgmma.e4m3.f32_k256_promote64", MmaInstr::kWgmmaE4m3F32, 128),
            100u);
  EXPECT_GT(
      promoted_mismatches("sm90.wgmma.e4m3.f32_k512_promote128", MmaInstr::kWgmmaE4m3F32, 512),
      500u);
  EXPECT_GT(
      promoted_mismatches("sm90.wgmma.e4m3.f16_k256_promote128", MmaInstr::kWgmmaE4m3F16, 256),
      1000u);
  EXPECT_GT(promoted_mismatches("sm90.wgmma.e4m3.f16_k256_promote32", MmaInstr::kWgmmaE4m3F16, 64),
            100u);
  // f16 chunks against FP32 chunks of the same length: the accumulator format is visible.
  EXPECT_GT(promoted_mismatches("sm90.wgmma.e4m3.f16_k256_promote64", MmaInstr::kWgmmaE4m3F32, 64),
            1000u);
}

// What the special-operand recordings show, read off the operands and the recorded D alone (no
// model involved), per group: each count is an output on which a plausible IEEE-style rule would
// differ from the hardware, so a model that follows that rule fails the recording.
struct SpecialEvidence {
  std::size_t nan_c_payload = 0;     // C is a NaN other than 0x7FFFFFFF (0x7FFF), D is exactly that
  std::size_t nan_ab = 0;            // an A/B NaN operand, C not NaN: D canonical
  std::size_t nan_noncanonical = 0;  // any NaN D other than the canonical one (must stay 0)
  std::size_t ieee_neg_zero = 0;     // C = -0 and every product -0 (IEEE: -0): D = +0
  std::size_t neg_zero_d = 0;        // D = -0 anywhere (must stay 0)
  std::size_t inf_cancel = 0;        // +Inf and -Inf among products and C, no NaN, no Inf*0: D NaN
  std::size_t inf_cancel_steps =
      0;                           // ... the two signs first met in different k-steps (C: step -1)
  std::size_t inf_times_zero = 0;  // Inf * 0, no NaN operand: D NaN
  std::size_t overflow = 0;        // every operand and C finite, D = +-Inf
  std::size_t sub_operand = 0;  // a subnormal A/B operand in a non-zero product, D finite non-zero
  std::size_t sub_c = 0;        // C subnormal
  std::size_t sub_d = 0;        // D subnormal
};

bool subnormal_bits(Encoding in, std::uint32_t bits) {
  const EncodingTraits& t = encoding_traits(in);
  const int eb = t.exp_bits, mb = t.man_bits;
  return ((bits >> mb) & ((1u << eb) - 1)) == 0 && (bits & ((1u << mb) - 1)) != 0;
}

SpecialEvidence special_evidence(const std::string& group) {
  H5Reader r(file_of(group));
  const MmaInstrInfo& info = mma_info(*parse_mma_instr(r.attr_string(group, "instr")));
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")),
            K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems")), bits = info.in_bits;
  const auto a64 = r.read_i64(group + "/a"), b64 = r.read_i64(group + "/b"),
             c64 = r.read_i64(group + "/c"), d64 = r.read_i64(group + "/d");
  std::vector<std::uint8_t> a(a64.begin(), a64.end()), b(b64.begin(), b64.end());
  const std::size_t ab = std::size_t(M) * K * bits / 8, bb = std::size_t(N) * K * bits / 8;
  const bool f16 = info.acc == 1;
  const std::uint32_t canon = f16 ? 0x7FFFu : 0x7FFFFFFFu, abs_mask = f16 ? 0x7FFFu : 0x7FFFFFFFu;
  const std::uint32_t inf_bits = f16 ? 0x7C00u : 0x7F800000u,
                      neg_zero = f16 ? 0x8000u : 0x80000000u;
  const std::uint32_t exp_mask = f16 ? 0x7C00u : 0x7F800000u;
  SpecialEvidence ev;
  for (int p = 0; p < P; ++p) {
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        const std::size_t idx = (std::size_t(p) * M + m) * N + n;
        const std::uint32_t c = std::uint32_t(c64[idx]), d = std::uint32_t(d64[idx]);
        const bool c_nan = (c & abs_mask) > inf_bits, c_inf = (c & abs_mask) == inf_bits;
        const bool d_nan = (d & abs_mask) > inf_bits, d_inf = (d & abs_mask) == inf_bits;
        bool ab_nan = false, inf_zero = false, all_neg_zero = true, sub_used = false;
        int first_pos = c_inf && !(c >> (f16 ? 15 : 31)) ? -1 : K,
            first_neg = c_inf && (c >> (f16 ? 15 : 31)) ? -1 : K;
        for (int k = 0; k < K; ++k) {
          const std::uint32_t x = mma_element(a.data() + p * ab + m * (ab / M), bits, k);
          const std::uint32_t y = mma_element(b.data() + p * bb + n * (bb / N), bits, k);
          const FloatParts px = decompose_bits(info.in, x), py = decompose_bits(info.in, y);
          if (px.kind == FloatParts::kNaN || py.kind == FloatParts::kNaN) ab_nan = true;
          const bool xi = px.kind == FloatParts::kInf, yi = py.kind == FloatParts::kInf;
          const bool xz = px.kind == FloatParts::kZero, yz = py.kind == FloatParts::kZero;
          if ((xi && yz) || (yi && xz)) inf_zero = true;
          if ((xi || yi) && !xz && !yz) {
            int& first = px.neg != py.neg ? first_neg : first_pos;
            if (first == K) first = k;
          }
          if (!(xz || yz) || px.neg == py.neg) all_neg_zero = false;
          if (!xz && !yz && (subnormal_bits(info.in, x) || subnormal_bits(info.in, y)))
            sub_used = true;
        }
        ev.nan_noncanonical += d_nan && d != canon;
        ev.neg_zero_d += d == neg_zero;
        if (c_nan && c != canon && d == canon) ++ev.nan_c_payload;
        if (ab_nan && !c_nan && d == canon) ++ev.nan_ab;
        if (c == neg_zero && all_neg_zero && d == 0) ++ev.ieee_neg_zero;
        const bool any_nan = ab_nan || c_nan;
        if (!any_nan && !inf_zero && first_pos < K && first_neg < K && d_nan) {
          ++ev.inf_cancel;
          const int step = info.k;
          const int sp = first_pos < 0 ? -1 : first_pos / step,
                    sn = first_neg < 0 ? -1 : first_neg / step;
          if (sp != sn) ++ev.inf_cancel_steps;
        }
        if (!any_nan && inf_zero && d_nan) ++ev.inf_times_zero;
        if (!any_nan && !c_inf && first_pos == K && first_neg == K && d_inf) ++ev.overflow;
        if (sub_used && !d_nan && !d_inf && (d & abs_mask) != 0) ++ev.sub_operand;
        ev.sub_c += (c & exp_mask) == 0 && (c & abs_mask) != 0;
        ev.sub_d += (d & exp_mask) == 0 && (d & abs_mask) != 0;
      }
    }
  }
  std::printf(
      "%-38s NaN: C payload %zu, A/B %zu, other %zu | -0: IEEE %zu, D %zu | Inf-Inf %zu (across "
      "steps %zu), "
      "Inf*0 %zu, overflow %zu | subnormal: operand %zu, C %zu, D %zu\n",
      group.c_str(), ev.nan_c_payload, ev.nan_ab, ev.nan_noncanonical, ev.ieee_neg_zero,
      ev.neg_zero_d, ev.inf_cancel, ev.inf_cancel_steps, ev.inf_times_zero, ev.overflow,
      ev.sub_operand, ev.sub_c, ev.sub_d);
  return ev;
}

TEST(MmaH100Special, RecordingsExerciseEverySpecialCase) {
  for (const char* g : {"sm90.hmma.f16.f32", "sm90.hmma.bf16.f32", "sm90.hmma.f16.f16",
                        "sm90.mma_sync.e4m3.f32", "sm90.mma_sync.e5m2.f32", "sm90.wgmma.e4m3.f32",
                        "sm90.wgmma.e5m2.f32", "sm90.wgmma.f16.f32", "sm90.wgmma.bf16.f32",
                        "sm90.wgmma.e4m3.f16", "sm90.wgmma.e5m2.f16"}) {
    const MmaInstrInfo& info = mma_info(*parse_mma_instr(g));
    const bool has_inf = info.in != Encoding::kE4m3fn;  // e4m3fn has no Inf
    for (int steps : {1, 8}) {
      const std::string group = std::string(g) + "_k" + std::to_string(info.k * steps) + "_special";
      const SpecialEvidence ev = special_evidence(group);
      // The hardware writes one NaN and never -0.
      EXPECT_EQ(ev.nan_noncanonical, 0u) << group;
      EXPECT_EQ(ev.neg_zero_d, 0u) << group;
      // Payload-propagating NaN rules and IEEE's sign of zero would each fail these outputs.
      EXPECT_GT(ev.nan_c_payload, 0u) << group;
      EXPECT_GT(ev.nan_ab, 0u) << group;
      if (steps == 1) {
        EXPECT_GT(ev.ieee_neg_zero, 0u) << group;  // the designed cases (single instructions only)
      }
      EXPECT_GT(ev.sub_c, 0u) << group;
      if (has_inf) {
        EXPECT_GT(ev.inf_cancel, 0u) << group;
        EXPECT_GT(ev.inf_times_zero, 0u) << group;
        EXPECT_GT(ev.sub_operand, 0u) << group;
        if (steps == 8) {
          EXPECT_GT(ev.inf_cancel_steps, 0u) << group;
        }
      }
      if (steps == 1 && (info.in == Encoding::kBf16 || info.acc == 1)) {
        EXPECT_GT(ev.overflow, 0u) << group;
      }
    }
  }
}

}  // namespace
}  // namespace attnsim

namespace attnsim {
namespace {

// INT8 wgmma (IGMMA) negative controls: the recorded D against integer rules other than the
// model's (exact C + sum per instruction, wrapped, or clamped for .satfinite), each applied per
// output element from the recorded operands.
enum class IntRule {
  kWrap,             // wrap modulo 2^32 after each instruction
  kClamp,            // clamp the exact C + sum of each instruction
  kClampChainEnd,    // wrap-free 64-bit sum over the whole chain, clamped once at the end
  kClampPerProduct,  // clamp after every product, in k order
  kAllSigned,        // operands all read as s8 (u8 read as s8), wrapping
  kAllUnsigned,      // operands all read as u8, wrapping
};

std::size_t int_rule_mismatches(const std::string& group, IntRule rule) {
  H5Reader r(kIgmmaFile);
  const MmaInstrInfo& info = mma_info(*parse_mma_instr(r.attr_string(group, "instr")));
  const int M = int(r.attr_f64(group, "M")), N = int(r.attr_f64(group, "N")),
            K = int(r.attr_f64(group, "K"));
  const int P = int(r.attr_f64(group, "problems"));
  const auto a = r.read_i64(group + "/a"), b = r.read_i64(group + "/b"),
             c = r.read_i64(group + "/c"), d = r.read_i64(group + "/d");
  auto value = [&](Encoding in, std::int64_t byte) -> std::int64_t {
    const bool u8 =
        rule == IntRule::kAllUnsigned || (rule != IntRule::kAllSigned && in == Encoding::kU8);
    return u8 ? std::int64_t(std::uint8_t(byte)) : std::int64_t(std::int8_t(std::uint8_t(byte)));
  };
  auto clamp = [](std::int64_t v) -> std::int64_t {
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v;
  };
  const Encoding in_a = info.in, in_b = mma_in_b(info);
  std::size_t bad = 0;
  for (int p = 0; p < P; ++p) {
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        const std::size_t idx = (std::size_t(p) * M + m) * N + n;
        std::int64_t acc = std::int32_t(std::uint32_t(c[idx]));
        for (int k0 = 0; k0 < K; k0 += info.k) {
          std::int64_t sum = 0;
          for (int k = k0; k < k0 + info.k; ++k) {
            const std::int64_t prod = value(in_a, a[(std::size_t(p) * M + m) * K + k]) *
                                      value(in_b, b[(std::size_t(p) * N + n) * K + k]);
            sum += prod;
            if (rule == IntRule::kClampPerProduct) acc = clamp(acc + prod);
          }
          if (rule == IntRule::kClamp) acc = clamp(acc + sum);
          if (rule == IntRule::kClampChainEnd) acc += sum;
          if (rule == IntRule::kWrap || rule == IntRule::kAllSigned ||
              rule == IntRule::kAllUnsigned) {
            acc = std::int32_t(std::uint32_t(std::uint64_t(acc + sum)));
          }
        }
        if (rule == IntRule::kClampChainEnd) acc = clamp(acc);
        bad += std::uint32_t(acc) != std::uint32_t(d[idx]);
      }
    }
  }
  std::printf("control %-36s rule %d: %zu of %zu outputs differ\n", group.c_str(), int(rule), bad,
              d.size());
  return bad;
}

TEST(MmaH100Controls, IgmmaWrapsOrClampsOncePerInstruction) {
  for (const char* g :
       {"sm90.wgmma.s8.s32", "sm90.wgmma.u8.s32", "sm90.wgmma.s8.u8.s32", "sm90.wgmma.u8.s8.s32"}) {
    for (const char* suffix : {"_k32", "_k256", "_k32_special", "_k256_special"}) {
      const std::string group = std::string(g) + suffix;
      // The model's rule, written independently of mma_dot; then a clamp where the sum leaves
      // int32 must disagree (the recordings wrap).
      EXPECT_EQ(int_rule_mismatches(group, IntRule::kWrap), 0u) << group;
      EXPECT_GT(int_rule_mismatches(group, IntRule::kClamp), 100u) << group;
    }
  }
  for (const char* suffix : {"_k32", "_k256", "_k32_special", "_k256_special"}) {
    const std::string group = std::string("sm90.wgmma.s8.s32.satfinite") + suffix;
    EXPECT_EQ(int_rule_mismatches(group, IntRule::kClamp), 0u) << group;
    // The wrapping model must disagree with the .satfinite recording wherever it saturates.
    EXPECT_GT(int_rule_mismatches(group, IntRule::kWrap), 100u) << group;
    // Partial sums are not clamped (designed +127/-127 patterns against C = INT32_MAX/MIN).
    EXPECT_GT(int_rule_mismatches(group, IntRule::kClampPerProduct), 100u) << group;
  }
  // A chain clamps after every instruction, not once at its end (rows whose sign alternates by
  // k-step, C near the limits).
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.s8.s32.satfinite_k256", IntRule::kClampChainEnd), 100u);
  EXPECT_GT(
      int_rule_mismatches("sm90.wgmma.s8.s32.satfinite_k256_special", IntRule::kClampChainEnd),
      100u);
  // Signedness: u8 operands are unsigned, s8 signed, per operand in the mixed forms.
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.u8.s32_k32", IntRule::kAllSigned), 1000u);
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.s8.u8.s32_k32", IntRule::kAllSigned), 1000u);
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.s8.u8.s32_k32", IntRule::kAllUnsigned), 1000u);
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.u8.s8.s32_k32", IntRule::kAllSigned), 1000u);
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.u8.s8.s32_k32", IntRule::kAllUnsigned), 1000u);
  EXPECT_GT(int_rule_mismatches("sm90.wgmma.s8.s32_k32", IntRule::kAllUnsigned), 1000u);
}

}  // namespace
}  // namespace attnsim
