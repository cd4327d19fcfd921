// The AVX-512 stage kernels (and the CUDA-core products' AVX2 and NEON ones) against their
// references on a quick sample of random and adversarial blocks (kernels_long_test.cpp runs >= 10^8 outputs):
// every tile shape, partial blocks, causal diagonals, FP32 and FP64 states, subnormals, Inf, NaN,
// overflow, ties and cancellation.
#include <gtest/gtest.h>

#include <vector>

#include "numerics/isa.hpp"
#include "tests/sim/pipeline/stages/kernel_checks.hpp"

namespace attnsim {
namespace {

using stagetest::Tally;
using stagetest::Values;

// The CUDA-core product kernels have an AVX-512, an AVX2 and a NEON version: each that this CPU
// runs.
std::vector<Isa> cuda_core_isas() {
  std::vector<Isa> out;
  for (Isa i : supported_isas())
    if (i != Isa::kScalar) out.push_back(i);
  return out;
}

// 300 random blocks of `check` (FP32 and FP64 states) at each ISA with CUDA-core kernels.
template <class Check>
void cuda_core_cases(std::uint64_t seed, Check check) {
  if (cuda_core_isas().empty()) GTEST_SKIP() << "no AVX2 or NEON on this CPU";
  const Isa saved = active_isa();
  for (Isa isa : cuda_core_isas()) {
    set_isa(isa);
    Values g(seed);
    Tally t;
    for (int i = 0; i < 300; ++i) check(g, t);
    EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared << " (" << isa_name(isa) << ")";
    std::printf("[ stage-kernels ] %s: %llu elements compared\n", isa_name(isa),
                (unsigned long long)t.compared);
  }
  set_isa(saved);
}

TEST(StageKernels, QkCudaCoreEqualsReference) {
  cuda_core_cases(1, [](Values& g, Tally& t) {
    stagetest::check_qk<float>(g, t);
    stagetest::check_qk<double>(g, t);
  });
}

TEST(StageKernels, PvCudaCoreEqualsReference) {
  cuda_core_cases(2, [](Values& g, Tally& t) {
    stagetest::check_pv<float>(g, t);
    stagetest::check_pv<double>(g, t);
  });
}

// The softmax kernels: x86-64's alone (AVX-512).
#if ATTNSIM_X86_KERNELS
bool have_avx512() { return detected_isa() >= Isa::kAvx512; }

TEST(StageKernels, ScoresAvx512EqualsReference) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  Values g(3);
  Tally t;
  for (int i = 0; i < 600; ++i) stagetest::check_scores(g, t);
  EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared;
  std::printf("[ stage-kernels ] %llu elements compared\n", (unsigned long long)t.compared);
}

TEST(StageKernels, SoftmaxStepAvx512EqualsReference) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  Values g(4);
  Tally t;
  for (int i = 0; i < 600; ++i) stagetest::check_softmax_step(g, t);
  EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared;
  std::printf("[ stage-kernels ] %llu elements compared\n", (unsigned long long)t.compared);
}

TEST(StageKernels, RowSumAvx512EqualsReference) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  Values g(5);
  Tally t;
  for (int i = 0; i < 600; ++i) stagetest::check_row_sum(g, t);
  EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared;
  std::printf("[ stage-kernels ] %llu elements compared\n", (unsigned long long)t.compared);
}

TEST(StageKernels, RescaleAndChunkAddAvx512EqualsReference) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  Values g(6);
  Tally t;
  for (int i = 0; i < 600; ++i) stagetest::check_rescale(g, t);
  EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared;
  std::printf("[ stage-kernels ] %llu elements compared\n", (unsigned long long)t.compared);
}

TEST(StageKernels, EpilogueAvx512EqualsReference) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  Values g(7);
  Tally t;
  for (int i = 0; i < 600; ++i) stagetest::check_epilogue(g, t);
  EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared;
  std::printf("[ stage-kernels ] %llu elements compared\n", (unsigned long long)t.compared);
}
#endif  // ATTNSIM_X86_KERNELS

}  // namespace
}  // namespace attnsim
