// sim/pipeline/stages: the fast stage kernels (qk_mma, pv_mma, row_sum_mma on the instruction
// models' tile kernels; qk_int, pv_int for integer operands under an exact product) give their
// references' bits. Every technique preset whose products go through them, and method strings
// that reach each kernel with ragged shapes (keys past a block, head dims not a multiple of the
// instruction's k, SageAttention's in-16 key order, chunked and C-chained P·V), run once with the
// instruction set capped at scalar (the stage references: qk_ref, pv_ref, row_sum_ref) and once
// at this CPU's level, on random inputs with wide, tiny and outlier values; O and the LSE must be
// equal bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "numerics/isa.hpp"
#include "numerics/mma_tile.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

// N(0, σ²) values with a few outliers (±2^k for k up to 14), exact zeros and subnormal-sized
// values mixed in, rounded to bf16 as a bf16 dump holds them.
AttentionInput adversarial_input(AttentionShape s, bool causal, std::uint32_t seed, double sigma) {
  AttentionInput in = simtest::random_input(s, causal, seed, sigma);
  std::mt19937 rng(seed ^ 0x9E3779B9u);
  for (std::vector<float>* x : {&in.q, &in.k, &in.v})
    for (float& v : *x) {
      const std::uint32_t r = rng() % 64;
      if (r == 0) v = std::ldexp((rng() & 1) ? 1.0f : -1.0f, int(rng() % 15));
      if (r == 1) v = 0.0f;
      if (r == 2) v = std::ldexp(v, -120);
      // bf16, round to nearest even (every value here is finite)
      std::uint32_t b = std::bit_cast<std::uint32_t>(v);
      b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
      v = std::bit_cast<float>(b);
    }
  in.dtype = "bfloat16";
  return in;
}

std::size_t differing(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    n += std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i]);
  return n;
}

const char* const kMethods[] = {
    // The FP32 CUDA-core kernels (flash's products and softmax arithmetic), and the baselines
    // whose stage choices those kernels leave to the references (.ftz state, SDPA/FA3 row sums,
    // the FMA-chain product, FA3 FP8's descales).
    "flash",
    "flash:acc=fp64",
    "flash:qkv=bf16,p=bf16,out=bf16",
    "flash:qkv=fp16,p=fp16,out=fp16,qk_dot=exact,pv_dot=exact,norm=div",
    "sdpa",
    "sdpa:backend=flash",
    "sdpa:backend=efficient",
    "sdpa:backend=math",
    "fa3",
    "fa3:dtype=e4m3",
    // FA3 FP8 without its fast math: the descaled coefficient reaches the softmax-step kernels.
    "fa3:dtype=e4m3,ftz=off",
    "kivi",
    "sage1",
    "sage2:arch=sm80",
    "sage2:arch=sm89",
    "sage2:arch=sm89,target=h100",
    "sage2:arch=sm90",
    "sage2:arch=paper",
    "sage2:arch=paper,target=h100",
    "sage2:arch=sm90,qk=int4",
    "turbo:mode=prefill",
    "turbo",
    "amla",
    "amla:variant=base",
    "amla:variant=paper,target=h100",
    "lean",
    "splitkv",
    // Each instruction model family through the generic stages.
    "flash:qkv=bf16,qk_dot=sm90.hmma.bf16.f32,pv_dot=sm90.wgmma.bf16.f32,p=bf16",
    "flash:qkv=fp16,qk_dot=sm90.hmma.f16.f32,pv_dot=sm90.hmma.f16.f16,p=fp16,out=fp16",
    "flash:qkv=bf16,v=e4m3fn,v_quant=amax448,v_gran=per_channel,p=e4m3fn,out=bf16,"
    "qk_dot=sm90.hmma.bf16.f32,pv_dot=sm90.wgmma.e4m3.f32,pv_promote=128,bk=128",
    "flash:qkv=s8,v=bf16,q_quant=sage_cuda_int8,k_quant=sage_cuda_int8,q_gran=per_thread,"
    "q_block=16,k_gran=per_thread,k_block=128,k_mean=tokens,mean_fmt=bf16,"
    "qk_dot=sm90.wgmma.s8.s32,int_cvt=rz,dequant=fold,max=scaled,max_offset=8.807,"
    "rowsum=single,p=bf16,pv_dot=sm90.wgmma.bf16.f32,pv_acc=chunk,bk=128,out=fp16",
    // The tensor-core row sum (row_sum_mma), in natural and SageAttention's in-16 key order.
    "flash:qkv=fp16,p=fp16,qk_dot=sm90.hmma.f16.f32,pv_dot=sm90.hmma.f16.f32,rowsum=mma",
    "flash:qkv=fp16,p=fp16,qk_dot=sm90.hmma.f16.f32,pv_dot=sm90.hmma.f16.f16,o_acc=fp16,"
    "rowsum=mma,pv_perm=sage16,out=fp16",
    "flash:qkv=bf16,v=e4m3fn,v_quant=amax448,p=e4m3fn,qk_dot=sm90.hmma.bf16.f32,"
    "pv_dot=sm89.mma_sync.e4m3.f32,pv_acc=chunk,rowsum=mma,rowsum_dot=sm89.mma_sync.e4m3.f32,"
    "pv_perm=sage16,bk=64",
    // Integer operands under exact product models (qk_int, pv_int).
    "flash:qkv=s8,q_quant=turbo_int8_119,k_quant=turbo_int8_119,v_quant=turbo_int8_119,"
    "q_gran=per_block,q_block=32,k_gran=per_block,v_gran=per_block,q_mean=block,"
    "q_mean_block=32,qk_dot=fp64,pv_dot=fp32,p=s8,p_scale=row,p_quant=turbo_int8_119,"
    "pv_acc=chunk,exp=exp.exact,bq=32",
    "flash:qkv=s8,q_quant=symmetric_int8,k_quant=symmetric_int8,v_quant=symmetric_int8,"
    "qk_dot=fp32,pv_dot=exact,p=s8,p_scale=row,p_quant=symmetric_int8,pv_acc=chunk",
    "flash:q=s4,k=s4,v=s2,q_quant=symmetric_int4,k_quant=symmetric_int4,"
    "v_quant=symmetric_int2,qk_dot=fp64,pv_dot=fp64,p=s8,p_scale=row,"
    "p_quant=symmetric_int8,pv_acc=chunk",
};

// One input of the tests below: a shape, the causal mask, the values' spread.
struct Case {
  AttentionShape s;
  bool causal;
  double sigma;
};

// run_pipeline takes the query heads of a KV group together, block by block, on short tiles
// (decode, MLA), and the kernels then prepare each K and V block once per group
// (sim/pipeline/tile.cpp attend_tiles): the same bits as one tile at a time, for every preset, on
// GQA and MLA-like decode shapes (one to three query rows per head, ragged last blocks), under
// the fast kernels and the references.
TEST(FastStages, GroupedDecodeTilesEqualOneTileAtATime) {
  IsaGuard guard;
  const Isa fast = active_isa();
  const Case cases[] = {
      {{1, 8, 2, 1, 300, 128, 128}, false, 1.0},
      {{2, 12, 2, 3, 200, 72, 72}, true, 6.0},
      {{1, 32, 1, 1, 260, 96, 80}, false, 0.05},
  };
  const std::int64_t before = grouped_tile_items();
  int ran = 0;
  for (const char* text : kMethods) {
    const MethodConfig m = parse_method(text);
    std::uint32_t seed = 11;
    for (const Case& c : cases) {
      const AttentionInput in = adversarial_input(c.s, c.causal, seed++, c.sigma);
      for (Isa isa : {fast, Isa::kScalar}) {
        set_isa(isa);
        MethodOutput alone, grouped;
        set_tile_grouping(false);
        try {
          alone = m.run(in);
        } catch (const std::exception&) {
          set_tile_grouping(true);
          EXPECT_THROW(m.run(in), std::exception) << text;
          continue;
        }
        set_tile_grouping(true);
        grouped = m.run(in);
        EXPECT_EQ(differing(alone.o, grouped.o), 0u)
            << text << " " << isa_name(isa) << " shape " << c.s.heads_q << "/" << c.s.heads_kv
            << " heads, " << c.s.len_q << "x" << c.s.len_kv;
        EXPECT_EQ(differing(alone.lse, grouped.lse), 0u) << text << " (LSE)";
        ++ran;
      }
    }
  }
  set_tile_grouping(true);
  EXPECT_GE(ran, int(std::size(kMethods)) * 2);
  EXPECT_GT(grouped_tile_items(), before) << "no preset took the grouped tiles";
}

TEST(FastStages, EveryPresetEqualsItsStageReferences) {
  if (active_isa() == Isa::kScalar)
    GTEST_SKIP() << "scalar: the stages already run their references";
  IsaGuard guard;
  // Every level above scalar that this CPU runs up to the active one (AVX2 and NEON have the
  // CUDA-core products' kernels, AVX-512 and AMX the rest), each against the references.
  std::vector<Isa> levels;
  for (Isa l : supported_isas())
    if (l != Isa::kScalar && l <= guard.saved) levels.push_back(l);
  for (const Isa fast : levels) {
    SCOPED_TRACE(isa_name(fast));
  // head_dim 72 and 200 keys: a ragged last KV block, d not a multiple of any instruction's k;
  // grouped heads; more queries than keys (rows that see no key).
  const Case cases[] = {
      {{1, 2, 1, 150, 200, 128, 128}, true, 1.0},
      {{1, 2, 2, 64, 192, 72, 72}, false, 6.0},
      {{1, 1, 1, 96, 80, 64, 64}, true, 0.05},
  };
  int ran = 0;
  for (const char* text : kMethods) {
    const MethodConfig m = parse_method(text);
    std::uint32_t seed = 7;
    for (const Case& c : cases) {
      const AttentionInput in = adversarial_input(c.s, c.causal, seed++, c.sigma);
      MethodOutput want, got;
      try {
        set_isa(Isa::kScalar);
        want = m.run(in);
      } catch (const std::exception& e) {
        // A method that does not take this shape refuses it the same way at every level.
        set_isa(fast);
        EXPECT_THROW(m.run(in), std::exception) << text;
        continue;
      }
      set_isa(fast);
      got = m.run(in);
      EXPECT_EQ(differing(want.o, got.o), 0u) << text << " shape " << c.s.len_q << "x"
                                               << c.s.len_kv << " d" << c.s.head_dim;
      EXPECT_EQ(differing(want.lse, got.lse), 0u) << text << " (LSE)";
      ++ran;
    }
  }
  EXPECT_GE(ran, int(std::size(kMethods)) * 2);
  }
}

}  // namespace
}  // namespace attnsim
