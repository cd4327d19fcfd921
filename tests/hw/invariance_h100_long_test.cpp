// Every schedule sweep of data/hw/h100/schedule/invariance_h100.h5 (the decode sweeps, and the
// prefill and prefill-against-decode cases of each kernel family), bit for bit, and the identity
// table exact (tests/hw/invariance_sweeps.hpp).
#include "tests/hw/invariance_sweeps.hpp"

namespace attnsim {
namespace {

TEST(InvarianceH100Long, EveryScheduleSweepBitForBitAndTheIdentityTableExact) {
  hwtest::check_sweeps(hwtest::kSweepNames);
}

}  // namespace
}  // namespace attnsim
