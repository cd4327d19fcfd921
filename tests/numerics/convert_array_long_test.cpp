// numerics/convert_array over ALL 2^32 FP32 inputs: each vector kernel against its `_ref` loop
// over formats/, for the (format, rounding) pairs that the presets use and no independent oracle
// sweep covers: bf16 and fp16 ties-away (AMLA's P and output casts), round_array (the P cast) and
// the quantizers' integer roundings. The pairs that an oracle sweep covers are swept through the
// same array functions against the independent oracles (by default the vector kernels, under
// ATTNSIM_ISA=scalar the references): tests/formats/convert_long_test.cpp and
// convert_bits_long_test.cpp (bf16 rne/rz/ru/rd, fp16 rne/rz, e4m3fn rne/rz/rna, e5m2 rne) and
// tests/hw/cvt_h100_long_test.cpp (the H100 over all 2^32 inputs: e4m3fn/e5m2 satfinite, bf16
// rn/rz, fp16 rn/rz/rm/rp, s8 rni.sat). The rounding modes no preset uses (e4m3fn ru/rd, e5m2
// rna/rz/ru/rd) and fp16's IEEE modes against the reference are in convert_array_full_test.cpp
// (label full, not in CI). The policy only decides the lanes that the kernels hand to the scalar
// encoder, so one policy per pair proves the vector arithmetic; the policies themselves are swept
// in the unit test on every upper half. Label: exhaustive (OpenMP).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/numerics/convert_array_sweep.hpp"

namespace attnsim {
namespace {

using convert_sweep::encode_vs_ref;
using convert_sweep::int_vs_ref;
using convert_sweep::sweep_blocks;

TEST(ConvertArrayAllInputs, Bf16TiesAway) {
  encode_vs_ref<std::uint16_t>(Encoding::kBf16, Round::kNearestAway, "bf16 rna");
}
TEST(ConvertArrayAllInputs, Fp16TiesAway) {
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kNearestAway, "fp16 rna");
}
// round_array: the kernels' widening of every finite code, over every input of the two roundings
// the pipeline's P cast uses most (fp16 and e4m3fn, nearest even).
TEST(ConvertArrayAllInputs, RoundArrayFp16AndE4m3fn) {
  for (Encoding e : {Encoding::kFp16, Encoding::kE4m3fn}) {
    sweep_blocks(encoding_name(e), [&](const float* x, std::size_t n) {
      thread_local std::vector<float> got, want;
      got.resize(n);
      want.resize(n);
      round_array(e, x, n, got.data(), kCudaSatfinite);
      round_array_ref(e, x, n, want.data(), kCudaSatfinite);
      return std::uint64_t(std::memcmp(got.data(), want.data(), n * 4) != 0 ? 1 : 0);
    });
  }
}
// The integer roundings of the quantizers (s8 rni.sat is also swept against the H100). One kernel
// per rounding mode serves every width (the width sets only the two clamp bounds): each mode the
// quantizers use is swept at s8, and the s4 bounds under rni; s4 rzi.sat is in
// convert_array_full_test.cpp (label full).
TEST(ConvertArrayAllInputs, IntRoundings) {
  int_vs_ref(Round::kNearestEven, 8, "s8 rni.sat");
  int_vs_ref(Round::kTowardZero, 8, "s8 rzi.sat");
  int_vs_ref(Round::kUp, 8, "s8 rpi.sat");
  int_vs_ref(Round::kNearestEven, 4, "s4 rni.sat");
}

}  // namespace
}  // namespace attnsim
