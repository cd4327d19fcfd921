// The stage kernels (AVX-512, and AVX2 in the *Avx2 tests) against their references on >= 10^8
// outputs each (products) and >= 10^8 elements over the softmax kernels together: random and
// adversarial blocks of every shape (stage_cases.hpp), both cores. ATTNSIM_KERNEL_CASES scales
// every count (1 = as written).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "numerics/isa.hpp"
#include "tests/sim/pipeline/stages/kernel_checks.hpp"

namespace attnsim {
namespace {

using stagetest::Tally;
using stagetest::Values;

double scale() {
  const char* e = std::getenv("ATTNSIM_KERNEL_CASES");
  return e ? std::atof(e) : 1.0;
}

// Runs `check` on fresh random cases (one generator per thread) until `target` elements were
// compared; every one must equal the reference's.
template <class F>
void compare_until(const char* what, double target, std::uint64_t seed, F check,
                   Isa isa = Isa::kAvx512) {
  if (!isa_supported(isa)) GTEST_SKIP() << "no " << isa_name(isa) << " on this CPU";
  // The kernels of `isa`, restored at the end.
  struct Restore {
    Isa saved = active_isa();
    ~Restore() { set_isa(saved); }
  } restore;
  set_isa(isa);
  const auto want = std::uint64_t(target * scale());
  std::atomic<std::uint64_t> compared{0}, mismatched{0}, cases{0};
#pragma omp parallel
  {
    Values g(seed * 7919 + std::uint64_t(omp_get_thread_num()));
    Tally t;
    while (compared.load(std::memory_order_relaxed) < want) {
      const std::uint64_t before = t.compared;
      check(g, t);
      compared += t.compared - before;
      ++cases;
    }
    mismatched += t.mismatched;
  }
  std::printf("[ stage-kernels ] %s: %llu elements in %llu cases, %llu mismatched\n", what,
              (unsigned long long)compared.load(), (unsigned long long)cases.load(),
              (unsigned long long)mismatched.load());
  EXPECT_EQ(mismatched.load(), 0u);
}

// One random block of the QKᵀ / P·V kernels, FP32 states four times in five.
void qk_case(Values& g, Tally& t) {
  if (g.chance(0.8)) {
    stagetest::check_qk<float>(g, t);
  } else {
    stagetest::check_qk<double>(g, t);
  }
}
void pv_case(Values& g, Tally& t) {
  if (g.chance(0.8)) {
    stagetest::check_pv<float>(g, t);
  } else {
    stagetest::check_pv<double>(g, t);
  }
}

TEST(StageKernelsLong, QkCudaCore) { compare_until("qk_cuda_core", 1e8, 11, qk_case); }
TEST(StageKernelsLong, PvCudaCore) { compare_until("pv_cuda_core", 1e8, 12, pv_case); }
TEST(StageKernelsLong, QkCudaCoreAvx2) {
  compare_until("qk_cuda_core (avx2)", 1e8, 13, qk_case, Isa::kAvx2);
}
TEST(StageKernelsLong, PvCudaCoreAvx2) {
  compare_until("pv_cuda_core (avx2)", 1e8, 14, pv_case, Isa::kAvx2);
}
TEST(StageKernelsLong, QkCudaCoreNeon) {
  compare_until("qk_cuda_core (neon)", 1e8, 15, qk_case, Isa::kNeon);
}
TEST(StageKernelsLong, PvCudaCoreNeon) {
  compare_until("pv_cuda_core (neon)", 1e8, 16, pv_case, Isa::kNeon);
}

// One random block of each softmax-arithmetic kernel.
void softmax_case(Values& g, Tally& t) {
  stagetest::check_scores(g, t);
  stagetest::check_softmax_step(g, t);
  stagetest::check_exp(g, t);
  stagetest::check_row_sum(g, t);
  stagetest::check_rescale(g, t);
  stagetest::check_epilogue(g, t);
}

TEST(StageKernelsLong, SoftmaxArithmetic) {
  compare_until("scores, softmax_step, row_sum, rescale, epilogue", 1e8, 13, softmax_case);
}
TEST(StageKernelsLong, SoftmaxArithmeticAvx2) {
  compare_until("scores, softmax_step, row_sum, rescale, epilogue (avx2)", 1e8, 15, softmax_case,
                Isa::kAvx2);
}

}  // namespace
}  // namespace attnsim
