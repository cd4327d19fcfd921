// The stage kernels, AVX-512 and AVX2 (each ISA this CPU runs), against their references on a
// quick sample of random and adversarial blocks (kernels_long_test.cpp runs >= 10^8 outputs):
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

// Every stage kernel has an AVX-512 and an AVX2 version: each level that this CPU runs.
std::vector<Isa> kernel_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512})
    if (detected_isa() >= i) out.push_back(i);
  return out;
}

// `count` random blocks of `check` at each ISA with kernels (kernel_checks.hpp calls that ISA's).
template <class Check>
void isa_cases(std::uint64_t seed, int count, Check check) {
  if (kernel_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const Isa saved = active_isa();
  for (Isa isa : kernel_isas()) {
    set_isa(isa);
    Values g(seed);
    Tally t;
    for (int i = 0; i < count; ++i) check(g, t);
    EXPECT_EQ(t.mismatched, 0u) << "of " << t.compared << " (" << isa_name(isa) << ")";
    std::printf("[ stage-kernels ] %s: %llu elements compared\n", isa_name(isa),
                (unsigned long long)t.compared);
  }
  set_isa(saved);
}

TEST(StageKernels, QkCudaCoreEqualsReference) {
  isa_cases(1, 300, [](Values& g, Tally& t) {
    stagetest::check_qk<float>(g, t);
    stagetest::check_qk<double>(g, t);
  });
}

TEST(StageKernels, PvCudaCoreEqualsReference) {
  isa_cases(2, 300, [](Values& g, Tally& t) {
    stagetest::check_pv<float>(g, t);
    stagetest::check_pv<double>(g, t);
  });
}

TEST(StageKernels, ScoresEqualsReference) {
  isa_cases(3, 600, [](Values& g, Tally& t) { stagetest::check_scores(g, t); });
}

TEST(StageKernels, SoftmaxStepEqualsReference) {
  isa_cases(4, 600, [](Values& g, Tally& t) { stagetest::check_softmax_step(g, t); });
}

TEST(StageKernels, RowSumEqualsReference) {
  isa_cases(5, 600, [](Values& g, Tally& t) { stagetest::check_row_sum(g, t); });
}

TEST(StageKernels, RescaleAndChunkAddEqualsReference) {
  isa_cases(6, 600, [](Values& g, Tally& t) { stagetest::check_rescale(g, t); });
}

TEST(StageKernels, EpilogueEqualsReference) {
  isa_cases(7, 600, [](Values& g, Tally& t) { stagetest::check_epilogue(g, t); });
}

}  // namespace
}  // namespace attnsim
