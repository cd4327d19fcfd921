// numerics/groups: SageAttention2's per-thread maps against an independent derivation from the
// PTX mma fragment layouts (which lane holds which token), and the plain granularities.
#include "numerics/groups.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace attnsim {
namespace {

// Q is the A operand: in an m16nXkY tile, lane l holds rows l/4 and l/4 + 8 (PTX ISA, A and C
// fragments). A warp covers `warp_rows` rows = warp_rows/16 tiles. The scale a lane uses is
// indexed by (warp, lane/4) (qk_int_sv_f8_cuda_sm89.cuh: warp_q*8 + lane/4).
std::map<int, int> q_token_owner(int tokens, int warp_rows) {
  std::map<int, int> owner;  // token -> (warp * 8 + lane / 4)
  for (int w = 0; w * warp_rows < tokens; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int tile = 0; tile < warp_rows / 16; ++tile) {
        for (int half = 0; half < 2; ++half) {
          const int t = w * warp_rows + tile * 16 + lane / 4 + 8 * half;
          if (t < tokens) owner[t] = w * 8 + lane / 4;
        }
      }
    }
  }
  return owner;
}

// K is Bᵀ: tokens are the n dimension; lane l holds columns 2(l%4) and 2(l%4)+1 of each n8 tile;
// the scale index is (warp_k, lane % 4) (k_scale_idx = warp_k*4 + lane%4).
std::map<int, int> k_token_owner(int tokens, int warp_cols) {
  std::map<int, int> owner;
  for (int w = 0; w * warp_cols < tokens; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int tile = 0; tile < warp_cols / 8; ++tile) {
        for (int j = 0; j < 2; ++j) {
          const int t = w * warp_cols + tile * 8 + 2 * (lane % 4) + j;
          if (t < tokens) owner[t] = w * 4 + lane % 4;
        }
      }
    }
  }
  return owner;
}

TEST(Groups, SagePerThreadMatchesFragmentLayouts) {
  for (int tokens : {1, 7, 64, 100, 257, 512}) {
    for (const GroupMap& m : {sage_sm89_q_per_thread(), sage_sm90_q_per_thread()}) {
      const auto owner = q_token_owner(tokens, m.block);
      ASSERT_EQ(int(owner.size()), tokens);
      for (int t = 0; t < tokens; ++t) {
        for (int c : {0, 63})
          ASSERT_EQ(m.group(t, c, tokens, 64), owner.at(t)) << m.describe() << " t=" << t;
        ASSERT_LT(owner.at(t), m.count(tokens, 64));
      }
    }
    for (const GroupMap& m : {sage_sm89_k_per_thread(), sage_sm90_k_per_thread()}) {
      const auto owner = k_token_owner(tokens, m.block);
      for (int t = 0; t < tokens; ++t) {
        ASSERT_EQ(m.group(t, 5, tokens, 64), owner.at(t)) << m.describe() << " t=" << t;
        ASSERT_LT(owner.at(t), m.count(tokens, 64));
      }
    }
  }
}

// The same check element by element, from the PTX ISA fragment tables of the two integer shapes
// ("Matrix Fragments for mma.m16n8k32" .s8 and "mma.m16n8k64" .s4; groupID = lane / 4,
// threadID_in_group = lane % 4):
//   A row of element a_i:  m16n8k32 .s8: groupID for i < 4 or 8 <= i < 12, else groupID + 8
//                          m16n8k64 .s4: groupID for i < 8 or 16 <= i < 24, else groupID + 8
//   C element c_i (i < 4), both shapes: row groupID + 8*(i >= 2), col 2*threadID_in_group + (i & 1)
// Every Q token a lane touches in A and in C, and every K token in a C column, must lie in the
// group whose scale that lane loads (q_scale_idx = warp*8 + lane/4, k_scale_idx = warp*4 + lane%4).
struct IntMmaShape {
  const char* name;
  int a_elems;   // A elements per lane
  int a_period;  // rows switch every a_period/2 elements
};
constexpr IntMmaShape kIntShapes[] = {{"m16n8k32.s8", 16, 8}, {"m16n8k64.s4", 32, 16}};

TEST(Groups, SagePerThreadMatchesElementFragmentsOfBothIntegerShapes) {
  for (const IntMmaShape& shape : kIntShapes) {
    for (int warp_q : {16, 32}) {
      const GroupMap m = sage_per_thread_q(warp_q);
      const int tokens = 4 * warp_q;
      for (int w = 0; w < tokens / warp_q; ++w) {
        for (int lane = 0; lane < 32; ++lane) {
          const int scale_idx = w * 8 + lane / 4;
          for (int tile = 0; tile < warp_q / 16; ++tile) {
            for (int i = 0; i < shape.a_elems; ++i) {
              const int row = lane / 4 + ((i % shape.a_period) < shape.a_period / 2 ? 0 : 8);
              ASSERT_EQ(m.group(w * warp_q + tile * 16 + row, 0, tokens, 1), scale_idx)
                  << shape.name;
            }
            for (int i = 0; i < 4; ++i) {
              const int row = lane / 4 + (i >= 2 ? 8 : 0);
              ASSERT_EQ(m.group(w * warp_q + tile * 16 + row, 0, tokens, 1), scale_idx)
                  << shape.name;
            }
          }
        }
      }
    }
    for (int warp_k : {64, 128}) {
      const GroupMap m = sage_per_thread_k(warp_k);
      const int tokens = 3 * warp_k;
      std::vector<int> hits(std::size_t(tokens), 0);
      for (int w = 0; w < tokens / warp_k; ++w) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int tile = 0; tile < warp_k / 8; ++tile) {
            for (int i = 0; i < 4; ++i) {
              const int t = w * warp_k + tile * 8 + 2 * (lane % 4) + (i & 1);
              ASSERT_EQ(m.group(t, 3, tokens, 8), w * 4 + lane % 4) << shape.name;
              ++hits[std::size_t(t)];
            }
          }
        }
      }
      // Every key is a C column of exactly the 8 lanes of one threadID_in_group, twice (c0/c2).
      for (int h : hits) ASSERT_EQ(h, 16);
    }
  }
}

TEST(Groups, NamedKernelMaps) {
  // seed-code.md 1.4 table, row by row.
  EXPECT_EQ(sage_sm89_q_per_warp().group(95, 0, 128, 1), 2);
  EXPECT_EQ(sage_sm89_k_per_warp().group(130, 0, 256, 1), 2);
  EXPECT_EQ(sage_sm90_q_per_warp().group(47, 0, 64, 1), 2);
  EXPECT_EQ(sage_sm90_k_per_warp().group(300, 0, 512, 1), 2);
  EXPECT_EQ(sage_triton_q_per_block().group(300, 0, 512, 1), 2);
  EXPECT_EQ(sage_triton_k_per_block().group(130, 0, 512, 1), 2);
  EXPECT_EQ(sage_sm90_q_per_thread().group(21, 0, 64, 1), 8 + 5);    // (21//16)*8 + 21%8
  EXPECT_EQ(sage_sm90_k_per_thread().group(133, 0, 256, 1), 4 + 2);  // (133//128)*4 + (5//2)
  EXPECT_EQ(sage_sm89_k_per_thread().group(71, 0, 128, 1), 4 + 3);   // (71//64)*4 + (7//2)
  // Padding: 100 tokens with WARPQ 32 still have 4 full warps' worth of groups.
  EXPECT_EQ(sage_sm89_q_per_thread().count(100, 64), 32);
}

TEST(Groups, CountsEqualTheKernelsScaleTensorSizes) {
  // Scale tensor lengths allocated by sageattention (core.py / quant_per_thread.py / quant.py):
  //   per_thread Q: ceil(L/BLKQ) * (BLKQ/WARPQ) * 8, K: ceil(L/BLKK) * (BLKK/WARPK) * 4,
  //   per_warp Q: ceil(L/BLKQ) * (BLKQ/WARPQ), per_block K: ceil(L/BLKK).
  auto cdiv = [](int a, int b) { return (a + b - 1) / b; };
  for (int L : {1, 63, 64, 100, 128, 130, 1000}) {
    EXPECT_EQ(sage_sm89_q_per_thread().count(L, 64), cdiv(L, 128) * 4 * 8) << L;
    EXPECT_EQ(sage_sm89_k_per_thread().count(L, 64), cdiv(L, 64) * 1 * 4) << L;
    EXPECT_EQ(sage_sm90_q_per_thread().count(L, 64), cdiv(L, 64) * 4 * 8) << L;
    EXPECT_EQ(sage_sm90_k_per_thread().count(L, 64), cdiv(L, 128) * 1 * 4) << L;
    EXPECT_EQ(sage_per_thread_q(16, 128).count(L, 64), cdiv(L, 128) * 8 * 8) << L;  // sm80 case
    EXPECT_EQ(sage_sm89_q_per_warp().count(L, 64), cdiv(L, 128) * 4) << L;
    EXPECT_EQ(sage_sm90_q_per_warp().count(L, 64), cdiv(L, 64) * 4) << L;
    EXPECT_EQ(sage_sm89_k_per_warp().count(L, 64), cdiv(L, 64)) << L;
    EXPECT_EQ(sage_sm90_k_per_warp().count(L, 64), cdiv(L, 128)) << L;
    EXPECT_EQ(sage_triton_q_per_block().count(L, 64), cdiv(L, 128)) << L;
    // Without a CTA tile the length is rounded up to the warp only.
    EXPECT_EQ(sage_per_thread_q(32).count(L, 64), cdiv(L, 32) * 8) << L;
  }
  EXPECT_EQ(sage_sm89_q_per_thread().describe(), "sage_per_thread_q(32, pad 128)");
  EXPECT_EQ((GroupMap{Granularity::kPerTensor, 1, 64}).describe(), "per_tensor(pad 64)");
  EXPECT_EQ((GroupMap{Granularity::kPerToken, 1}).describe(), "per_token");
}

TEST(Groups, SagePerThreadGroupSizes) {
  // sm89: a Q group is 4 tokens {g, g+8, g+16, g+24} of a 32-row warp; a K group 16 tokens of 64.
  std::map<int, std::set<int>> q, k;
  for (int t = 0; t < 128; ++t) {
    q[sage_sm89_q_per_thread().group(t, 0, 128, 1)].insert(t);
    k[sage_sm89_k_per_thread().group(t, 0, 128, 1)].insert(t);
  }
  EXPECT_EQ(q.size(), 32u);
  EXPECT_EQ(q[1], (std::set<int>{1, 9, 17, 25}));
  EXPECT_EQ(k.size(), 8u);
  for (const auto& [g, s] : k) EXPECT_EQ(s.size(), 16u);
  EXPECT_TRUE(k[5].count(64 + 2) && k[5].count(64 + 3) && k[5].count(64 + 10));
}

TEST(Groups, PlainGranularities) {
  const int T = 10, C = 3;
  EXPECT_EQ((GroupMap{Granularity::kPerTensor, 1}).count(T, C), 1);
  EXPECT_EQ((GroupMap{Granularity::kPerBlock, 4}).count(T, C), 3);
  EXPECT_EQ((GroupMap{Granularity::kPerBlock, 4}).group(9, 2, T, C), 2);
  EXPECT_EQ((GroupMap{Granularity::kPerToken, 1}).group(7, 1, T, C), 7);
  EXPECT_EQ((GroupMap{Granularity::kPerChannel, 1}).group(7, 1, T, C), 1);
  EXPECT_EQ((GroupMap{Granularity::kPerBlockChannel, 4}).count(T, C), 9);
  EXPECT_EQ((GroupMap{Granularity::kPerBlockChannel, 4}).group(5, 2, T, C), 1 * 3 + 2);
}

}  // namespace
}  // namespace attnsim
