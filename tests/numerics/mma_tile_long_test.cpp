// numerics/mma_tile at length: the tile kernels against the per-output reference (dot_mma for
// every output), bit for bit, on 10^8 outputs of random and adversarial tiles (every instruction
// model and its promoted form, every operand mode, values and position indices, strided B, C
// aliasing D), in the shapes the stages use (up to 64 rows and 128 columns). OpenMP over seeds:
// each seed's problems are fixed, so a failure names a reproducible (model, seed).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "numerics/isa.hpp"
#include "tests/numerics/mma_tile_cases.hpp"

namespace attnsim {
namespace {

using namespace tile_cases;

// 10^8 outputs at one instruction set's kernels (the cap is process-wide: set before the threads).
void hundred_million_at(Isa isa) {
  const Isa saved = active_isa();
  set_isa(isa);
  const std::vector<DotModel> models = all_models();
  constexpr std::uint64_t kTarget = 100'000'000;
  const std::uint64_t per_model = kTarget / models.size() + 1;
  std::atomic<std::uint64_t> compared{0}, mismatches{0};
  std::string first_failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (int mi = 0; mi < int(models.size()); ++mi) {
    const DotModel& m = models[std::size_t(mi)];
    const int step = dot_requirements(m).k_step;
    std::uint64_t done = 0;
    for (std::uint32_t seed = 0; done < per_model; ++seed) {
      std::mt19937 rng(seed * 977u + std::uint32_t(mi));
      // Mostly the stages' shapes (a Q block of up to 64 rows times a KV block of up to 128
      // keys, or P times V's columns), sometimes ragged ones.
      const bool big = rng() % 4 != 0;
      const int rows = big ? 16 * (1 + int(rng() % 4)) : 1 + int(rng() % 9);
      const int cols = big ? 32 * (1 + int(rng() % 4)) : 1 + int(rng() % 70);
      const int n = step * (1 + int(rng() % (big ? 4 : 3)));
      const Problem p = make_problem(rng, m, rows, cols, n, int(seed % 6));
      const std::vector<std::uint32_t> want = run(p, m, dot_mma_tile_ref);
      const std::vector<std::uint32_t> got = run(p, m, dot_mma_tile);
      std::uint64_t bad = 0;
      for (std::size_t e = 0; e < want.size(); ++e) bad += want[e] != got[e];
      if (bad) {
#pragma omp critical
        if (first_failure.empty())
          first_failure = model_name(m) + " seed " + std::to_string(seed) + ": " +
                          std::to_string(bad) + " of " + std::to_string(want.size()) + " outputs";
        mismatches += bad;
      }
      done += want.size();
    }
    compared += done;
  }
  set_isa(saved);
  std::printf("%s: %llu outputs compared over %zu models (threads %d)\n", isa_name(isa),
              static_cast<unsigned long long>(compared.load()), models.size(),
              omp_get_max_threads());
  EXPECT_EQ(mismatches.load(), 0u) << isa_name(isa) << ": " << first_failure;
  EXPECT_GE(compared.load(), kTarget);
}

TEST(MmaTileLong, HundredMillionOutputsEqualThePerOutputReferenceAvx2) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  hundred_million_at(Isa::kAvx2);
}

TEST(MmaTileLong, HundredMillionOutputsEqualThePerOutputReference) {
  if (detected_isa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  hundred_million_at(detected_isa());
}

}  // namespace
}  // namespace attnsim
