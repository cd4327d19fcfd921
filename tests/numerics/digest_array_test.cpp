// numerics/digest_array: the vector sum of digest terms against its reference loop, bit for bit
// (every length up to 200 and long arrays, indices that wrap past 2^32, outputs at the ends of
// their range), and the reference against splitmix64's published first outputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "numerics/digest.hpp"
#include "numerics/digest_array.hpp"
#include "numerics/isa.hpp"

namespace attnsim {
namespace {

// splitmix64's reference generator (Vigna's splitmix64.c) seeded with 0 yields 0xE220A8397B1DCDAF
// first and 0x6E789E6AA1B965F4 second: its state advances by the golden-ratio constant before each
// finalisation, so the k-th output is digest_term's mixer at (k - 1) * 0x9E3779B97F4A7C15.
TEST(DigestArray, ReferenceMixerMatchesPublishedSplitmixOutputs) {
  EXPECT_EQ(digest_term(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(digest_sum_ref(0, std::vector<std::uint32_t>{0}.data(), 1), 0xE220A8397B1DCDAFull);
  std::vector<std::uint32_t> two{7, 0xFFFFFFFFu};
  EXPECT_EQ(digest_sum_ref(0xFFFFFFFFu, two.data(), 2),
            splitmix64((0xFFFFFFFFull << 32) | 7) + splitmix64(0xFFFFFFFFull));
}

TEST(DigestArray, VectorSumEqualsTheReference) {
  std::mt19937_64 rng(20261127);
  std::vector<std::uint32_t> out(1u << 16);
  for (auto& v : out) {
    switch (rng() % 4) {
      case 0:
        v = 0;
        break;
      case 1:
        v = 0xFFFFFFFFu;
        break;
      default:
        v = std::uint32_t(rng());
    }
  }
  const std::uint32_t firsts[] = {0u, 1u, 0x7FFFFFF0u, 0xFFFFFF00u, 0xFFFFFFF9u, 0xFFFFFFFFu};
  int compared = 0;
  for (std::uint32_t first : firsts) {
    for (std::size_t n = 0; n <= 200; ++n) {
      const std::size_t off = rng() % 64;
      ASSERT_EQ(digest_sum(first, out.data() + off, n), digest_sum_ref(first, out.data() + off, n))
          << "first " << first << " n " << n << " (" << isa_name(active_isa()) << ")";
      ++compared;
    }
    EXPECT_EQ(digest_sum(first, out.data(), out.size()), digest_sum_ref(first, out.data(), out.size()))
        << "first " << first;
  }
  EXPECT_EQ(compared, 6 * 201);
}

}  // namespace
}  // namespace attnsim
