// Test helper for the stage kernels: random and adversarial stage inputs (one tile and KV block of
// a prepared input) and a bitwise comparison, shared by the quick and the long tests
// (kernels_test.cpp, kernels_long_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/isa.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim::stagetest {

// Values of one kind of trouble; every case mixes a few.
//  kNormal      N(0, 1)
//  kWide        N(0, 1) · 2^U(-60, 60): products and sums far apart, under- and overflow of FP32
//  kSpecial     a mix of ±0, subnormals, ±Inf, NaN (several payloads and signs), ±FLT_MAX
//  kCoarse      small integers · 2^k: exact products, sums that tie between neighbours
//  kCancel      ±(the same few values): sums that cancel to ±0 and to tiny remainders
enum class Mix { kNormal, kWide, kSpecial, kCoarse, kCancel };

// xoshiro256** (Blackman and Vigna), seeded by splitmix64: the long tests draw about 10^9 values,
// and std::mt19937_64 with std::normal_distribution and generate_canonical took 38% of the
// product kernels' long test (perf).
class Xoshiro256 {
 public:
  using result_type = std::uint64_t;
  explicit Xoshiro256(std::uint64_t seed) {
    for (std::uint64_t& w : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
  }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type(0); }
  result_type operator()() {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

class Values {
 public:
  explicit Values(std::uint64_t seed) : rng_(seed) {}
  Xoshiro256& rng() { return rng_; }
  // Uniform in [lo, hi] (the multiply-shift map: a bias below 2^-32 for these small ranges).
  int uniform(int lo, int hi) {
    const std::uint64_t span = std::uint64_t(std::int64_t(hi) - lo + 1);
    return lo + int((rng_() >> 32) * span >> 32);
  }
  double unit() { return double(rng_() >> 11) * 0x1p-53; }  // [0, 1)
  bool chance(double p) { return unit() < p; }
  // N(0, 1) by the polar method, in double, rounded to float.
  float normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    double u, v, r2;
    do {
      u = 2 * unit() - 1;
      v = 2 * unit() - 1;
      r2 = u * u + v * v;
    } while (r2 >= 1 || r2 == 0);
    const double f = std::sqrt(-2 * std::log(r2) / r2);
    spare_ = float(v * f);
    have_spare_ = true;
    return float(u * f);
  }

  float draw(Mix m) {
    switch (m) {
      case Mix::kNormal:
        return normal();
      case Mix::kWide:
        return std::ldexp(normal(), uniform(-60, 60));
      case Mix::kSpecial: {
        static const std::uint32_t kBits[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u,
                                              0x007FFFFFu, 0x00400000u, 0x00800000u, 0x7F800000u,
                                              0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7FC12345u,
                                              0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u};
        if (chance(0.5)) return std::ldexp(normal(), uniform(-140, -120));  // subnormal products
        return std::bit_cast<float>(kBits[uniform(0, 15)]);
      }
      case Mix::kCoarse:
        return std::ldexp(float(uniform(-8, 8)), uniform(-3, 3));
      case Mix::kCancel: {
        static const float kSet[] = {1.0f, 3.0f, 0.1f, 1e-7f, 1e7f, 0.333333343f};
        const float x = kSet[uniform(0, 5)];
        return chance(0.5) ? x : -x;
      }
    }
    return 0.0f;
  }
  // A whole buffer of one mix, sprinkled with another (each element with probability `rate`).
  void fill(float* x, std::size_t n, Mix base, Mix sprinkle, double rate) {
    for (std::size_t i = 0; i < n; ++i) x[i] = draw(chance(rate) ? sprinkle : base);
  }
  Mix any_mix() { return Mix(uniform(0, 4)); }

 private:
  Xoshiro256 rng_;
  float spare_ = 0.0f;
  bool have_spare_ = false;
};

// Bitwise equality, except that two NaNs are equal: which of two NaN operands an x86 add or
// multiply returns is the one the compiler placed first, and GCC places the reference's operands
// either way within one unrolled loop (objdump of pv.cpp.o), so NaN payloads are not part of any
// model (the GPU returns its canonical NaN).
inline bool same(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}
inline bool same(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// Counts compared elements and mismatches; prints the first few.
struct Tally {
  std::uint64_t compared = 0, mismatched = 0;
  template <class T>
  void check(const T* ref, const T* got, std::size_t n, const std::string& what) {
    for (std::size_t i = 0; i < n; ++i) {
      ++compared;
      if (same(ref[i], got[i])) continue;
      if (++mismatched <= 5)
        ADD_FAILURE() << what << " [" << i << "]: ref " << double(ref[i]) << " (0x" << std::hex
                      << bits(ref[i]) << ") got " << double(got[i]) << " (0x" << bits(got[i])
                      << std::dec << ")";
    }
  }
  static std::uint64_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
  static std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }
};

// One tile and KV block of a random prepared input: Q rows [q_begin, q_begin + rows) of query
// slice 0 (or 1 with GQA), keys [j0, j0 + cols), d, dv, causal with a random offset.
struct BlockCase {
  PreparedInput in;
  TileIndex ti;
  BlockView b;
};

inline BlockCase random_block(Values& g, int max_dim = 160) {
  BlockCase c;
  AttentionShape& s = c.in.shape;
  static const int kBk[] = {16, 32, 64, 64, 64, 128, 40, 7, 24};
  static const int kDims[] = {128, 128, 64, 40, 72, 96, 1, 3, 17, 130, 160, 256};
  c.b.bk = kBk[g.uniform(0, 8)];
  c.b.rows = g.chance(0.2) ? g.uniform(1, 5) : g.uniform(1, 70);
  c.b.cols = g.chance(0.6) ? c.b.bk : g.uniform(1, c.b.bk);
  s.head_dim = std::min(max_dim, kDims[g.uniform(0, 11)]);
  s.head_dim_v = g.chance(0.7) ? s.head_dim : std::min(max_dim, kDims[g.uniform(0, 11)]);
  const bool gqa = g.chance(0.3);
  s.heads_q = gqa ? 2 : 1;
  s.heads_kv = 1;
  c.b.nb = g.uniform(0, 3);
  c.b.j0 = c.b.nb * c.b.bk;
  c.b.n_blocks = c.b.nb + 1 + g.uniform(0, 2);
  c.b.kv_pad = c.b.bk;
  s.len_kv = c.b.j0 + c.b.cols;
  c.ti.q_begin = g.uniform(0, 100);
  s.len_q = c.ti.q_begin + c.b.rows;
  c.in.causal = g.chance(0.5);
  c.ti.sq = gqa ? 1 : 0;
  c.ti.skv = 0;
  // The causal diagonal anywhere across the block (and beyond it on both sides).
  c.ti.offset_kv = c.b.j0 - c.ti.q_begin + g.uniform(-c.b.rows - 8, c.b.cols + 8);
  // Only the rows the block reads are drawn (the others stay 0).
  auto operand = [&](PreparedOperand& o, int slices, int tokens, int dim, int slice, int t0, int n) {
    o.slices = slices;
    o.tokens = tokens;
    o.dim = dim;
    o.values.assign(std::size_t(slices) * tokens * dim, 0.0f);
    g.fill(o.values.data() + (std::size_t(slice) * tokens + t0) * dim, std::size_t(n) * dim,
           g.chance(0.5) ? Mix::kNormal : g.any_mix(), g.any_mix(), g.chance(0.5) ? 0.0 : 0.05);
  };
  operand(c.in.q, s.heads_q, s.len_q, s.head_dim, c.ti.sq, c.ti.q_begin, c.b.rows);
  operand(c.in.k, 1, s.len_kv, s.head_dim, 0, c.b.j0, c.b.cols);
  operand(c.in.v, 1, s.len_kv, s.head_dim_v, 0, c.b.j0, c.b.cols);
  return c;
}

}  // namespace attnsim::stagetest
