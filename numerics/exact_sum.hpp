// An exact accumulator of FP64 terms, rounded once to FP32 at the end: the "exact, then rounded"
// model of a matrix unit whose accumulation order is not public (AMLA's Cube unit, issue 13's
// `pv_acc=exact`), and DotModel::kExact of numerics/dot.hpp.
#pragma once

#include <array>
#include <cstdint>

namespace attnsim {

// A fixed-point register wide enough for every finite double (a Kulisch accumulator): the value is
// Σ limb[i] · 2^(32·i − 1074), each limb an int64 holding a signed 32-bit digit plus headroom for
// 2^30 additions before a carry pass. A product of two FP32 values is exact in FP64 (24 + 24 bits
// fit in 53), so a dot product of FP32 operands accumulated here is the exact sum.
// Inf and NaN terms follow IEEE: any NaN, or +Inf with -Inf, gives NaN; otherwise an Inf wins.
class ExactSum {
 public:
  void clear();
  void add(double x);
  // The exact sum rounded to nearest even FP32 (overflow to ±Inf; an exact zero is +0).
  float round_f32() const;
  // The same sum rounded to nearest even FP64 (used by the tests and for FP64 consumers).
  double round_f64() const;

 private:
  static constexpr int kLimbs = 68;  // bit positions 0 .. 2175 above 2^-1074
  std::array<std::int64_t, kLimbs> limb_{};
  int lo_ = kLimbs, hi_ = -1;  // the touched limb range
  int adds_ = 0;
  bool nan_ = false, pos_inf_ = false, neg_inf_ = false;
  void carry_pass();
  // The normalized magnitude as 32-bit digits and its sign; false when the sum is zero.
  bool magnitude(std::array<std::uint32_t, kLimbs + 2>& mag, bool& negative) const;
  double round_to(int man_bits, int min_exp, int max_exp) const;
};

// Σ a[k]·b[k] + c with every product exact and one rounding to FP32 at the end (RNE). The fast
// path sums in four FP64 lanes and checks with TwoSum that no addition rounded (then the FP64 sum
// is exact); otherwise the ExactSum register. An FP64 a[k] is rounded to FP32 first. A NaN or Inf
// anywhere takes the register path (IEEE special cases as ExactSum).
float dot_exact_f32(double c, const float* a, const float* b, int n);
float dot_exact_f32(double c, const double* a, const float* b, int n);
// The reference of record: every term through the ExactSum register.
float dot_exact_f32_ref(double c, const float* a, const float* b, int n);

}  // namespace attnsim
