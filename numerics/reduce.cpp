#include "numerics/reduce.hpp"

#include <array>

namespace attnsim {

namespace {

constexpr int kThreads = 256, kWarp = 32;

// One warp's xor butterfly: after the shuffle with mask m every lane holds v[l] + v[l ^ m]
// (FADD is commutative, so lane l's value is the same whichever operand is its own).
void butterfly(std::array<float, kWarp>& v) {
  for (int m = 16; m >= 1; m /= 2) {
    std::array<float, kWarp> next;
    for (int l = 0; l < kWarp; ++l) next[l] = v[l] + v[l ^ m];
    v = next;
  }
}

}  // namespace

float sage_mean_scale_sum(const float* stored, int n) {
  std::array<float, kThreads> part{};
  for (int t = 0; t < kThreads; ++t) {
    float s = 0.0f;
    for (int base = 8 * t; base < n; base += 8 * kThreads)
      for (int j = 0; j < 8 && base + j < n; ++j) s = s + stored[base + j];
    part[t] = s;
  }
  std::array<float, kWarp> warp_sums{};
  for (int w = 0; w < kThreads / kWarp; ++w) {
    std::array<float, kWarp> v;
    for (int l = 0; l < kWarp; ++l) v[l] = part[w * kWarp + l];
    butterfly(v);
    warp_sums[w] = v[0];
  }
  butterfly(warp_sums);  // lanes 8..31 hold 0
  return warp_sums[0];
}

float sage_mean_scale_sum_ref(const float* stored, int n) {
  // Lane 0's value after the butterfly 16, 8, 4, 2, 1: the last shuffle (mask 1) adds the sum
  // of the odd lanes to that of the even lanes, and so on down: F(stride, first) over lanes
  // first, first + stride, ... is F(2·stride, first) + F(2·stride, first + stride).
  struct Tree {
    static float sum(const float* x, int stride, int first) {
      if (stride == kWarp) return x[first];
      return sum(x, 2 * stride, first) + sum(x, 2 * stride, first + stride);
    }
  };
  float part[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    float s = 0.0f;
    int i = 0;
    while (true) {
      const int base = 8 * t + i * 8 * kThreads;
      if (base >= n) break;
      const int end = base + 8 < n ? base + 8 : n;
      for (int k = base; k < end; ++k) s += stored[k];
      ++i;
    }
    part[t] = s;
  }
  float lanes[kWarp] = {};
  for (int w = 0; w < kThreads / kWarp; ++w) lanes[w] = Tree::sum(part + w * kWarp, 1, 0);
  return Tree::sum(lanes, 1, 0);
}

}  // namespace attnsim
