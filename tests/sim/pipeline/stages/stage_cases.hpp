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

class Values {
 public:
  explicit Values(std::uint64_t seed) : rng_(seed) {}
  std::mt19937_64& rng() { return rng_; }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  float draw(Mix m) {
    std::normal_distribution<float>& n = normal_;
    switch (m) {
      case Mix::kNormal:
        return n(rng_);
      case Mix::kWide:
        return std::ldexp(n(rng_), uniform(-60, 60));
      case Mix::kSpecial: {
        static const std::uint32_t kBits[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u,
                                              0x007FFFFFu, 0x00400000u, 0x00800000u, 0x7F800000u,
                                              0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7FC12345u,
                                              0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u};
        if (chance(0.5)) return std::ldexp(n(rng_), uniform(-140, -120));  // subnormal products
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
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
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
