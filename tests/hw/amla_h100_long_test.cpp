// The exhaustive-suite part of tests/hw/amla_h100_test.cpp: sim/amla against the recording of our
// CUDA MLA-decode kernels on the cases larger than 128 rows × 1000 keys (G = 128 with S up to
// 8192, batch 2). The negative controls run in the default suite only (AmlaH100.
// NegativeControlsDiffer, on the small cases): a control that differs from the kernel on a subset
// differs on every superset, so running them on every case here proved nothing more (35 s).
#include <gtest/gtest.h>

#include "tests/hw/amla_check.hpp"

namespace attnsim {
namespace {

bool large(const hwtest::AmlaCase& c) { return !hwtest::amla_small(c); }

TEST(AmlaH100Long, CannMatchesTheAmlaKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kCann, "amla", large);
}

TEST(AmlaH100Long, BaseMatchesTheBaseKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kBase, "base", large);
}

}  // namespace
}  // namespace attnsim
