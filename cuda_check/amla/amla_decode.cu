// MLA decode on the H100 in two kernels of our own, to cross-validate sim/amla bit for bit
// (tests/hw/amla_h100_test.cpp) and to time AMLA's rescale against FlashAttention's:
//   amla  (`amla:variant=cann,target=h100`): O lives in global memory as FP32; from the second KV
//         block on, each element is rescaled by an integer atomicAdd on its FP32 bits (AMLA,
//         Liao et al., Alg. 2 lines 15-17, with the public CANN kernel's N and compensation),
//         and each block's P·V chunk is added by a float atomicAdd (line 20);
//   base  (`amla:variant=base,target=h100`): O in registers, O·alpha + chunk (Alg. 1 line 9).
// Both run the same tiles and products:
//   S     = Q Kᵀ by mma.sync.m16n8k16.f32.bf16.bf16.f32 chained over the 576 channels in natural
//           order from C = 0 (the HMMA model numerics/mma.hpp, DotModel{kMma, kHmmaBf16F32});
//   x     = fl(S · c), c = fl32(double(fl32(sm_scale)) · log2 e) from the host (ScaleLog2::
//           kHostDouble); m = max(m, max_j x_j) over the KV block of 512 keys;
//   alpha = ex2.approx.ftz(m_old − m); l = l·alpha, then l += p_j one key at a time in key order;
//   p_j   = ex2.approx.ftz(x_j − m); P = bf16(p_j · S16) ties away (amla) or bf16(p_j) RNE (base);
//   chunk = mma.sync P·V over the block's keys in natural order from C = 0 (keys past S: P = 0 and
//           V = 0, the zero padding of the model's k reduction);
//   amla: n = roundf(−m) (ties away), S32 = ex2(m + n), S16 = bf16(S32) ties away, cof = S32/S16,
//         eps = ((cof_prev/cof) + (−1))·1.5, N = roundf((max(n − n_prev, −30) + (eps + 1e-6))·2^23)
//         (sim/amla amla_step, target kH100); O = 0 at the start, then per block N (not on the
//         first) and the chunk (so the first block is 0 + chunk, as the model's);
//   out   = O / (l·S16) after |O| <= 1e10 else 0 (amla), O / l (base); bf16 RNE.
// Every float operation is an explicit IEEE _rn intrinsic (and the build says -fmad=false):
// nothing is contracted. Each O element belongs to one thread for the whole row (no two CTAs or
// threads touch it), so the atomics only serve as AMLA's in-memory read-modify-write and the order
// of operations is fixed. The float atomic is REDG.E.ADD.F32.FTZ.RN: it flushes subnormal operands
// and results and returns the canonical NaN (`amla_decode probe`; data/hw/h100/amla/README.md).
//
// Tiles: one CTA = 32 query rows (heads) of one batch element, 8 warps. QK: warp w owns keys
// 64w..64w+63 of the block (2 m-tiles x 8 n-tiles); PV: warp w owns O channels 64w..64w+63.
// K streams through shared memory in 32-channel slices of the whole 512-key block, V in 32-key
// slices of all 512 channels, cp.async double-buffered; scores and P stay in shared memory. AMLA's
// atomics go row by row (one 128-byte line per warp instruction), spread over the next block's
// tensor-core stages (see add_int / add_chunk).
//
// Build and run from the repository root (cuda_check/amla/run_amla.sh does all of it):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -fmad=false -I.
//        cuda_check/amla/amla_decode.cu -o amla_decode
//   ./amla_decode probe             the FP32 atomicAdd on subnormals (does it flush?)
//   ./amla_decode record DIR [CASE] every case of tests/hw/amla_cases.hpp (or one), both kernels
//   ./amla_decode time FILE         timings, G = 128, S = 4096..32768, batch 1 and 33
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/hw/amla_cases.hpp"

#include "cuda_check/probe_util.cuh"

namespace {

constexpr int kDk = 576, kDv = 512, kBlock = 512;
constexpr int kRows = 32, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kKc = 32;                 // K channels per pipeline stage
constexpr int kVk = 32;                 // V keys per pipeline stage
constexpr int kKStages = kDk / kKc;     // 18
constexpr int kVStages = kBlock / kVk;  // 16
constexpr int kStagesPerBlock = kKStages + kVStages;
// Row strides in elements, padded by 16 bytes so that ldmatrix's 8 row addresses hit 8 distinct
// 16-byte bank groups.
constexpr int kQStride = kDk + 8;     // bf16
constexpr int kKStride = kKc + 8;     // bf16
constexpr int kVStride = kDv + 8;     // bf16
constexpr int kSStride = kBlock + 8;  // float
constexpr int kPStride = kBlock + 8;  // bf16
constexpr int kKStageElems = kBlock * kKStride, kVStageElems = kVk * kVStride;
constexpr int kStageElems = kKStageElems > kVStageElems ? kKStageElems : kVStageElems;
constexpr std::size_t kSmemQ = std::size_t(kRows) * kQStride * 2;
constexpr std::size_t kSmemStages = 2 * std::size_t(kStageElems) * 2;
constexpr std::size_t kSmemS = std::size_t(kRows) * kSStride * 4;
constexpr std::size_t kSmemP = std::size_t(kRows) * kPStride * 2;
constexpr std::size_t kSmemRow = std::size_t(kRows) * 8 * 4;
constexpr std::size_t kSmemBytes = kSmemQ + kSmemStages + kSmemS + kSmemP + kSmemRow;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

struct Args {
  const std::uint16_t* q;  // [B][G][576] bf16
  const std::uint16_t* k;  // [B][S][576]
  const std::uint16_t* v;  // [B][S][ldv] (ldv = 576 when V = K[:, :512])
  int ldv;
  int batch, g, s;
  float c;              // fl32(double(fl32(sm_scale)) · log2 e)
  float* o;             // amla: O in global memory, [B][G][512] FP32; base: raw O copy or null
  std::uint16_t* out;   // [B][G][512] bf16
  std::uint32_t* rows;  // [B][G][4]: m, l, n, S16 (FP32 bits) or null
};

__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// bf16 with ties away from zero (CANN's Cast(..., CAST_ROUND)): add half an ulp to the magnitude
// bits and truncate. Finite inputs; a carry into the exponent is the correct rounding up.
__device__ __forceinline__ std::uint16_t bf16_ties_away(float x) {
  return std::uint16_t((__float_as_uint(x) + 0x8000u) >> 16);
}
__device__ __forceinline__ std::uint16_t bf16_rne(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float bf16_to_float(std::uint16_t b) {
  return __uint_as_float(std::uint32_t(b) << 16);
}

using attnsim::probe::cp_async16;
using attnsim::probe::cp_async_commit;
using attnsim::probe::smem_addr;
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;"); }

using attnsim::probe::ldmatrix_x4;
using attnsim::probe::ldmatrix_x4_trans;
// D = A·B + D, one HMMA.16816.F32.BF16.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Per-row values shared through shared memory (one row each).
struct RowSmem {
  float m[kRows], s16[kRows], alpha[kRows], l[kRows];
  int nint[kRows], first[kRows], pad0[kRows], pad1[kRows];
};
static_assert(sizeof(RowSmem) == kSmemRow, "row block");

// One stage of the global copy sequence: stage i < 18 of a KV block is K's channels
// [32i, 32i + 32) for all 512 keys; stage 18 + i is V's keys [32i, 32i + 32), all channels.
__device__ __forceinline__ void issue_stage(const Args& a, int b, int gs, std::uint16_t* stage) {
  const int nb = gs / kStagesPerBlock, i = gs % kStagesPerBlock, j0 = nb * kBlock;
  if (i < kKStages) {
    for (int r = 0; r < 8; ++r) {
      const int cpy = threadIdx.x + kThreads * r, key = cpy >> 2, part = cpy & 3;
      const bool live = j0 + key < a.s;
      const std::uint16_t* src =
          a.k + (std::size_t(b) * a.s + (live ? j0 + key : 0)) * kDk + kKc * i + 8 * part;
      cp_async16(stage + key * kKStride + 8 * part, src, live ? 16 : 0);
    }
  } else {
    const int kb = j0 + kVk * (i - kKStages);
    for (int r = 0; r < 8; ++r) {
      const int cpy = threadIdx.x + kThreads * r, key = cpy >> 6, part = cpy & 63;
      const bool live = kb + key < a.s;
      const std::uint16_t* src =
          a.v + (std::size_t(b) * a.s + (live ? kb + key : 0)) * a.ldv + 8 * part;
      cp_async16(stage + key * kVStride + 8 * part, src, live ? 16 : 0);
    }
  }
}

// The CANN step of one row (sim/amla amla_step, variant kCann, comp kCann, target kH100).
struct CannRow {
  float n_prev = 0.0f, cof_prev = 1.0f, s16 = 1.0f, n = 0.0f;
};
__device__ __forceinline__ int cann_step(CannRow& st, float m, bool first) {
  const float n = roundf(-m);  // CAST_ROUND of −m: ties away from zero
  const float s32 = ex2_approx_ftz(__fadd_rn(m, n));
  const float s16 = bf16_to_float(bf16_ties_away(s32));
  const float cof = __fdiv_rn(s32, s16);
  const float cof_prev = first ? 1.0f : st.cof_prev;
  const float eps = __fmul_rn(__fadd_rn(__fdiv_rn(cof_prev, cof), -1.0f), 1.5f);
  const float dn = first ? 0.0f : __fsub_rn(n, st.n_prev);
  const float nc = dn > -30.0f ? dn : -30.0f;
  const float nf = __fmul_rn(__fadd_rn(nc, __fadd_rn(eps, 0.000001f)), 8388608.0f);
  st.n_prev = n;
  st.cof_prev = cof;
  st.s16 = s16;
  st.n = n;
  return int(roundf(nf));  // CAST_ROUND to int32: ties away from zero
}

template <bool kAmla>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  std::uint16_t* sq = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t* stages = reinterpret_cast<std::uint16_t*>(smem + kSmemQ);
  float* ss = reinterpret_cast<float*>(smem + kSmemQ + kSmemStages);
  std::uint16_t* sp = reinterpret_cast<std::uint16_t*>(smem + kSmemQ + kSmemStages + kSmemS);
  RowSmem& rs = *reinterpret_cast<RowSmem*>(smem + kSmemQ + kSmemStages + kSmemS + kSmemP);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.y, row0 = blockIdx.x * kRows;
  const int n_blocks = (a.s + kBlock - 1) / kBlock;
  const int total = n_blocks * kStagesPerBlock;

  // Q tile (rows past G are zero) and the first stage: one copy group.
  for (int cpy = threadIdx.x; cpy < kRows * (kDk / 8); cpy += kThreads) {
    const int r = cpy / (kDk / 8), part = cpy % (kDk / 8);
    const bool live = row0 + r < a.g;
    const std::uint16_t* src =
        a.q + (std::size_t(b) * a.g + (live ? row0 + r : 0)) * kDk + 8 * part;
    cp_async16(sq + r * kQStride + 8 * part, src, live ? 16 : 0);
  }
  issue_stage(a, b, 0, stages);
  cp_async_commit();

  // The softmax role: warp w, lanes 8r..8r+7 serve row 4w + r; lane 8r holds the row's state.
  const int srow = 4 * warp + (lane >> 3), sub = lane & 7;
  float m_run = -INFINITY, l_run = 0.0f;
  CannRow cann;

  // The P·V chunk in registers: (row 16mt + g (+8), channel 64·warp + 8nt + 2t (+1)). Base keeps
  // O there too.
  float acc[2][8][4];    // QK accumulators, then the P·V chunk
  float o_reg[2][8][4];  // base: O
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_reg[mt][nt][e] = 0.0f;
  auto o_index = [&](int r, int ch) { return (std::size_t(b) * a.g + row0 + r) * kDv + ch; };
  // AMLA's O in global memory. Its element (r, c) belongs to thread (r & 1)·128 + (c & 127) for
  // the whole row, as its "slot" k = r / 2, q = c / 128: a warp's atomic covers 32 consecutive
  // floats of one row (one 128-byte line). The two in-memory updates, Alg. 2 lines 16-17
  // (AtomicAdd<INT32>: N on the FP32 bits, every block but the row's first) and line 20
  // (AtomicAdd<FP32>: the chunk), are spread over the tensor-core stages, rows 2k and 2k + 1 at
  // stage k, so that they drain while the MMAs run: the chunk of block i (staged through the
  // score buffer) during block i+1's QK stages, N of block i+1 during its P·V stages; per element
  // the order is chunk(i − 1), N(i), chunk(i).
  const int orow = threadIdx.x >> 7, ocol = threadIdx.x & 127;
  auto add_int = [&](int k) {
    const int r = 2 * k + orow;
    if (row0 + r < a.g && !rs.first[r]) {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        atomicAdd(reinterpret_cast<int*>(a.o + o_index(r, ocol + 128 * q)), rs.nint[r]);
    }
  };
  auto add_chunk = [&](int k) {
    const int r = 2 * k + orow;
    if (row0 + r < a.g) {
#pragma unroll
      for (int q = 0; q < 4; ++q)
        atomicAdd(a.o + o_index(r, ocol + 128 * q), ss[r * kSStride + ocol + 128 * q]);
    }
  };
  // The chunk (acc) to the score buffer, as the scores are written.
  auto stage_chunk = [&]() {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * mt + g + 8 * h, ch = 64 * warp + 8 * nt + 2 * t;
          *reinterpret_cast<float2*>(ss + r * kSStride + ch) =
              make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        }
  };
  if (kAmla) {
    for (int k = 0; k < kRows / 2; ++k) {
      const int r = 2 * k + orow;
      if (row0 + r < a.g)
        for (int q = 0; q < 4; ++q) a.o[o_index(r, ocol + 128 * q)] = 0.0f;
    }
  }

  for (int gs = 0; gs < total; ++gs) {
    if (gs + 1 < total) issue_stage(a, b, gs + 1, stages + ((gs + 1) & 1) * kStageElems);
    cp_async_commit();
    cp_async_wait1();
    __syncthreads();
    const std::uint16_t* st = stages + (gs & 1) * kStageElems;
    const int nb = gs / kStagesPerBlock, i = gs % kStagesPerBlock, j0 = nb * kBlock;
    const int cols = min(kBlock, a.s - j0);
    if (i < kKStages) {
      if (kAmla && nb > 0 && i < kRows / 2) {
        if (i == 0) {
          // The previous block's chunk: its l-sum reads of the buffer are over (loop barrier).
          stage_chunk();
          __syncthreads();
        }
        add_chunk(i);
      }
      // 1. S = Q Kᵀ, channels [32i, 32i + 32): two k-steps of the chain.
      if (i == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        std::uint32_t af[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          ldmatrix_x4(af[mt], sq + (16 * mt + (lane & 15)) * kQStride + kKc * i + 16 * ks +
                                  8 * (lane >> 4));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          std::uint32_t bf[4];
          ldmatrix_x4(bf, st + (64 * warp + 16 * np + (lane & 7) + 8 * (lane >> 4)) * kKStride +
                              16 * ks + 8 * ((lane >> 3) & 1));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma_bf16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
            mma_bf16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
          }
        }
      }
      if (i == kKStages - 1) {
        // 2. x = fl(S·c) to shared memory.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * mt + g + 8 * h, key = 64 * warp + 8 * nt + 2 * t;
              float2 x;
              x.x = __fmul_rn(acc[mt][nt][2 * h], a.c);
              x.y = __fmul_rn(acc[mt][nt][2 * h + 1], a.c);
              *reinterpret_cast<float2*>(ss + r * kSStride + key) = x;
            }
        __syncthreads();
        // 3. The row's block max (the first of the maximal keys, as the model's sequential scan
        //    keeps: it fixes the sign of a zero max), then the row step.
        float* srow_x = ss + srow * kSStride;
        float bmax = -INFINITY;
        int bidx = 1 << 30;
        for (int q = 0; q < kBlock / 8; ++q) {
          const int j = sub + 8 * q;
          if (j < cols) {
            const float x = srow_x[j];
            if (x > bmax) bmax = x, bidx = j;
          }
        }
#pragma unroll
        for (int off = 1; off < 8; off <<= 1) {
          const float ov = __shfl_xor_sync(0xFFFFFFFFu, bmax, off);
          const int oi = __shfl_xor_sync(0xFFFFFFFFu, bidx, off);
          if (ov > bmax || (ov == bmax && oi < bidx)) bmax = ov, bidx = oi;
        }
        if (sub == 0) {
          const float m_old = m_run;
          const bool first = m_old == -INFINITY;
          m_run = bmax > m_run ? bmax : m_run;
          const float alpha = ex2_approx_ftz(__fsub_rn(m_old, m_run));
          l_run = __fmul_rn(l_run, alpha);
          float s16 = 1.0f;
          int nint = 0;
          if (kAmla) {
            nint = cann_step(cann, m_run, first);
            s16 = cann.s16;
          }
          rs.m[srow] = m_run;
          rs.s16[srow] = s16;
          rs.alpha[srow] = alpha;
          rs.nint[srow] = nint;
          rs.first[srow] = first ? 1 : 0;
        }
        __syncwarp();
        const float m = rs.m[srow], s16 = rs.s16[srow];
        // 4. p = ex2(x − m) (kept in place for the row sum) and P = bf16(p·S16) / bf16(p).
        std::uint16_t* prow = sp + srow * kPStride;
        for (int q = 0; q < kBlock / 8; ++q) {
          const int j = sub + 8 * q;
          std::uint16_t pb = 0;
          if (j < cols) {
            const float p = ex2_approx_ftz(__fsub_rn(srow_x[j], m));
            srow_x[j] = p;
            pb = kAmla ? bf16_ties_away(__fmul_rn(p, s16)) : bf16_rne(p);
          }
          prow[j] = pb;
        }
      }
    } else {
      // 5. chunk = P·V over keys [kb, kb + 32) of the block, two k-steps of the chain; the row
      //    sum follows the keys one by one on the row's lane meanwhile.
      const int iv = i - kKStages, kb = kVk * iv;
      if (iv == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      }
      if (kAmla) add_int(iv);
      if (sub == 0) {
        const float* px = ss + srow * kSStride;
        const int jn = min(kb + kVk, cols);
        for (int j = kb; j < jn; ++j) l_run = __fadd_rn(l_run, px[j]);
      }
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        std::uint32_t af[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          ldmatrix_x4(af[mt],
                      sp + (16 * mt + (lane & 15)) * kPStride + kb + 16 * ks + 8 * (lane >> 4));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          std::uint32_t bf[4];
          ldmatrix_x4_trans(bf, st + (16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1)) * kVStride +
                                    64 * warp + 16 * np + 8 * (lane >> 4));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma_bf16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
            mma_bf16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
          }
        }
      }
      if (!kAmla && iv == kVStages - 1) {
        // 6. Base: O = O·alpha + chunk in registers.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float al0 = rs.alpha[16 * mt + g], al1 = rs.alpha[16 * mt + g + 8];
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              o_reg[mt][nt][e] =
                  __fadd_rn(__fmul_rn(o_reg[mt][nt][e], e < 2 ? al0 : al1), acc[mt][nt][e]);
        }
      }
    }
    __syncthreads();
  }

  // 7. Epilogue: the last chunk's atomics (amla), then O / (l·S16) or O / l.
  if (kAmla) {
    stage_chunk();
    __syncthreads();
    for (int k = 0; k < kRows / 2; ++k) add_chunk(k);
  }
  if (sub == 0) {
    rs.l[srow] = l_run;
    rs.s16[srow] = kAmla ? cann.s16 : 1.0f;
    if (a.rows && row0 + srow < a.g) {
      std::uint32_t* w = a.rows + (std::size_t(b) * a.g + row0 + srow) * 4;
      w[0] = __float_as_uint(m_run);
      w[1] = __float_as_uint(l_run);
      w[2] = __float_as_uint(kAmla ? cann.n : 0.0f);
      w[3] = __float_as_uint(kAmla ? cann.s16 : 1.0f);
    }
  }
  __syncthreads();
  if (kAmla) {
    for (int k = 0; k < kRows / 2; ++k) {
      const int r = 2 * k + orow;
      if (row0 + r >= a.g) continue;
      const float sum = __fmul_rn(rs.l[r], rs.s16[r]);
      for (int q = 0; q < 4; ++q) {
        const std::size_t idx = o_index(r, ocol + 128 * q);
        // The thread's own atomics on this address precede this load in program order.
        float x = __ldcg(a.o + idx);
        if (!(fabsf(x) <= 1e10f)) x = 0.0f;
        a.out[idx] = bf16_rne(__fdiv_rn(x, sum));
      }
    }
  } else {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 16 * mt + g + 8 * (e >> 1);
          if (row0 + r >= a.g) continue;
          const std::size_t idx = o_index(r, 64 * warp + 8 * nt + 2 * t + (e & 1));
          const float l = rs.l[r], x = o_reg[mt][nt][e];
          if (a.o) a.o[idx] = x;
          a.out[idx] = bf16_rne((l == 0.0f || l != l) ? x : __fdiv_rn(x, l));
        }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

using attnsim::probe::to_device;

float exp_coefficient() {
  // pipeline.cpp exp_constants<float>, ScaleLog2::kHostDouble: fl32(double(fl32(sm_scale))·log2 e).
  const double sm_scale = 1.0 / std::sqrt(double(kDk));
  return float(double(float(sm_scale)) * 1.44269504088896340736);
}

void launch(bool amla, const Args& a, cudaStream_t stream = 0) {
  const dim3 grid((a.g + kRows - 1) / kRows, a.batch);
  if (amla) {
    mla_decode_kernel<true><<<grid, kThreads, kSmemBytes, stream>>>(a);
  } else {
    mla_decode_kernel<false><<<grid, kThreads, kSmemBytes, stream>>>(a);
  }
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
}

void set_smem_limits() {
  ATTNSIM_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kSmemBytes)));
  ATTNSIM_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kSmemBytes)));
}

// Does the FP32 atomicAdd (RED/ATOM .ADD.F32 on global memory) keep subnormal operands and
// results as the IEEE add does? The model adds the chunk with an IEEE FADD.
__global__ void atomic_probe_kernel(float* mem, const float* add, float* ieee, int n) {
  const int i = threadIdx.x;
  if (i < n) {
    ieee[i] = __fadd_rn(mem[i], add[i]);
    atomicAdd(mem + i, add[i]);
  }
}

int run_probe() {
  const float sub1 = 0x1p-140f, sub2 = 0x1p-130f, tiny = 0x1.8p-126f;
  auto nan_bits = [](std::uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
  };
  // Subnormal operands and results, signed zeros, then NaN payloads (quiet, negative, signaling)
  // on either side: what AMLA's garbage elements meet after an integer add broke Lemma 3.1.
  const std::vector<float> m0 = {0.0f,
                                 sub1,
                                 sub2,
                                 1.0f,
                                 tiny,
                                 -0.0f,
                                 0.0f,
                                 0x1p-126f,
                                 nan_bits(0xFFE4D330u),
                                 1.0f,
                                 nan_bits(0x7F800001u),
                                 nan_bits(0x7FC00000u)};
  const std::vector<float> ad = {sub1, 0.0f,  sub2,       sub1, -0x1p-126f,
                                 0.0f, -0.0f, -0x1p-127f, 1.0f, nan_bits(0xFFE4D330u),
                                 1.0f, 1.0f};
  float* dm = to_device(m0);
  float* da = to_device(ad);
  float* di = to_device(std::vector<float>(m0.size(), 0.0f));
  atomic_probe_kernel<<<1, 32>>>(dm, da, di, int(m0.size()));
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> rm(m0.size()), ri(m0.size());
  ATTNSIM_CUDA_CHECK(cudaMemcpy(rm.data(), dm, rm.size() * 4, cudaMemcpyDeviceToHost));
  ATTNSIM_CUDA_CHECK(cudaMemcpy(ri.data(), di, ri.size() * 4, cudaMemcpyDeviceToHost));
  int differ = 0;
  std::printf(
      "probe: FP32 atomicAdd on global memory vs __fadd_rn vs the host's (x86) add (bits)\n");
  for (std::size_t i = 0; i < m0.size(); ++i) {
    std::uint32_t bm, ba, br, bi, bh;
    const volatile float host = m0[i] + ad[i];
    const float hv = host;
    std::memcpy(&bm, &m0[i], 4);
    std::memcpy(&ba, &ad[i], 4);
    std::memcpy(&br, &rm[i], 4);
    std::memcpy(&bi, &ri[i], 4);
    std::memcpy(&bh, &hv, 4);
    differ += br != bi;
    std::printf("  %08x + %08x: atomic %08x, fadd %08x, host %08x%s\n", bm, ba, br, bi, bh,
                br != bi ? "  (atomic differs from fadd)" : "");
  }
  std::printf("probe: %d of %zu differ\n", differ, m0.size());
  return 0;
}

void write_all(std::FILE* f, const void* p, std::size_t n) {
  if (n && std::fwrite(p, 1, n, f) != n) {
    std::fprintf(stderr, "short write\n");
    std::exit(1);
  }
}

// record DIR [CASE]: DIR/amla_record.bin holds, per case of amla_cases() in order and per kernel
// (amla, then base): out [B][G][512] u16, raw O [B][G][512] u32, rows [B][G][4] u32.
// DIR/amla_cases.txt: one line per case: name batch g s input_digest.
int run_record(const std::string& dir, const std::string& only) {
  std::FILE* bin = std::fopen((dir + "/amla_record.bin").c_str(), "wb");
  std::FILE* txt = std::fopen((dir + "/amla_cases.txt").c_str(), "w");
  if (!bin || !txt) {
    std::fprintf(stderr, "cannot write into %s\n", dir.c_str());
    return 2;
  }
  set_smem_limits();
  for (const attnsim::hwtest::AmlaCase& c : attnsim::hwtest::amla_cases()) {
    if (!only.empty() && c.name != only) continue;
    const attnsim::hwtest::AmlaTensors t = attnsim::hwtest::amla_case_tensors(c);
    const std::uint32_t digest = attnsim::hwtest::amla_input_digest(t);
    std::uint16_t* dq = to_device(t.q);
    std::uint16_t* dk = to_device(t.k);
    std::uint16_t* dv = c.v_from_k ? dk : to_device(t.v);
    const std::size_t no = std::size_t(c.batch) * c.g * kDv, nr = std::size_t(c.batch) * c.g * 4;
    for (int kernel = 0; kernel < 2; ++kernel) {
      const bool amla = kernel == 0;
      Args a{};
      a.q = dq, a.k = dk, a.v = dv, a.ldv = c.v_from_k ? kDk : kDv;
      a.batch = c.batch, a.g = c.g, a.s = c.s, a.c = exp_coefficient();
      // Poison everything the kernels write: an unwritten element shows.
      a.o = to_device(std::vector<float>(no, std::nanf("")));
      a.out = to_device(std::vector<std::uint16_t>(no, 0xFFFFu));
      a.rows = to_device(std::vector<std::uint32_t>(nr, 0xFFFFFFFFu));
      launch(amla, a);
      ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<std::uint16_t> out(no);
      std::vector<std::uint32_t> raw(no), rows(nr);
      ATTNSIM_CUDA_CHECK(cudaMemcpy(out.data(), a.out, no * 2, cudaMemcpyDeviceToHost));
      ATTNSIM_CUDA_CHECK(cudaMemcpy(raw.data(), a.o, no * 4, cudaMemcpyDeviceToHost));
      ATTNSIM_CUDA_CHECK(cudaMemcpy(rows.data(), a.rows, nr * 4, cudaMemcpyDeviceToHost));
      std::size_t poisoned = 0;
      for (std::uint16_t x : out) poisoned += x == 0xFFFFu;
      write_all(bin, out.data(), no * 2);
      write_all(bin, raw.data(), no * 4);
      write_all(bin, rows.data(), nr * 4);
      std::printf("record %-22s %s: B=%d G=%d S=%d, %zu outputs still 0xFFFF\n", c.name.c_str(),
                  amla ? "amla" : "base", c.batch, c.g, c.s, poisoned);
      ATTNSIM_CUDA_CHECK(cudaFree(a.o));
      ATTNSIM_CUDA_CHECK(cudaFree(a.out));
      ATTNSIM_CUDA_CHECK(cudaFree(a.rows));
    }
    std::fprintf(txt, "%s %d %d %d %u\n", c.name.c_str(), c.batch, c.g, c.s, digest);
    ATTNSIM_CUDA_CHECK(cudaFree(dq));
    ATTNSIM_CUDA_CHECK(cudaFree(dk));
    if (!c.v_from_k) ATTNSIM_CUDA_CHECK(cudaFree(dv));
  }
  std::fclose(bin);
  std::fclose(txt);
  return 0;
}

// Random bf16 for the timings (never zeros): N(0,1)-like by the Irwin-Hall sum of four uniforms.
__global__ void fill_kernel(std::uint16_t* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s += float((z >> (16 * k)) & 0xFFFF);
    x[i] = bf16_rne((s - 131070.0f) * (1.7320508f / 65536.0f));
  }
}

// time FILE: median of 20 timed launches after 3 warm-ups, per kernel, S and batch; V = K[:, :512]
// (MLA's latent). Batch 33: 4 CTAs of 32 heads each, 132 CTAs (one per SM of the H100).
int run_time(const std::string& path) {
  set_smem_limits();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return 2;
  cudaDeviceProp prop;
  ATTNSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::fprintf(f, "# %s, %d SMs; G=128, Dk=576, Dv=512, V = K[:, :512], median of 20 launches\n",
               prop.name, prop.multiProcessorCount);
  std::fprintf(f, "%-6s %-6s %12s %12s %8s %10s %10s\n", "batch", "S", "amla_us", "base_us",
               "ratio", "amla_TF/s", "base_TF/s");
  std::printf("%-6s %-6s %12s %12s %8s\n", "batch", "S", "amla_us", "base_us", "amla/base");
  const int g = 128;
  for (int batch : {1, 33}) {
    for (int s : {4096, 8192, 16384, 32768}) {
      const std::size_t nq = std::size_t(batch) * g * kDk, nk = std::size_t(batch) * s * kDk;
      const std::size_t no = std::size_t(batch) * g * kDv;
      std::uint16_t *dq, *dk, *dout;
      float* dO;
      ATTNSIM_CUDA_CHECK(cudaMalloc(&dq, nq * 2));
      ATTNSIM_CUDA_CHECK(cudaMalloc(&dk, nk * 2));
      ATTNSIM_CUDA_CHECK(cudaMalloc(&dout, no * 2));
      ATTNSIM_CUDA_CHECK(cudaMalloc(&dO, no * 4));
      fill_kernel<<<1024, 256>>>(dq, nq, 1);
      fill_kernel<<<4096, 256>>>(dk, nk, 2);
      ATTNSIM_CUDA_CHECK(cudaGetLastError());
      Args a{};
      a.q = dq, a.k = dk, a.v = dk, a.ldv = kDk;
      a.batch = batch, a.g = g, a.s = s, a.c = exp_coefficient();
      a.out = dout;
      a.rows = nullptr;
      double med[2];
      for (int kernel = 0; kernel < 2; ++kernel) {
        const bool amla = kernel == 0;
        a.o = amla ? dO : nullptr;
        cudaEvent_t e0, e1;
        ATTNSIM_CUDA_CHECK(cudaEventCreate(&e0));
        ATTNSIM_CUDA_CHECK(cudaEventCreate(&e1));
        for (int w = 0; w < 3; ++w) launch(amla, a);
        std::vector<float> ms;
        for (int r = 0; r < 20; ++r) {
          ATTNSIM_CUDA_CHECK(cudaEventRecord(e0));
          launch(amla, a);
          ATTNSIM_CUDA_CHECK(cudaEventRecord(e1));
          ATTNSIM_CUDA_CHECK(cudaEventSynchronize(e1));
          float x = 0.0f;
          ATTNSIM_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
          ms.push_back(x);
        }
        std::sort(ms.begin(), ms.end());
        med[kernel] = 0.5 * (ms[9] + ms[10]) * 1e3;
        ATTNSIM_CUDA_CHECK(cudaEventDestroy(e0));
        ATTNSIM_CUDA_CHECK(cudaEventDestroy(e1));
      }
      const double flop = 2.0 * batch * g * double(s) * (kDk + kDv);
      std::fprintf(f, "%-6d %-6d %12.1f %12.1f %8.3f %10.1f %10.1f\n", batch, s, med[0], med[1],
                   med[0] / med[1], flop / med[0] * 1e-6, flop / med[1] * 1e-6);
      std::printf("%-6d %-6d %12.1f %12.1f %8.3f\n", batch, s, med[0], med[1], med[0] / med[1]);
      ATTNSIM_CUDA_CHECK(cudaFree(dq));
      ATTNSIM_CUDA_CHECK(cudaFree(dk));
      ATTNSIM_CUDA_CHECK(cudaFree(dout));
      ATTNSIM_CUDA_CHECK(cudaFree(dO));
    }
  }
  std::fclose(f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "probe") return run_probe();
  if (mode == "record" && (argc == 3 || argc == 4))
    return run_record(argv[2], argc == 4 ? argv[3] : "");
  if (mode == "time" && argc == 3) return run_time(argv[2]);
  std::fprintf(stderr, "usage: %s probe | record DIR [CASE] | time FILE\n", argv[0]);
  return 2;
}
