// numerics/mma_tile: the tile kernels against the per-output reference (dot_mma for every output),
// bit for bit, on a quick sample of random and adversarial tiles of every instruction model
// (mma_tile_long_test.cpp runs 10^8 outputs); which kernel runs under each instruction-set cap.
#include "numerics/mma_tile.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "numerics/isa.hpp"
#include "tests/numerics/mma_tile_cases.hpp"

namespace attnsim {
namespace {

using namespace tile_cases;

// Restores the instruction-set cap a test changes.
struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

std::size_t compare_models(std::mt19937& rng, int problems_per_model) {
  std::size_t outputs = 0;
  for (const DotModel& m : all_models()) {
    const int step = dot_requirements(m).k_step;
    for (int trial = 0; trial < problems_per_model; ++trial) {
      const int rows = 1 + int(rng() % 9), cols = 1 + int(rng() % 70);
      const int n = step * (1 + int(rng() % 3));
      const Problem p = make_problem(rng, m, rows, cols, n, trial % 6);
      const std::vector<std::uint32_t> want = run(p, m, dot_mma_tile_ref);
      const std::vector<std::uint32_t> got = run(p, m, dot_mma_tile);
      for (std::size_t e = 0; e < want.size(); ++e) {
        if (want[e] == got[e]) continue;
        ADD_FAILURE() << model_name(m) << " trial " << trial << " output (" << e / cols << ", "
                      << e % cols << ") of " << rows << "x" << cols << "x" << n << ": ref 0x"
                      << std::hex << want[e] << ", tile 0x" << got[e];
        return outputs;
      }
      outputs += want.size();
    }
  }
  return outputs;
}

// The instruction sets with tile kernels that this CPU runs (the reference is compared at each).
std::vector<Isa> kernel_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (detected_isa() >= i) out.push_back(i);
  return out;
}

TEST(MmaTile, EveryModelEqualsThePerOutputReference) {
  IsaGuard g;
  if (kernel_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU: every model takes the reference";
  for (Isa isa : kernel_isas()) {
    set_isa(isa);
    std::mt19937 rng(23);
    const std::size_t n = compare_models(rng, 36);
    std::printf("%s: %zu outputs compared (kernels: hmma %s, qgmma %s, imma %s)\n", isa_name(isa),
                n, dot_mma_tile_kernel(DotModel{DotModel::kMma, MmaInstr::kHmmaF16F32, 0}),
                dot_mma_tile_kernel(DotModel{DotModel::kMma, MmaInstr::kWgmmaE4m3F32, 0}),
                dot_mma_tile_kernel(DotModel{DotModel::kMma, MmaInstr::kImmaS8, 0}));
    EXPECT_GT(n, 100000u) << isa_name(isa);
  }
}

// A keyed A (MmaTile::a_key: Q's rows across a tile's KV blocks) is prepared once and reused by
// later calls with the same key, model and shape, also after calls with other operands in
// between; a new key, model or shape prepares it again.
TEST(MmaTile, KeyedOperandIsReusedOnlyUnderItsKey) {
  std::mt19937 rng(5);
  for (const DotModel& m : {DotModel{DotModel::kMma, MmaInstr::kHmmaBf16F32, 0},
                            DotModel{DotModel::kMma, MmaInstr::kImmaS8, 0},
                            DotModel{DotModel::kMma, MmaInstr::kWgmmaE4m3F32, 128}}) {
    const int n = dot_requirements(m).k_step * 2;
    const std::uint64_t key = next_mma_tile_key();
    Problem first = make_problem(rng, m, 6, 40, n, 1);
    for (int call = 0; call < 6; ++call) {
      // Same A (and key) with fresh B and C; every other call an unkeyed problem in between.
      Problem p = make_problem(rng, m, 6, 40, n, call % 6);
      p.a = first.a;
      p.lda = first.lda;
      p.av = first.av;
      p.k_index.clear();
      auto keyed = [key](const DotModel& mm, MmaTile t) {
        t.a_key = key;
        dot_mma_tile(mm, t);
      };
      EXPECT_EQ(run(p, m, keyed), run(p, m, dot_mma_tile_ref)) << model_name(m) << " call " << call;
      const Problem other = make_problem(rng, m, 6, 40, n, 0);
      EXPECT_EQ(run(other, m, dot_mma_tile), run(other, m, dot_mma_tile_ref));
    }
    // A different A under a new key.
    const Problem q = make_problem(rng, m, 6, 40, n, 2);
    const std::uint64_t key2 = next_mma_tile_key();
    auto keyed2 = [key2](const DotModel& mm, MmaTile t) {
      t.a_key = key2;
      dot_mma_tile(mm, t);
    };
    EXPECT_EQ(run(q, m, keyed2), run(q, m, dot_mma_tile_ref)) << model_name(m);
  }
}

// A keyed B (MmaTile::b_key: a K or V block read by the tiles of a KV group) is packed once and
// reused by later calls with its key, model and shape while it is one of the last two keys used
// (K and V of one block); a third key evicts the older one, which is then packed again.
TEST(MmaTile, KeyedBIsReusedOnlyUnderItsKey) {
  std::mt19937 rng(9);
  for (const DotModel& m : {DotModel{DotModel::kMma, MmaInstr::kHmmaBf16F32, 0},
                            DotModel{DotModel::kMma, MmaInstr::kImmaS8, 0},
                            DotModel{DotModel::kMma, MmaInstr::kWgmmaE4m3F32, 128}}) {
    const int n = dot_requirements(m).k_step * 2;
    const std::uint64_t kb[3] = {next_mma_tile_key(), next_mma_tile_key(), next_mma_tile_key()};
    const Problem bs[3] = {make_problem(rng, m, 5, 40, n, 1), make_problem(rng, m, 5, 40, n, 3),
                           make_problem(rng, m, 5, 40, n, 4)};
    // Keys 0, 1, 0, 1, 2, 0, 2, 1, ...: hits, and misses after an eviction.
    const int order[] = {0, 1, 0, 1, 2, 0, 2, 1, 1, 0};
    for (int call = 0; call < int(std::size(order)); ++call) {
      const int w = order[call];
      Problem p = make_problem(rng, m, 5, 40, n, call % 6);  // fresh A and C
      p.b = bs[w].b;
      p.ldb = bs[w].ldb;
      p.bv = bs[w].bv;
      p.b_row_major = bs[w].b_row_major;
      p.k_index = bs[w].k_index;
      const std::uint64_t key = kb[w];
      auto keyed = [key](const DotModel& mm, MmaTile t) {
        t.b_key = key;
        dot_mma_tile(mm, t);
      };
      EXPECT_EQ(run(p, m, keyed), run(p, m, dot_mma_tile_ref)) << model_name(m) << " call " << call;
      if (call % 3 == 0) {  // an unkeyed product in between leaves the kept ones alone
        const Problem other = make_problem(rng, m, 5, 40, n, 0);
        EXPECT_EQ(run(other, m, dot_mma_tile), run(other, m, dot_mma_tile_ref));
      }
    }
  }
}

// Below the kernels' instruction set every model takes the reference; at or above, the float
// models take the block-FMA kernel (the test above then compared the kernel, not the reference
// with itself).
TEST(MmaTile, KernelFollowsTheInstructionSet) {
  IsaGuard g;
  for (const DotModel& m : all_models()) {
    set_isa(Isa::kScalar);
    EXPECT_STREQ(dot_mma_tile_kernel(m), "ref") << model_name(m);
  }
  for (Isa isa : kernel_isas()) {
    if (isa == Isa::kAmx) continue;
    set_isa(isa);
    const char* want = isa == Isa::kAvx512 ? "block_fma.avx512" : "block_fma.avx2";
    for (const DotModel& m : all_models()) {
      const bool integer = dot_requirements(m).integer_acc;
      if (!integer) {
        EXPECT_STREQ(dot_mma_tile_kernel(m), want) << model_name(m);
      }
    }
  }
}

}  // namespace
}  // namespace attnsim
