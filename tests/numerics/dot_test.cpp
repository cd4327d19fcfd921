// numerics/dot: the product-model names, requirements and the CUDA-core / instruction paths,
// against hand-derived values and against numerics/mma.hpp called directly.
#include "numerics/dot.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>

namespace attnsim {
namespace {

TEST(Dot, NamesParseBackAndCoverEveryInstruction) {
  // fp32, fp64, exact, fp32.fma (the CUDA-core and exact models), then one name per instruction.
  EXPECT_EQ(dot_model_names().size(), 4 + mma_instructions().size());
  for (const std::string& n : dot_model_names()) {
    DotModel m;
    ASSERT_TRUE(parse_dot_model(n, &m)) << n;
    EXPECT_EQ(dot_model_name(m), n);
  }
  DotModel m;
  EXPECT_FALSE(parse_dot_model("hmma", &m));
}

TEST(Dot, RequirementsFollowTheInstruction) {
  DotModel m;
  ASSERT_TRUE(parse_dot_model("sm90.wgmma.e4m3.f32", &m));
  DotRequirements r = dot_requirements(m);
  EXPECT_FALSE(r.any_encoding);
  EXPECT_EQ(r.a_enc, Encoding::kE4m3fn);
  EXPECT_EQ(r.k_step, 32);
  m.promote = 128;
  EXPECT_EQ(dot_requirements(m).k_step, 128);
  ASSERT_TRUE(parse_dot_model("sm90.wgmma.s8.u8.s32", &m));
  r = dot_requirements(m);
  EXPECT_TRUE(r.integer_acc);
  EXPECT_EQ(r.a_enc, Encoding::kS8);
  EXPECT_EQ(r.b_enc, Encoding::kU8);
  ASSERT_TRUE(parse_dot_model("fp32", &m));
  EXPECT_TRUE(dot_requirements(m).any_encoding);
}

TEST(Dot, CudaCoreModelsRoundAsWritten) {
  // 1 + 2^-24 + 2^-24: FP32 adds tie to even twice (1), FP64 keeps both (1 + 2^-23).
  const float a[3] = {1.0f, 0x1p-24f, 0x1p-24f}, b[3] = {1.0f, 1.0f, 1.0f};
  EXPECT_EQ(dot_values(DotModel::kFp32, 0.0, a, b, 3), 1.0);
  EXPECT_EQ(dot_values(DotModel::kFp64, 0.0, a, b, 3), 1.0 + 0x1p-23);
  // An FP64 operand is rounded to FP32 by the FP32 model (an FP32 register), kept by FP64.
  const double ad[1] = {1.0 + 0x1p-40};
  EXPECT_EQ(dot_values(DotModel::kFp32, 0.0, ad, b, 1), 1.0);
  EXPECT_EQ(dot_values(DotModel::kFp64, 0.0, ad, b, 1), 1.0 + 0x1p-40);
}

TEST(Dot, InstructionPathIsTheMmaChain) {
  std::mt19937 rng(3);
  DotModel m;
  for (const char* name : {"sm90.hmma.f16.f32", "sm90.wgmma.e4m3.f32", "sm90.imma.s8.s32"}) {
    ASSERT_TRUE(parse_dot_model(name, &m));
    std::vector<std::uint32_t> a(128), b(128);
    for (int t = 0; t < 200; ++t) {
      for (int i = 0; i < 128; ++i) {
        a[i] = rng() & (m.instr == MmaInstr::kHmmaF16F32 ? 0x3FFFu : 0x7Fu);
        b[i] = rng() & (m.instr == MmaInstr::kHmmaF16F32 ? 0x3FFFu : 0x7Fu);
      }
      const std::uint32_t c = m.instr == MmaInstr::kImmaS8 ? rng() : 0x3F800000u;
      ASSERT_EQ(dot_mma(m, a.data(), b.data(), 128, c),
                mma_dot(m.instr, a.data(), b.data(), 128, c));
    }
  }
  // An fp16 accumulator: C enters rounded to fp16 (RNE), D leaves widened. C = 1 + 2^-12 is an
  // fp16 tie between 1 and 1 + 2^-10: even, 1; a zero product then gives exactly 1.0f.
  ASSERT_TRUE(parse_dot_model("sm90.hmma.f16.f16", &m));
  std::vector<std::uint32_t> z(16, 0u);
  EXPECT_EQ(dot_mma(m, z.data(), z.data(), 16, std::bit_cast<std::uint32_t>(1.0f + 0x1p-12f)),
            std::bit_cast<std::uint32_t>(1.0f));
  // With promotion the chain starts from zero and the FP32 C is added by FADD: 1 + 2^-12 stays.
  ASSERT_TRUE(parse_dot_model("sm90.wgmma.e4m3.f16", &m));
  m.promote = 32;
  std::vector<std::uint32_t> z32(32, 0u);
  EXPECT_EQ(dot_mma(m, z32.data(), z32.data(), 32, std::bit_cast<std::uint32_t>(1.0f + 0x1p-12f)),
            std::bit_cast<std::uint32_t>(1.0f + 0x1p-12f));
}

}  // namespace
}  // namespace attnsim
