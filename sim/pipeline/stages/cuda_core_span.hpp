// When a dot product of FP32 operands summed in FP64 is exact: the exponent span test that lets
// the AVX-512 kernels of DotModel::kExact (qk_cuda_core.cpp, pv_cuda_core.cpp) sum in FP64 lanes
// and round once, and send every other output to the reference's exact register
// (numerics/exact_sum.hpp).
//
// Every product a·b of two FP32 values is an integer multiple of 2^(lsb a + lsb b) (lsb: the
// exponent of the lowest set bit) and |a·b| < 2^(top a + top b + 2) (top: floor(log2 |x|)). If all
// terms (and C) are multiples of 2^L and n terms plus C stay below (n + 1)·2^H, every partial sum is
// an integer multiple of 2^L below 2^(H + ceil(log2(n + 1))); when that is at most 2^(L + 53) every
// partial sum is an FP64 value, so FP64 additions (or FMAs) in any order are exact and one rounding
// to FP32 gives the exact sum's RNE, as ExactSum::round_f32 does.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnsim::cuda_core_span {

// The bounds of a set of values: lo = min lsb, hi = max top over its non-zero elements; `bad` when
// one is Inf or NaN (the reference's IEEE rules then apply: never summed in lanes).
struct Span {
  int lo = 1 << 20;  // no non-zero element: every product is zero
  int hi = -(1 << 20);
  bool bad = false;
  void add(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    u &= 0x7FFFFFFFu;
    if (u == 0) return;
    if (u >= 0x7F800000u) {
      bad = true;
      return;
    }
    const int e = int(u >> 23);
    const std::uint32_t sig = e == 0 ? u : (u & 0x7FFFFFu) | 0x800000u;
    const int base = e == 0 ? -149 : e - 150;  // the exponent of the significand's bit 0
    const int lsb = base + __builtin_ctz(sig);
    const int top = base + 31 - __builtin_clz(sig);
    lo = lsb < lo ? lsb : lo;
    hi = top > hi ? top : hi;
  }
  void add(double x) {
    std::uint64_t u;
    std::memcpy(&u, &x, 8);
    u &= 0x7FFFFFFFFFFFFFFFull;
    if (u == 0) return;
    if (u >= 0x7FF0000000000000ull) {
      bad = true;
      return;
    }
    const int e = int(u >> 52);
    const std::uint64_t sig = e == 0 ? u : (u & 0xFFFFFFFFFFFFFull) | (1ull << 52);
    const int base = e == 0 ? -1074 : e - 1075;
    const int lsb = base + __builtin_ctzll(sig);
    const int top = base + 63 - __builtin_clzll(sig);
    lo = lsb < lo ? lsb : lo;
    hi = top > hi ? top : hi;
  }
};

// ceil(log2(n + 1)) for n >= 0.
inline int log2_terms(int n) {
  int b = 0;
  while ((1ll << b) < std::int64_t(n) + 1) ++b;
  return b;
}

// Whether Σ a_k·b_k (+ c) over n terms, a from span `a`, b from span `b`, c from span `c`, is exact
// in FP64 in any order (above).
inline bool exact_in_fp64(const Span& a, const Span& b, const Span& c, int log2n) {
  if (a.bad || b.bad || c.bad) return false;
  const int lo_ab = a.lo + b.lo, hi_ab = a.hi + b.hi + 2;
  const int lo = lo_ab < c.lo ? lo_ab : c.lo;
  const int hi = hi_ab > c.hi + 1 ? hi_ab : c.hi + 1;
  if (hi < -(1 << 18)) return true;  // every term zero
  return hi + log2n <= lo + 53 && hi + log2n <= 1023;
}

}  // namespace attnsim::cuda_core_span
