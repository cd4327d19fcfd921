// The stage kernels of every kernel set this CPU runs (AVX-512, AVX2; NEON's CUDA-core products),
// against their references on a
// quick sample of random and adversarial blocks (kernels_long_test.cpp runs >= 10^8 outputs):
// every tile shape, partial blocks, causal diagonals, FP32 and FP64 states, subnormals, Inf, NaN,
// overflow, ties and cancellation.
#include <gtest/gtest.h>

#include <vector>

#include "numerics/isa.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "tests/sim/pipeline/stages/kernel_checks.hpp"

namespace attnsim {
namespace {

using stagetest::Tally;
using stagetest::Values;

// The sets of the dispatch table this CPU runs that have the kernel `has` asks about (scalar, the
// references, excluded): AVX2 and AVX-512 for every stage kernel, NEON for the CUDA-core products.
template <class Has>
std::vector<Isa> kernel_isas(Has has) {
  std::vector<Isa> out;
  for (Isa i : supported_isas()) {
    const StageKernels* k = stage_kernels_for(i);
    if (i != Isa::kScalar && k && has(*k)) out.push_back(i);
  }
  return out;
}

// `count` random blocks of `check` at each such set (kernel_checks.hpp calls that set's kernel).
template <class Has, class Check>
void isa_cases(std::uint64_t seed, int count, Has has, Check check) {
  const std::vector<Isa> isas = kernel_isas(has);
  if (isas.empty()) GTEST_SKIP() << "no kernel set of this CPU has this kernel";
  const Isa saved = active_isa();
  for (Isa isa : isas) {
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

bool cuda_core(const StageKernels& k) { return k.cuda_core != CudaCoreKernels::kNone; }
// The softmax arithmetic's kernels come together (every set with one has all five).
bool softmax(const StageKernels& k) { return k.scores != nullptr; }

TEST(StageKernels, QkCudaCoreEqualsReference) {
  isa_cases(1, 300, cuda_core, [](Values& g, Tally& t) {
    stagetest::check_qk<float>(g, t);
    stagetest::check_qk<double>(g, t);
  });
}

TEST(StageKernels, PvCudaCoreEqualsReference) {
  isa_cases(2, 300, cuda_core, [](Values& g, Tally& t) {
    stagetest::check_pv<float>(g, t);
    stagetest::check_pv<double>(g, t);
  });
}

TEST(StageKernels, ScoresEqualsReference) {
  isa_cases(3, 600, softmax, [](Values& g, Tally& t) { stagetest::check_scores(g, t); });
}

TEST(StageKernels, SoftmaxStepEqualsReference) {
  isa_cases(4, 600, softmax, [](Values& g, Tally& t) { stagetest::check_softmax_step(g, t); });
}

TEST(StageKernels, ExpEqualsReference) {
  isa_cases(8, 600, softmax, [](Values& g, Tally& t) { stagetest::check_exp(g, t); });
}

TEST(StageKernels, RowSumEqualsReference) {
  isa_cases(5, 600, softmax, [](Values& g, Tally& t) { stagetest::check_row_sum(g, t); });
}

TEST(StageKernels, RescaleAndChunkAddEqualsReference) {
  isa_cases(6, 600, softmax, [](Values& g, Tally& t) { stagetest::check_rescale(g, t); });
}

TEST(StageKernels, EpilogueEqualsReference) {
  isa_cases(7, 600, softmax, [](Values& g, Tally& t) { stagetest::check_epilogue(g, t); });
}

}  // namespace
}  // namespace attnsim
