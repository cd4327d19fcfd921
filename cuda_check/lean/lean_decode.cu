// LeanAttention-style (stream-K) and FlashDecoding-style (fixed split-KV) decode kernels of our own,
// recorded on the H100 so that sim/lean is checked bit for bit, and timed to calibrate its timing
// model. Both run ONE tile loop, FlashAttention-2's as ONNX Runtime's LeanAttention fork runs it
// on sm80+ (microsoft/onnxruntime contrib_ops/cuda/bert/lean_attention/lean_fwd_kernel.h,
// softmax.h; Dao-AILab flash-attention csrc/flash_attn/src/flash_fwd_kernel.h for the split-KV
// kernel and its combine):
//
// Layout: Q [B][HQ][D], K/V [B][HK][ld_b][D] fp16 (bf16 as a template option), row stride D; per
//   batch element an offset and a head stride ld_b >= LK_b (dense: ld_b = LKmax). Decode only. The
//   g = HQ/HK query heads of a KV head are folded into M (ORT's seqlenq_ngroups_swapped): row r of
//   m-block mb of KV head hk is query head hk*g + mb*64 + r; rows >= g are zero and never written.
//   block_m = 64 (4 warps x 16 rows); block_n = 256 (D <= 64), 128 (D <= 128), 64.
// Tile loop over one segment [n_begin, n_end) of n-tiles of one (b, hk, mb) block, from the
//   highest tile down:
//   S      = Q Kᵀ by mma.sync.m16n8k16.row.col.f32.f16.f16.f32 from C = 0, chained over D in
//            k-steps of 16 ascending; keys >= LK_b: S = -inf (K and V rows there loaded as zeros).
//   m      = fmaxf over the thread's values in column order (from the old m after the first
//            tile), then m = fmaxf(m, shfl_xor 2), fmaxf(m, shfl_xor 1).
//   rescale (not on the segment's first tile): c = exp2f((m_old - m) * scale_log2) as FADD, FMUL,
//            exp2f; acc_o *= c; the row sum's l *= c is fused with its first add (below).
//   p      = exp2f(fma(S, scale_log2, -ms)), ms = m == -inf ? 0 : m * scale_log2 (one FFMA: FA2's
//            exp2f(x * scale - max_scaled) as nvcc contracts it).
//   l      = per-thread partial: lane t of a quad owns columns 8j+2t, 8j+2t+1; it adds its p in
//            increasing column order: first tile l = p_0 + p_1 + ...; later tiles
//            l = fma(l, c, p_0) + p_1 + ... (nvcc contracts FA2's `row_sum *= scale` with the
//            first `+=`).
//   acc_o += fp16(p) (RNE) · V by mma.sync m16n8k16 chained over the tile's keys, k-steps of 16
//            ascending.
// Segment end (FA2 normalize_softmax_lse): l = l + shfl_xor(l, 2); l = l + shfl_xor(l, 1);
//   inv = (l == 0 || l != l) ? 1 : 1/l (IEEE); O = acc_o * inv;
//   lse = (l == 0 || l != l) ? -inf (split; +inf unsplit) : fma(m, softmax_scale, __logf(l))
//   (nvcc contracts ORT's `row_max * softmax_scale + __logf(sum)` into that FFMA; __logf without
//   -ftz is lg2.approx.f32 with subnormal inputs scaled by 2^24, then FMUL by ln 2).
// Split combine (ORT's lean host CTA and FA2's combine_attn_seqk_parallel, one arithmetic): per
//   output row, R lanes of consecutive threads; lane j holds splits j, j+R, j+2R, ... (R = 2 for
//   lean; R = min(128/kRows, kMaxSplits) for FA2's combine, kRows = 4 for D = 128, 8 for D = 64,
//   kMaxSplits = the next of 2, 4, ..., 128 at or above num_splits); missing splits are -inf.
//   lse_max = fmaxf over the lane's values in order, then an xor butterfly over R (offsets R/2 .. 1),
//   0 if -inf; lane sum = expf(lse_j - lse_max) + expf(lse_{j+R} - lse_max) + ... in order, then the
//   same butterfly of FADDs; lse_logsum = (sum == 0 || sum != sum) ? +inf : logf(sum) + lse_max;
//   scale_i = expf(lse_i - lse_logsum); O = 0, then O = fma(scale_i, O_i, O) for i = 0, 1, ... (the
//   host's own partial is split 0); fp16 RNE. expf/logf are CUDA's accurate libm versions.
// Every float operation is spelled as an explicit _rn intrinsic, so the arithmetic does not depend
// on contraction; the build uses ORT's flags (no --use_fast_math, default -fmad).
//
// LeanAttention partition (ORT lean_api.cc get_num_splits_and_buffer_sizes, lean_fwd_kernel.h),
//   with ragged per-batch tile counts nb_b = ceil(LK_b / block_n) (ORT sizes every batch element by
//   LKmax) and ceil(g/64) m-blocks (ORT counts one): tiles ordered batch -> kv head -> m-block ->
//   n-tile; grid G = 2*SMs, or if total <= 4*SMs min((total+1)/2, (32*total + nnb - 1)/nnb), else
//   min(2*SMs, 32*HK*B*mblocks); clamped to [1, total]; nnb = ceil(LKmax/block_n);
//   mtpt = ceil(total/G); high = total - (mtpt-1)*G; CTA c owns [c*mtpt, +mtpt) if c < high, else
//   [(mtpt-1)*c + high, +mtpt-1). A CTA walks its range block by block (one segment each). The
//   segment holding n-tile 0 is the block's host (split 0); the others are splits 1, 2, ... in CTA
//   order. A non-host writes its normalized FP32 O and lse to the partial buffer at its split,
//   __threadfence, __syncthreads, one atomicAdd on the block's flag; the host waits for
//   total_splits - 1 (volatile loads), combines, writes fp16 and resets the flag to 0. Hosts wait
//   only on higher CTAs whose first segment never waits, and the grid (G <= 2*SMs) is co-resident
//   at 2 CTAs/SM (checked with cudaOccupancyMaxActiveBlocksPerMultiprocessor).
// FlashDecoding: grid (num_splits, B*HK*mblocks); split s takes n-tiles [s*nbps, min((s+1)*nbps,
//   nb_b)), nbps = ceil(nb_b/num_splits) per block (FA2 divides ceil(LKmax/block_n) instead: the
//   same for uniform batches); an empty split writes O = 0 and lse = -inf (FA2); num_splits = 1
//   writes fp16 directly. Then the combine kernel (skipped for 1 split).
//   Default num_splits: FA2 num_splits_heuristic(B*HK*mblocks, 2*SMs, nnb, 128) (flash_api.cpp
//   set_params_splitkv, after mha_fwd_kvcache's group swap).
//
// Build and run from the repository root (cuda_check/lean/run_lean.sh does all of it):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I. cuda_check/lean/lean_decode.cu
//   ./lean_decode record DIR [CASE]   the recorded cases: DIR/lean_record.bin + lean_manifest.txt
//   ./lean_decode time FILE.csv       timings of lean, FlashDecoding and FlashDecoding(1 split)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "numerics/ragged.hpp"
#include "cuda_check/probe_util.cuh"

namespace {

constexpr int kBlockM = 64, kThreads = 128;

template <int D>
struct Shape {
  static constexpr int kBlockN = D <= 64 ? 256 : (D <= 128 ? 128 : 64);
  // Row stride in elements, padded by 16 bytes: ldmatrix's 8 row addresses hit 8 bank groups.
  static constexpr int kStride = D + 8;
  static constexpr int kNS = kBlockN / 8;   // n8 slices of S
  static constexpr int kNO = D / 8;         // n8 slices of O
  static constexpr int kKS = D / 16;        // k-steps of Q Kᵀ
  static constexpr int kPS = kBlockN / 16;  // k-steps of P V
  static constexpr std::size_t kQBytes = std::size_t(kBlockM) * kStride * 2;
  static constexpr std::size_t kKVBytes = std::size_t(kBlockN) * kStride * 2;
  static constexpr std::size_t kSmem = kQBytes + 2 * kKVBytes;
  // The lean host stages its own FP32 O in the K buffer and the split scales in the V buffer.
  static_assert(std::size_t(kBlockM) * D * 4 <= kKVBytes, "host O staging");
  static_assert(std::size_t(128) * kBlockM * 4 <= kKVBytes, "host scale table (128 splits)");
};

// ---------------------------------------------------------------------------------------------
// Element type: fp16 (the recorded path) or bf16.
template <bool kBf16>
struct Elem;
template <>
struct Elem<false> {
  static constexpr std::uint16_t kNaN = 0x7E00u;
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // cvt.rn.f16x2.f32: RNE each
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ std::uint16_t cvt(float x) {
    return __half_as_ushort(__float2half_rn(x));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static float to_float_host(std::uint16_t b) {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  }
  static std::uint16_t from_float_host(float x) {
    const __half h = __float2half_rn(x);
    return __half_raw(h).x;
  }
};
template <>
struct Elem<true> {
  static constexpr std::uint16_t kNaN = 0x7FC0u;
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ std::uint16_t cvt(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static float to_float_host(std::uint16_t b) {
    std::uint32_t u = std::uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  }
  static std::uint16_t from_float_host(float x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    return __nv_bfloat16_raw(h).x;
  }
};

using attnsim::probe::cp_async16;
using attnsim::probe::cp_async_commit;
using attnsim::probe::smem_addr;
__device__ __forceinline__ void cp_async_wait0() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}
using attnsim::probe::ldmatrix_x4;
using attnsim::probe::ldmatrix_x4_trans;

// ---------------------------------------------------------------------------------------------
// Kernel parameters.


struct Params {
  const std::uint16_t* q;       // [B][HQ][D]
  const std::uint16_t* k;       // base; batch b at k + kv_off[b], head hk at + hk*kv_ld[b]*D
  const std::uint16_t* v;
  const long long* kv_off;      // [B] element offsets
  const int* kv_ld;             // [B] rows per head (>= lk[b])
  const int* lk;                // [B] context lengths
  std::uint16_t* o;             // [B][HQ][D]
  float* o_part;                // [S][B][HK][g][D] FP32 partial O (normalized)
  float* lse_part;              // [S][B][HK][g]
  int* flags;                   // lean: [B*HK*mblocks]
  const int* segs;              // lean: [nseg][kSegCols]
  const int* seg_begin;         // lean: [G+1]
  int batch, hq, hk, g, mblocks, lk_max;
  int num_splits;               // FlashDecoding
  int lean_nl;                  // lean combine: values per lane (kMaxSplits / 2)
  int record_all;               // lean: also write the host's own partial (and whole blocks') at 0
  float scale_log2, softmax_scale;
};

// Segment table columns (host plan -> kernel, and recorded).
enum SegCol { kCta, kBatch, kHead, kMBlock, kNBegin, kNEnd, kHost, kFinisher, kSplit, kTotalSplits,
              kSegCols };

template <int D>
struct Acc {
  float o[Shape<D>::kNO][4];
  float m[2], l[2];  // rows g and g + 8 of the warp's 16
};

// K or V tile n (keys [n*BN, n*BN + BN)) into shared memory; keys >= lk as zeros.
template <int D>
__device__ __forceinline__ void load_kv(std::uint16_t* dst, const std::uint16_t* head, int n,
                                        int lk) {
  constexpr int kParts = D / 8, kChunks = Shape<D>::kBlockN * kParts;
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int c = threadIdx.x + kThreads * i, row = c / kParts, part = c % kParts;
    const int key = n * Shape<D>::kBlockN + row;
    const bool live = key < lk;
    cp_async16(dst + row * Shape<D>::kStride + 8 * part,
               head + std::size_t(live ? key : 0) * D + 8 * part, live ? 16 : 0);
  }
}

// The tile loop over n-tiles [n_begin, n_end) of block (b, hk, mb), highest first.
template <int D, bool kBf16>
__device__ __forceinline__ void run_segment(const Params& p, int b, int hk, int mb, int n_begin,
                                            int n_end, unsigned char* smem, Acc<D>& acc) {
  using S = Shape<D>;
  using E = Elem<kBf16>;
  std::uint16_t* sq = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t* sk = reinterpret_cast<std::uint16_t*>(smem + S::kQBytes);
  std::uint16_t* sv = reinterpret_cast<std::uint16_t*>(smem + S::kQBytes + S::kKVBytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int lk = p.lk[b];
  const std::size_t head_off = std::size_t(p.kv_off[b]) + std::size_t(hk) * p.kv_ld[b] * D;
  const std::uint16_t* kh = p.k + head_off;
  const std::uint16_t* vh = p.v + head_off;
  // Q rows (rows past g as zeros) and the first K tile: one copy group.
  for (int c = threadIdx.x; c < kBlockM * (D / 8); c += kThreads) {
    const int r = c / (D / 8), part = c % (D / 8), qrow = mb * kBlockM + r;
    const bool live = qrow < p.g;
    const std::uint16_t* src =
        p.q + (std::size_t(b) * p.hq + std::size_t(hk) * p.g + (live ? qrow : 0)) * D + 8 * part;
    cp_async16(sq + r * S::kStride + 8 * part, src, live ? 16 : 0);
  }
  load_kv<D>(sk, kh, n_end - 1, lk);
  cp_async_commit();

#pragma unroll
  for (int nt = 0; nt < S::kNO; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc.o[nt][e] = 0.0f;
  acc.m[0] = acc.m[1] = -INFINITY;
  acc.l[0] = acc.l[1] = 0.0f;

  for (int n = n_end - 1; n >= n_begin; --n) {
    const bool first = n == n_end - 1;
    cp_async_wait0();
    __syncthreads();  // K tile n (and Q) landed; every warp is done with V of tile n + 1
    load_kv<D>(sv, vh, n, lk);
    cp_async_commit();
    // 1. S = Q Kᵀ: C = 0, k-steps of 16 ascending.
    float s[S::kNS][4];
#pragma unroll
    for (int j = 0; j < S::kNS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < S::kKS; ++ks) {
      std::uint32_t qf[4];  // re-read from shared memory each k-step, as FA2 does
      ldmatrix_x4(qf, sq + (16 * warp + (lane & 15)) * S::kStride + 16 * ks + 8 * (lane >> 4));
#pragma unroll
      for (int np = 0; np < S::kNS / 2; ++np) {
        std::uint32_t kf[4];
        ldmatrix_x4(kf, sk + (16 * np + (lane & 7) + 8 * (lane >> 4)) * S::kStride + 16 * ks +
                            8 * ((lane >> 3) & 1));
        E::mma(s[2 * np], qf, kf[0], kf[1]);
        E::mma(s[2 * np + 1], qf, kf[2], kf[3]);
      }
    }
    cp_async_wait0();
    __syncthreads();  // V tile n landed; every warp is done with K tile n
    if (n > n_begin) {
      load_kv<D>(sk, kh, n - 1, lk);
      cp_async_commit();
    }
    // 2. Mask keys >= lk.
    if ((n + 1) * S::kBlockN > lk) {
#pragma unroll
      for (int j = 0; j < S::kNS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n * S::kBlockN + 8 * j + 2 * t + (e & 1) >= lk) s[j][e] = -INFINITY;
    }
    // 3. Online softmax, rows i = 0 (g) and 1 (g + 8).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = first ? s[0][2 * i] : fmaxf(acc.m[i], s[0][2 * i]);
      mx = fmaxf(mx, s[0][2 * i + 1]);
#pragma unroll
      for (int j = 1; j < S::kNS; ++j) {
        mx = fmaxf(mx, s[j][2 * i]);
        mx = fmaxf(mx, s[j][2 * i + 1]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      float c = 1.0f;
      if (!first) {
        c = exp2f(__fmul_rn(__fsub_rn(acc.m[i], mx), p.scale_log2));
#pragma unroll
        for (int nt = 0; nt < S::kNO; ++nt) {
          acc.o[nt][2 * i] = __fmul_rn(acc.o[nt][2 * i], c);
          acc.o[nt][2 * i + 1] = __fmul_rn(acc.o[nt][2 * i + 1], c);
        }
      }
      acc.m[i] = mx;
      const float ms = mx == -INFINITY ? 0.0f : __fmul_rn(mx, p.scale_log2);
#pragma unroll
      for (int j = 0; j < S::kNS; ++j) {
        s[j][2 * i] = exp2f(__fmaf_rn(s[j][2 * i], p.scale_log2, -ms));
        s[j][2 * i + 1] = exp2f(__fmaf_rn(s[j][2 * i + 1], p.scale_log2, -ms));
      }
      // ORT softmax.h softmax_rescale_o: `row_sum(mi) *= scores_scale`, then reduce_sum's first
      // `row_sum + p[0]`; nvcc (-fmad=true, ORT's build) contracts the pair into one FFMA (seen in
      // the SASS of that code built with ORT's flags), so the model does fma(l, c, p_0).
      float l = first ? s[0][2 * i] : __fmaf_rn(acc.l[i], c, s[0][2 * i]);
      l = __fadd_rn(l, s[0][2 * i + 1]);
#pragma unroll
      for (int j = 1; j < S::kNS; ++j) {
        l = __fadd_rn(l, s[j][2 * i]);
        l = __fadd_rn(l, s[j][2 * i + 1]);
      }
      acc.l[i] = l;
    }
    // 4. acc_o += P V: P to fp16/bf16 RNE, k-steps of 16 keys ascending.
#pragma unroll
    for (int kk = 0; kk < S::kPS; ++kk) {
      const std::uint32_t a[4] = {E::pack(s[2 * kk][0], s[2 * kk][1]),
                                  E::pack(s[2 * kk][2], s[2 * kk][3]),
                                  E::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  E::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < S::kNO / 2; ++np) {
        std::uint32_t vf[4];
        ldmatrix_x4_trans(vf, sv + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * S::kStride +
                                  16 * np + 8 * (lane >> 4));
        E::mma(acc.o[2 * np], a, vf[0], vf[1]);
        E::mma(acc.o[2 * np + 1], a, vf[2], vf[3]);
      }
    }
  }
}

// FA2 normalize_softmax_lse: quad all-reduce of l, O *= 1/l, lse. Returns lse per row i.
template <int D>
__device__ __forceinline__ void normalize(Acc<D>& acc, float softmax_scale, bool split,
                                          float (&lse)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = acc.l[i];
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    const bool empty = l == 0.0f || l != l;
    const float inv = empty ? 1.0f : __frcp_rn(l);
    lse[i] = empty ? (split ? -INFINITY : INFINITY)
                   : __fmaf_rn(acc.m[i], softmax_scale, __logf(l));
#pragma unroll
    for (int nt = 0; nt < Shape<D>::kNO; ++nt) {
      acc.o[nt][2 * i] = __fmul_rn(acc.o[nt][2 * i], inv);
      acc.o[nt][2 * i + 1] = __fmul_rn(acc.o[nt][2 * i + 1], inv);
    }
  }
}

// Flattened row of block (b, hk) row q in [B][HK][g] (= the output row b*HQ + hk*g + q).
__device__ __forceinline__ std::size_t flat_row(const Params& p, int b, int hk, int q) {
  return (std::size_t(b) * p.hk + hk) * p.g + q;
}

// Normalized O (registers) and lse to partial slot `split`.
template <int D>
__device__ __forceinline__ void write_partial(const Params& p, const Acc<D>& acc,
                                              const float (&lse)[2], int b, int hk, int mb,
                                              int split) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
  const std::size_t rows = std::size_t(p.batch) * p.hk * p.g;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = mb * kBlockM + 16 * warp + gr + 8 * i;
    if (q >= p.g) continue;
    const std::size_t fr = std::size_t(split) * rows + flat_row(p, b, hk, q);
#pragma unroll
    for (int nt = 0; nt < Shape<D>::kNO; ++nt)
      *reinterpret_cast<float2*>(p.o_part + fr * D + 8 * nt + 2 * t) =
          make_float2(acc.o[nt][2 * i], acc.o[nt][2 * i + 1]);
    if (t == 0) p.lse_part[fr] = lse[i];
  }
}

// O (registers) to the fp16/bf16 output.
template <int D, bool kBf16>
__device__ __forceinline__ void write_out(const Params& p, const Acc<D>& acc, int b, int hk,
                                          int mb) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = mb * kBlockM + 16 * warp + gr + 8 * i;
    if (q >= p.g) continue;
    std::uint16_t* dst = p.o + flat_row(p, b, hk, q) * D;
#pragma unroll
    for (int nt = 0; nt < Shape<D>::kNO; ++nt) {
      const std::uint32_t v = std::uint32_t(Elem<kBf16>::cvt(acc.o[nt][2 * i])) |
                              (std::uint32_t(Elem<kBf16>::cvt(acc.o[nt][2 * i + 1])) << 16);
      *reinterpret_cast<std::uint32_t*>(dst + 8 * nt + 2 * t) = v;
    }
  }
}

// The split scales of ORT's lean host / FA2's combine. sl[s*ld + row] holds lse of split s < ns for
// rows < rows (loaded by the caller); on return it holds scale_s = expf(lse_s - lse_logsum). Lanes:
// row = tid / R, lane j = tid % R holds splits j + R*l, l < nl. Every thread of the CTA calls it.
__device__ __forceinline__ void split_scales(float* sl, int ld, int ns, int rows, int R, int nl) {
  const int row = threadIdx.x / R, j = threadIdx.x % R;
  const bool live_row = row < rows;
  auto value = [&](int l) {
    const int s = j + R * l;
    return (live_row && s < ns) ? sl[s * ld + row] : -INFINITY;
  };
  float mx = value(0);
  for (int l = 1; l < nl; ++l) mx = fmaxf(mx, value(l));
  for (int off = R / 2; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  mx = mx == -INFINITY ? 0.0f : mx;
  float sum = expf(__fsub_rn(value(0), mx));
  for (int l = 1; l < nl; ++l) sum = __fadd_rn(sum, expf(__fsub_rn(value(l), mx)));
  for (int off = R / 2; off >= 1; off >>= 1)
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
  const float logsum = (sum == 0.0f || sum != sum) ? INFINITY : __fadd_rn(logf(sum), mx);
  // Each (split, row) entry belongs to one lane for the whole function: no barrier needed.
  for (int l = 0; l < nl; ++l) {
    const int s = j + R * l;
    if (live_row && s < ns) sl[s * ld + row] = expf(__fsub_rn(value(l), logsum));
  }
}


// The lean host's combine (ORT lean_fwd_kernel.h, host branch): its own normalized O (split 0) is
// staged in shared memory with its lse; it waits for the ns - 1 other splits, loads their lse,
// computes the split scales and O = sum_i scale_i O_i, writes fp16 and resets the block's flag.
template <int D, bool kBf16>
__device__ __forceinline__ void host_combine(const Params& p, const Acc<D>& acc,
                                             const float (&lse)[2], int b, int hk, int mb, int ns,
                                             int blk, unsigned char* smem) {
  using S = Shape<D>;
  float* so = reinterpret_cast<float*>(smem + S::kQBytes);                // [64][D]
  float* sl = reinterpret_cast<float*>(smem + S::kQBytes + S::kKVBytes);  // [128][64]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
  const int rows = min(kBlockM, p.g - mb * kBlockM);
  const std::size_t nrows = std::size_t(p.batch) * p.hk * p.g;
  __syncthreads();  // every warp is done with the K and V tiles
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 16 * warp + gr + 8 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int nt = 0; nt < S::kNO; ++nt)
      *reinterpret_cast<float2*>(so + r * D + 8 * nt + 2 * t) =
          make_float2(acc.o[nt][2 * i], acc.o[nt][2 * i + 1]);
    if (t == 0) sl[r] = lse[i];
  }
  if (threadIdx.x == 0) {
    // Spin on the flag; a wait of ~10 s (2e10 cycles) means a broken plan: trap, never hang.
    const volatile int* flag = p.flags + blk;
    const long long t0 = clock64();
    while (*flag < ns - 1) {
      if (clock64() - t0 > 20000000000LL) __trap();
    }
    __threadfence();
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < (ns - 1) * rows; idx += kThreads) {
    const int s = 1 + idx / rows, r = idx % rows;
    sl[s * kBlockM + r] =
        __ldcg(p.lse_part + std::size_t(s) * nrows + flat_row(p, b, hk, mb * kBlockM + r));
  }
  __syncthreads();
  split_scales(sl, kBlockM, ns, rows, 2, p.lean_nl);
  __syncthreads();
  for (int c = threadIdx.x; c < rows * (D / 4); c += kThreads) {
    const int r = c / (D / 4), col = 4 * (c % (D / 4));
    const std::size_t fr = flat_row(p, b, hk, mb * kBlockM + r);
    const float4 own = *reinterpret_cast<const float4*>(so + r * D + col);
    const float s0 = sl[r];
    float a0 = __fmaf_rn(s0, own.x, 0.0f), a1 = __fmaf_rn(s0, own.y, 0.0f);
    float a2 = __fmaf_rn(s0, own.z, 0.0f), a3 = __fmaf_rn(s0, own.w, 0.0f);
    for (int s = 1; s < ns; ++s) {
      const float4 x =
          __ldcg(reinterpret_cast<const float4*>(p.o_part + (std::size_t(s) * nrows + fr) * D + col));
      const float sc = sl[s * kBlockM + r];
      a0 = __fmaf_rn(sc, x.x, a0);
      a1 = __fmaf_rn(sc, x.y, a1);
      a2 = __fmaf_rn(sc, x.z, a2);
      a3 = __fmaf_rn(sc, x.w, a3);
    }
    using E = Elem<kBf16>;
    const uint2 w = make_uint2(std::uint32_t(E::cvt(a0)) | (std::uint32_t(E::cvt(a1)) << 16),
                                    std::uint32_t(E::cvt(a2)) | (std::uint32_t(E::cvt(a3)) << 16));
    *reinterpret_cast<uint2*>(p.o + fr * D + col) = w;
  }
  if (threadIdx.x == 0) p.flags[blk] = 0;  // all ns - 1 adds have landed: ready for the next launch
}

// LeanAttention: CTA blockIdx.x walks its segments (host plan, `segs`).
template <int D, bool kBf16>
__global__ void __launch_bounds__(kThreads, 2) lean_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int c = blockIdx.x;
  for (int si = p.seg_begin[c]; si < p.seg_begin[c + 1]; ++si) {
    const int* sg = p.segs + si * kSegCols;
    const int b = sg[kBatch], hk = sg[kHead], mb = sg[kMBlock];
    const int host = sg[kHost], fin = sg[kFinisher];
    const int blk = (b * p.hk + hk) * p.mblocks + mb;
    Acc<D> acc;
    run_segment<D, kBf16>(p, b, hk, mb, sg[kNBegin], sg[kNEnd], smem, acc);
    float lse[2];
    if (host && fin) {
      normalize<D>(acc, p.softmax_scale, /*split=*/false, lse);
      if (p.record_all) write_partial<D>(p, acc, lse, b, hk, mb, 0);
      write_out<D, kBf16>(p, acc, b, hk, mb);
    } else if (!host) {
      normalize<D>(acc, p.softmax_scale, /*split=*/true, lse);
      write_partial<D>(p, acc, lse, b, hk, mb, sg[kSplit]);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(p.flags + blk, 1);
    } else {
      normalize<D>(acc, p.softmax_scale, /*split=*/true, lse);
      if (p.record_all) write_partial<D>(p, acc, lse, b, hk, mb, 0);
      host_combine<D, kBf16>(p, acc, lse, b, hk, mb, sg[kTotalSplits], blk, smem);
    }
    __syncthreads();  // shared memory is free for the next segment
  }
}

// FlashDecoding split kernel: CTA (split, block).
template <int D, bool kBf16>
__global__ void __launch_bounds__(kThreads, 2) fd_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int s = blockIdx.x, blk = blockIdx.y;
  const int mb = blk % p.mblocks, hk = (blk / p.mblocks) % p.hk, b = blk / (p.mblocks * p.hk);
  const int nb = (p.lk[b] + Shape<D>::kBlockN - 1) / Shape<D>::kBlockN;
  const int nbps = (nb + p.num_splits - 1) / p.num_splits;  // per block (FA2: from LKmax)
  const int n_begin = s * nbps, n_end = min(nb, (s + 1) * nbps);
  if (n_begin >= n_end) {
    // FA2: an empty split writes O = 0 and lse = -inf.
    const int rows = min(kBlockM, p.g - mb * kBlockM);
    const std::size_t nrows = std::size_t(p.batch) * p.hk * p.g;
    for (int c = threadIdx.x; c < rows * D; c += kThreads) {
      const std::size_t fr = std::size_t(s) * nrows + flat_row(p, b, hk, mb * kBlockM + c / D);
      p.o_part[fr * D + c % D] = 0.0f;
      if (c % D == 0) p.lse_part[fr] = -INFINITY;
    }
    return;
  }
  Acc<D> acc;
  run_segment<D, kBf16>(p, b, hk, mb, n_begin, n_end, smem, acc);
  float lse[2];
  if (p.num_splits == 1) {
    normalize<D>(acc, p.softmax_scale, /*split=*/false, lse);
    write_out<D, kBf16>(p, acc, b, hk, mb);
  } else {
    normalize<D>(acc, p.softmax_scale, /*split=*/true, lse);
    write_partial<D>(p, acc, lse, b, hk, mb, s);
  }
}

// FA2 combine_attn_seqk_parallel: kRows flattened rows per CTA, 128 threads.
template <int D>
__host__ __device__ constexpr int combine_rows() {
  return D % 128 == 0 ? 4 : (D % 64 == 0 ? 8 : 16);
}
template <int D, bool kBf16>
__global__ void __launch_bounds__(kThreads) fd_combine_kernel(const Params p, int lanes, int nl) {
  constexpr int kRows = combine_rows<D>();
  __shared__ float sl[128 * kRows];
  const std::size_t nrows = std::size_t(p.batch) * p.hk * p.g;
  const std::size_t row0 = std::size_t(blockIdx.x) * kRows;
  const int rows = int(min(std::size_t(kRows), nrows - row0));
  const int ns = p.num_splits;
  for (int idx = threadIdx.x; idx < ns * kRows; idx += kThreads) {
    const int s = idx / kRows, r = idx % kRows;
    if (r < rows) sl[s * kRows + r] = __ldcg(p.lse_part + std::size_t(s) * nrows + row0 + r);
  }
  __syncthreads();
  split_scales(sl, kRows, ns, rows, lanes, nl);
  __syncthreads();
  for (int c = threadIdx.x; c < rows * (D / 4); c += kThreads) {
    const int r = c / (D / 4), col = 4 * (c % (D / 4));
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (int s = 0; s < ns; ++s) {
      const float4 x = __ldcg(
          reinterpret_cast<const float4*>(p.o_part + (std::size_t(s) * nrows + row0 + r) * D + col));
      const float sc = sl[s * kRows + r];
      a0 = __fmaf_rn(sc, x.x, a0);
      a1 = __fmaf_rn(sc, x.y, a1);
      a2 = __fmaf_rn(sc, x.z, a2);
      a3 = __fmaf_rn(sc, x.w, a3);
    }
    using E = Elem<kBf16>;
    const uint2 w = make_uint2(std::uint32_t(E::cvt(a0)) | (std::uint32_t(E::cvt(a1)) << 16),
                                    std::uint32_t(E::cvt(a2)) | (std::uint32_t(E::cvt(a3)) << 16));
    *reinterpret_cast<uint2*>(p.o + (row0 + r) * D + col) = w;
  }
}

// Random fp16/bf16 for the timings, N(0,1)-like (Irwin-Hall of four 16-bit uniforms), never zero
// runs. Fills n elements from `seed`.
template <bool kBf16>
__global__ void fill_kernel(std::uint16_t* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s += float((z >> (16 * k)) & 0xFFFF);
    x[i] = Elem<kBf16>::cvt((s - 131070.0f) * (1.7320508f / 65536.0f));
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

using attnsim::probe::to_device;

long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// The next of 2, 4, ..., 128 at or above n (ORT/FA2 MAXSPLIT_SWITCH / the combine's kMaxSplits).
int max_splits_switch(int n) {
  int k = 2;
  while (k < n && k < 128) k *= 2;
  return k;
}

struct Problem {
  int batch = 1, hq = 1, hk = 1, d = 128;
  bool bf16 = false;
  std::vector<int> lk;
  int g() const { return hq / hk; }
  int mblocks() const { return int(cdiv(g(), kBlockM)); }
  int block_n() const { return d <= 64 ? 256 : (d <= 128 ? 128 : 64); }
  int lk_max() const { return *std::max_element(lk.begin(), lk.end()); }
  int nnb() const { return int(cdiv(lk_max(), block_n())); }
  int nb(int b) const { return int(cdiv(lk[std::size_t(b)], block_n())); }
  int blocks() const { return batch * hk * mblocks(); }
};

struct LeanPlan {
  long long total = 0, mtpt = 0, high = 0;
  int grid = 0, nnb = 0, num_splits_ort = 0, max_splits = 1, kmax = 2, nl = 1;
  std::vector<int> cta_start, cta_count;
  std::vector<int> segs;       // [nseg][kSegCols]
  std::vector<int> seg_begin;  // [grid + 1]
  int nseg() const { return int(segs.size() / kSegCols); }
};

// ORT lean_api.cc get_num_splits_and_buffer_sizes and lean_fwd_kernel.h's CTA ranges, with ragged
// per-batch tile counts and ceil(g/64) m-blocks (see the file's header).
LeanPlan lean_plan(const Problem& pr, int sms) {
  LeanPlan p;
  const int mblocks = pr.mblocks();
  std::vector<long long> first(std::size_t(pr.blocks()) + 1, 0);  // first tile of each block
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.hk; ++h)
      for (int m = 0; m < mblocks; ++m) {
        const std::size_t blk = std::size_t((b * pr.hk + h) * mblocks + m);
        first[blk + 1] = first[blk] + pr.nb(b);
      }
  p.total = first.back();
  p.nnb = pr.nnb();
  long long grid = 2LL * sms;
  if (p.total <= 4LL * sms) {
    grid = std::min((p.total + 1) / 2, (32 * p.total + p.nnb - 1) / p.nnb);
  } else {
    grid = std::min(2LL * sms, 32LL * pr.hk * pr.batch * mblocks);
  }
  grid = std::max(1LL, std::min(grid, p.total));
  p.grid = int(grid);
  p.mtpt = cdiv(p.total, grid);
  p.high = p.total - (p.mtpt - 1) * grid;
  if (p.total % grid == 0) {
    p.num_splits_ort = int(1 + (p.nnb + p.mtpt - 2) / p.mtpt);
  } else if (p.mtpt > 1) {
    p.num_splits_ort = int(1 + (p.nnb + p.mtpt - 3) / (p.mtpt - 1));
  } else {
    p.num_splits_ort = 1;
  }
  auto cta_of = [&](long long tile) -> long long {
    return tile > p.high * p.mtpt ? p.high + (tile - p.high * p.mtpt) / (p.mtpt - 1)
                                  : tile / p.mtpt;
  };
  std::size_t blk = 0;
  for (int c = 0; c < p.grid; ++c) {
    const long long start = c < p.high ? c * p.mtpt : (p.mtpt - 1) * c + p.high;
    const long long count = c < p.high ? p.mtpt : p.mtpt - 1;
    p.cta_start.push_back(int(start));
    p.cta_count.push_back(int(count));
    p.seg_begin.push_back(p.nseg());
    long long t = start;
    while (t < start + count) {
      while (first[blk + 1] <= t) ++blk;
      const long long seg_end = std::min(start + count, first[blk + 1]);
      const int nb = int(first[blk + 1] - first[blk]);
      const int m = int(blk % std::size_t(mblocks)), h = int(blk / std::size_t(mblocks)) % pr.hk;
      const int b = int(blk / std::size_t(mblocks * pr.hk));
      const int n_begin = int(t - first[blk]), n_end = int(seg_end - first[blk]);
      const int host = n_begin == 0, fin = n_end == nb;
      const int split = int(c - cta_of(first[blk]));
      const int total_splits = host ? int(cta_of(first[blk + 1] - 1) - c + 1) : 0;
      const int row[kSegCols] = {c, b, h, m, n_begin, n_end, host, fin, split, total_splits};
      p.segs.insert(p.segs.end(), row, row + kSegCols);
      p.max_splits = std::max(p.max_splits, std::max(split + 1, total_splits));
      t = seg_end;
    }
  }
  p.seg_begin.push_back(p.nseg());
  // ORT's host template kMaxSplits = MAXSPLIT_SWITCH(num_splits); values per lane kMaxSplits/2.
  p.kmax = max_splits_switch(std::max(p.num_splits_ort, p.max_splits));
  p.nl = p.kmax / 2;
  if (p.max_splits > 128) {
    std::fprintf(stderr, "lean plan: a block needs %d splits (> 128)\n", p.max_splits);
    std::exit(1);
  }
  return p;
}

// FA2 flash_api.cpp num_splits_heuristic, called as set_params_splitkv does (after the group swap
// of mha_fwd_kvcache): (batch * heads_kv * m_blocks, 2 * SMs, n_blocks(LKmax), 128).
int fd_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits) {
  if (batch_nheads_mblocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  float max_efficiency = 0.f;
  std::vector<float> efficiency;
  auto ceildiv = [](int a, int b) { return (a + b - 1) / b; };
  auto eligible = [&](int s) {
    return s == 1 || ceildiv(num_n_blocks, s) != ceildiv(num_n_blocks, s - 1);
  };
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) {
      efficiency.push_back(0.f);
    } else {
      const float n_waves = float(batch_nheads_mblocks * s) / num_sms;
      const float eff = n_waves / std::ceil(n_waves);
      if (eff > max_efficiency) max_efficiency = eff;
      efficiency.push_back(eff);
    }
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    if (efficiency[std::size_t(s) - 1] >= 0.85 * max_efficiency) return s;
  }
  return 1;
}
int fd_default_splits(const Problem& pr, int sms) {
  return fd_heuristic(pr.blocks(), 2 * sms, pr.nnb(), 128);
}

struct FdPlan {
  int num_splits = 1, combine_rows = 4, lanes = 2, nl = 1, kmax = 2, combine_grid = 0;
};
FdPlan fd_plan(const Problem& pr, int num_splits) {
  FdPlan f;
  f.num_splits = num_splits;
  f.combine_rows = pr.d % 128 == 0 ? 4 : (pr.d % 64 == 0 ? 8 : 16);
  f.kmax = max_splits_switch(num_splits);
  f.lanes = std::min(128 / f.combine_rows, f.kmax);
  f.nl = int(cdiv(1LL * f.kmax * f.combine_rows, 128));
  f.combine_grid = int(cdiv(1LL * pr.batch * pr.hq, f.combine_rows));
  return f;
}

// Kernel dispatch over (D, dtype).
template <int D, bool kBf16>
struct Kernels {
  static void attributes() {
    ATTNSIM_CUDA_CHECK(cudaFuncSetAttribute(lean_kernel<D, kBf16>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(Shape<D>::kSmem)));
    ATTNSIM_CUDA_CHECK(cudaFuncSetAttribute(
        fd_kernel<D, kBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Shape<D>::kSmem)));
  }
  static int occupancy(bool lean) {
    int n = 0;
    if (lean) {
      ATTNSIM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, lean_kernel<D, kBf16>, kThreads, Shape<D>::kSmem));
    } else {
      ATTNSIM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, fd_kernel<D, kBf16>, kThreads, Shape<D>::kSmem));
    }
    return n;
  }
  static void lean(const Params& p, int grid, cudaStream_t st) {
    lean_kernel<D, kBf16><<<grid, kThreads, Shape<D>::kSmem, st>>>(p);
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
  }
  static void fd(const Params& p, const FdPlan& f, int blocks, cudaStream_t st) {
    fd_kernel<D, kBf16><<<dim3(f.num_splits, blocks), kThreads, Shape<D>::kSmem, st>>>(p);
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
    if (f.num_splits > 1) {
      fd_combine_kernel<D, kBf16><<<f.combine_grid, kThreads, 0, st>>>(p, f.lanes, f.nl);
      ATTNSIM_CUDA_CHECK(cudaGetLastError());
    }
  }
};
template <class F>
void dispatch(int d, bool bf16, F&& f) {
  if (d == 64 && !bf16) {
    f(Kernels<64, false>{});
  } else if (d == 64 && bf16) {
    f(Kernels<64, true>{});
  } else if (d == 128 && !bf16) {
    f(Kernels<128, false>{});
  } else if (d == 128 && bf16) {
    f(Kernels<128, true>{});
  } else {
    std::fprintf(stderr, "unsupported head dim %d\n", d);
    std::exit(1);
  }
}
void set_attributes() {
  for (int d : {64, 128})
    for (bool bf : {false, true}) dispatch(d, bf, [](auto k) { decltype(k)::attributes(); });
}

// softmax_scale = 1/sqrt(D) as float; scale_log2 = float(double(softmax_scale) * M_LOG2E) (ORT
// set_params_fprop: params.scale_softmax_log2 = softmax_scale * M_LOG2E, a double product).
float softmax_scale_of(int d) { return float(1.0 / std::sqrt(double(d))); }
float scale_log2_of(int d) {
  return float(double(softmax_scale_of(d)) * 1.44269504088896340736);
}

// Device buffers of one problem. K/V hold batch b at kv_off[b] with head stride kv_ld[b] rows.
struct DeviceProblem {
  Problem pr;
  std::uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  long long* kv_off = nullptr;
  int *kv_ld = nullptr, *lk = nullptr, *flags = nullptr, *segs = nullptr, *seg_begin = nullptr;
  float *o_part = nullptr, *lse_part = nullptr;
  std::size_t part_slots = 0;  // allocated splits
  Params params() const {
    Params p{};
    p.q = q, p.k = k, p.v = v, p.kv_off = kv_off, p.kv_ld = kv_ld, p.lk = lk, p.o = o;
    p.o_part = o_part, p.lse_part = lse_part, p.flags = flags, p.segs = segs;
    p.seg_begin = seg_begin;
    p.batch = pr.batch, p.hq = pr.hq, p.hk = pr.hk, p.g = pr.g(), p.mblocks = pr.mblocks();
    p.lk_max = pr.lk_max();
    p.scale_log2 = scale_log2_of(pr.d);
    p.softmax_scale = softmax_scale_of(pr.d);
    return p;
  }
};

std::size_t rows_of(const Problem& pr) { return std::size_t(pr.batch) * pr.hq; }

// ---------------------------------------------------------------------------------------------
// record

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double normal(std::uint64_t& s) {
  const double u1 = (double(splitmix(s) >> 11) + 0.5) * 0x1p-53;
  const double u2 = double(splitmix(s) >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

struct Case {
  std::string name, kind, note;
  Problem pr;
  int sms = 0;  // 0: the device's; else the plan is computed for this many SMs
  std::uint64_t seed = 1;
};

std::vector<Case> record_cases() {
  auto mk = [](std::string name, std::string kind, int b, int hq, int hk, int d,
               std::vector<int> lk, std::uint64_t seed, std::string note, bool bf16 = false,
               int sms = 0) {
    Case c;
    c.name = std::move(name);
    c.kind = std::move(kind);
    c.note = std::move(note);
    c.pr.batch = b, c.pr.hq = hq, c.pr.hk = hk, c.pr.d = d, c.pr.bf16 = bf16;
    c.pr.lk = std::move(lk);
    c.sms = sms;
    c.seed = seed;
    return c;
  };
  return {
      mk("n_b1_g1_lk1000", "normal", 1, 1, 1, 128, {1000}, 11, "g = 1, LK not a multiple of 128"),
      mk("n_b1_g4_lk777", "normal", 1, 4, 1, 128, {777}, 12, "GQA g = 4"),
      mk("n_b3_g8_ragged", "normal", 3, 8, 1, 128, {1400, 90, 300}, 13,
         "ragged, LK < block_n, uneven CTA loads (high_load_tbs < grid)"),
      mk("n_b4_g16_ragged_d64", "normal", 4, 16, 1, 64, {2048, 300, 1, 1025}, 14,
         "D = 64 (block_n 256), ragged, LK = 1"),
      mk("n_b1_g80_two_mblocks", "normal", 1, 80, 1, 128, {700}, 15,
         "g = 80: two m-blocks, the second with 16 rows"),
      mk("n_b1_g128_d64", "normal", 1, 128, 1, 64, {513}, 16, "g = 128, D = 64: two full m-blocks"),
      mk("spike_b1_g4_lk1600", "spike", 1, 4, 1, 128, {1600}, 17,
         "keys with huge scores in late and early tiles: the max moves between splits"),
      mk("equal_b1_g8_lk1300", "equal_k", 1, 8, 1, 128, {1300}, 18,
         "all K rows equal (equal scores per head), head 0 has Q = 0"),
      mk("largev_b1_g4_lk900", "large_v", 1, 4, 1, 128, {900}, 19, "V ~ N(0,1)*16384, |V| <= 65504"),
      mk("short_b2_g1_lk100_37", "normal", 2, 2, 2, 128, {100, 37}, 20, "LK < block_n only"),
      mk("n_b2_g2_d64_lk1100", "normal", 2, 4, 2, 64, {1100, 400}, 21, "D = 64, ragged, g = 2"),
      mk("wide_b1_g8_lk1024", "wide", 1, 8, 1, 128, {1024}, 22,
         "Q, K ~ N(0, 9): exp2 arguments down to -104, 92% of p below 2^-24 (fp16 P subnormal or 0)"),
      mk("n_b1_h4_g1_lk640_d64", "normal", 1, 4, 4, 64, {640}, 23,
         "3 tiles per block, 2 per CTA: segments cross head boundaries"),
      mk("n_b1_g64_lk600", "normal", 1, 64, 1, 128, {600}, 24, "g = 64: one full m-block"),
      mk("bf16_b2_g4_ragged", "normal", 2, 4, 1, 128, {1000, 333}, 25, "bf16 inputs and output",
         true),
      mk("sms4_b2_g2_ragged", "normal", 2, 2, 1, 128, {1200, 900}, 26,
         "plan for 4 SMs: the total > 4*SMs grid branch, mtpt 3", false, 4),
  };
}

// Inputs of one case: q [B][HQ][D], k/v [B][HK][LKmax][D]; rows past LK_b are NaN (never read).
void make_inputs(const Case& c, std::vector<std::uint16_t>& q, std::vector<std::uint16_t>& k,
                 std::vector<std::uint16_t>& v) {
  const Problem& pr = c.pr;
  const int d = pr.d, lm = pr.lk_max(), g = pr.g();
  auto enc = [&](double x) {
    return pr.bf16 ? Elem<true>::from_float_host(float(x)) : Elem<false>::from_float_host(float(x));
  };
  auto dec = [&](std::uint16_t b) {
    return pr.bf16 ? Elem<true>::to_float_host(b) : Elem<false>::to_float_host(b);
  };
  const std::uint16_t nan = pr.bf16 ? Elem<true>::kNaN : Elem<false>::kNaN;
  std::uint64_t s = c.seed * 0x1000193ull;
  const double qk_sigma = c.kind == "wide" ? 3.0 : 1.0;
  q.assign(rows_of(pr) * d, 0);
  for (auto& x : q) x = enc(qk_sigma * normal(s));
  k.assign(std::size_t(pr.batch) * pr.hk * lm * d, nan);
  v.assign(k.size(), nan);
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.hk; ++h)
      for (int j = 0; j < pr.lk[std::size_t(b)]; ++j) {
        const std::size_t row = ((std::size_t(b) * pr.hk + h) * lm + j) * d;
        for (int e = 0; e < d; ++e) {
          k[row + e] = enc(qk_sigma * normal(s));
          double vv = normal(s);
          if (c.kind == "large_v") vv = std::max(-65504.0, std::min(65504.0, vv * 16384.0));
          v[row + e] = enc(vv);
        }
      }
  if (c.kind == "spike") {
    // K row p = a * Q row h: score_h(p) = a |q_h|^2 / sqrt(D) ~ 11.3 a (natural-log units).
    const struct {
      int head, key;
      double a;
    } spikes[] = {{0, 1500, 2.6}, {1, 60, 2.6}, {2, 800, 1.2}, {3, 700, 2.0}, {3, 1550, 2.0}};
    for (const auto& sp : spikes)
      for (int e = 0; e < d; ++e)
        k[std::size_t(sp.key) * d + e] = enc(sp.a * dec(q[std::size_t(sp.head) * d + e]));
  }
  if (c.kind == "equal_k") {
    for (int b = 0; b < pr.batch; ++b)
      for (int h = 0; h < pr.hk; ++h) {
        const std::size_t base = (std::size_t(b) * pr.hk + h) * lm * d;
        for (int j = 1; j < pr.lk[std::size_t(b)]; ++j)
          std::copy(k.begin() + base, k.begin() + base + d, k.begin() + base + std::size_t(j) * d);
      }
    for (int b = 0; b < pr.batch; ++b)
      std::fill(q.begin() + std::size_t(b) * pr.hq * d, q.begin() + std::size_t(b) * pr.hq * d + d,
                std::uint16_t(0));
  }
  (void)g;
}

// FP64 reference output [B][HQ][D].
std::vector<double> reference(const Problem& pr, const std::vector<std::uint16_t>& q,
                              const std::vector<std::uint16_t>& k,
                              const std::vector<std::uint16_t>& v) {
  const int d = pr.d, lm = pr.lk_max(), g = pr.g();
  auto dec = [&](std::uint16_t b) {
    return double(pr.bf16 ? Elem<true>::to_float_host(b) : Elem<false>::to_float_host(b));
  };
  const double scale = double(softmax_scale_of(d));
  std::vector<double> o(rows_of(pr) * d, 0.0);
  for (int b = 0; b < pr.batch; ++b)
    for (int h = 0; h < pr.hq; ++h) {
      const int hk = h / g, lk = pr.lk[std::size_t(b)];
      const std::size_t kb = (std::size_t(b) * pr.hk + hk) * lm * d;
      const std::size_t qr = (std::size_t(b) * pr.hq + h) * d;
      std::vector<double> sc(static_cast<std::size_t>(lk), 0.0);
      double mx = -INFINITY;
      for (int j = 0; j < lk; ++j) {
        double acc = 0;
        for (int e = 0; e < d; ++e) acc += dec(q[qr + e]) * dec(k[kb + std::size_t(j) * d + e]);
        sc[std::size_t(j)] = acc * scale;
        mx = std::max(mx, sc[std::size_t(j)]);
      }
      double l = 0;
      for (auto& x : sc) l += (x = std::exp(x - mx));
      for (int j = 0; j < lk; ++j)
        for (int e = 0; e < d; ++e)
          o[qr + e] += sc[std::size_t(j)] / l * dec(v[kb + std::size_t(j) * d + e]);
    }
  return o;
}

// The recording: DIR/lean_record.bin holds the arrays, DIR/lean_manifest.json says where.
struct Recorder {
  std::FILE* bin = nullptr;
  std::string json;
  std::size_t offset = 0;
  bool first_array = true;
  void array(const std::string& path, const char* dtype, std::vector<std::size_t> shape,
             const void* data, std::size_t bytes) {
    if (bytes && std::fwrite(data, 1, bytes, bin) != bytes) {
      std::fprintf(stderr, "short write\n");
      std::exit(1);
    }
    json += first_array ? "\n    " : ",\n    ";
    first_array = false;
    json += "{\"path\": \"" + path + "\", \"dtype\": \"" + dtype + "\", \"shape\": [";
    for (std::size_t i = 0; i < shape.size(); ++i)
      json += (i ? ", " : "") + std::to_string(shape[i]);
    json += "], \"offset\": " + std::to_string(offset) + "}";
    offset += bytes;
  }
};

template <class T>
std::vector<T> from_device(const T* p, std::size_t n) {
  std::vector<T> h(n);
  if (n) ATTNSIM_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

std::string attr(const std::string& k, long long v) {
  return "\"" + k + "\": " + std::to_string(v);
}
std::string attr(const std::string& k, const std::string& v) {
  return "\"" + k + "\": \"" + v + "\"";
}
std::string attr_f(const std::string& k, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  if (std::isnan(v)) std::snprintf(buf, sizeof buf, "NaN");
  if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "Infinity" : "-Infinity");
  return "\"" + k + "\": " + buf;
}

struct Outputs {
  std::vector<std::uint16_t> o;
  std::vector<std::uint32_t> o_part, lse_part;
  bool operator==(const Outputs& x) const {
    return o == x.o && o_part == x.o_part && lse_part == x.lse_part;
  }
};

int run_record(const std::string& dir, const std::string& only) {
  set_attributes();
  cudaDeviceProp prop;
  ATTNSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  Recorder rec;
  rec.bin = std::fopen((dir + "/lean_record.bin").c_str(), "wb");
  if (!rec.bin) {
    std::fprintf(stderr, "cannot write into %s\n", dir.c_str());
    return 2;
  }
  std::string json = "{\n\"device\": \"" + std::string(prop.name) +
                     "\",\n\"sms\": " + std::to_string(prop.multiProcessorCount) + ",\n\"cases\": [";
  int failures = 0, ncases = 0;
  std::printf("%-24s %5s %5s %6s %7s %7s | %10s %10s %10s %10s | %s\n", "case", "grid", "tiles",
              "splits", "fd_spl", "maxV", "lean_err", "fd_err", "fd1_err", "lean-fd1", "repeat");
  for (const Case& c : record_cases()) {
    if (!only.empty() && c.name != only) continue;
    const Problem& pr = c.pr;
    const int sms = c.sms ? c.sms : prop.multiProcessorCount;
    const int d = pr.d, g = pr.g(), lm = pr.lk_max();
    std::vector<std::uint16_t> q, k, v;
    make_inputs(c, q, k, v);
    const LeanPlan lp = lean_plan(pr, sms);
    const int heur = fd_default_splits(pr, sms);
    // FlashDecoding at the heuristic's count, 1 split, and a third fixed count.
    std::vector<int> fd_counts = {heur};
    for (int cand : {1, 3, 2, 5})
      if (fd_counts.size() < 3 && std::find(fd_counts.begin(), fd_counts.end(), cand) == fd_counts.end())
        fd_counts.push_back(cand);
    const std::size_t one = std::size_t(std::find(fd_counts.begin(), fd_counts.end(), 1) - fd_counts.begin());

    DeviceProblem dp;
    dp.pr = pr;
    dp.q = to_device(q);
    dp.k = to_device(k);
    dp.v = to_device(v);
    std::vector<long long> off(std::size_t(pr.batch));
    std::vector<int> ld(std::size_t(pr.batch), lm);
    for (int b = 0; b < pr.batch; ++b) off[std::size_t(b)] = 1LL * b * pr.hk * lm * d;
    dp.kv_off = to_device(off);
    dp.kv_ld = to_device(ld);
    dp.lk = to_device(pr.lk);
    dp.segs = to_device(lp.segs);
    dp.seg_begin = to_device(lp.seg_begin);
    const std::size_t nrows = rows_of(pr);
    const std::size_t max_slots =
        std::size_t(std::max(lp.max_splits, *std::max_element(fd_counts.begin(), fd_counts.end())));
    ATTNSIM_CUDA_CHECK(cudaMalloc(&dp.o, nrows * d * 2));
    ATTNSIM_CUDA_CHECK(cudaMalloc(&dp.o_part, max_slots * nrows * d * 4));
    ATTNSIM_CUDA_CHECK(cudaMalloc(&dp.lse_part, max_slots * nrows * 4));
    ATTNSIM_CUDA_CHECK(cudaMalloc(&dp.flags, std::size_t(pr.blocks()) * 4));

    // One launch: poison what the kernels write, run, copy back `slots` partial slots.
    auto run = [&](bool lean, const FdPlan& f, int slots) {
      ATTNSIM_CUDA_CHECK(cudaMemset(dp.o, 0xFF, nrows * d * 2));
      ATTNSIM_CUDA_CHECK(cudaMemset(dp.o_part, 0xFF, max_slots * nrows * d * 4));
      ATTNSIM_CUDA_CHECK(cudaMemset(dp.lse_part, 0xFF, max_slots * nrows * 4));
      ATTNSIM_CUDA_CHECK(cudaMemset(dp.flags, 0, std::size_t(pr.blocks()) * 4));
      Params p = dp.params();
      p.lean_nl = lp.nl;
      p.record_all = 1;
      p.num_splits = f.num_splits;
      dispatch(d, pr.bf16, [&](auto kern) {
        using K = decltype(kern);
        if (lean) {
          K::lean(p, lp.grid, 0);
        } else {
          K::fd(p, f, pr.blocks(), 0);
        }
      });
      ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
      Outputs out;
      out.o = from_device(dp.o, nrows * d);
      out.o_part = from_device(reinterpret_cast<const std::uint32_t*>(dp.o_part),
                               std::size_t(slots) * nrows * d);
      out.lse_part = from_device(reinterpret_cast<const std::uint32_t*>(dp.lse_part),
                                 std::size_t(slots) * nrows);
      return out;
    };
    const std::vector<double> ref = reference(pr, q, k, v);
    double maxv = 0;
    for (std::uint16_t x : v) {
      const double f = pr.bf16 ? Elem<true>::to_float_host(x) : Elem<false>::to_float_host(x);
      if (std::isfinite(f)) maxv = std::max(maxv, std::fabs(f));
    }
    auto err = [&](const std::vector<std::uint16_t>& o, std::size_t* unwritten) {
      double e = 0;
      *unwritten = 0;
      for (std::size_t i = 0; i < o.size(); ++i) {
        *unwritten += o[i] == 0xFFFFu;
        const double f = pr.bf16 ? Elem<true>::to_float_host(o[i]) : Elem<false>::to_float_host(o[i]);
        e = std::isfinite(f) ? std::max(e, std::fabs(f - ref[i])) : INFINITY;
      }
      return e;
    };
    const double tol = 4e-3 * std::max(1.0, maxv);
    bool ok = true, repeat_ok = true;

    // Lean.
    const Outputs l1 = run(true, FdPlan{}, lp.max_splits), l2 = run(true, FdPlan{}, lp.max_splits);
    repeat_ok &= l1 == l2;
    std::size_t unwritten = 0;
    const double lean_err = err(l1.o, &unwritten);
    ok &= lean_err <= tol && unwritten == 0;
    // Every split slot of every block written (record_all) for the block's rows.
    std::size_t part_missing = 0;
    for (int si = 0; si < lp.nseg(); ++si) {
      const int* sg = &lp.segs[std::size_t(si) * kSegCols];
      const int rows = std::min(kBlockM, g - sg[kMBlock] * kBlockM);
      for (int r = 0; r < rows; ++r) {
        const std::size_t fr = std::size_t(sg[kSplit]) * nrows +
                               (std::size_t(sg[kBatch]) * pr.hk + sg[kHead]) * g +
                               sg[kMBlock] * kBlockM + r;
        part_missing += l1.lse_part[fr] == 0xFFFFFFFFu;
        for (int e = 0; e < d; ++e) part_missing += l1.o_part[fr * d + e] == 0xFFFFFFFFu;
      }
    }
    ok &= part_missing == 0;

    // FlashDecoding at each split count.
    std::vector<Outputs> fds;
    std::vector<FdPlan> fps;
    std::vector<double> fd_errs;
    for (int ns : fd_counts) {
      const FdPlan f = fd_plan(pr, ns);
      const Outputs a = run(false, f, ns > 1 ? ns : 0), b = run(false, f, ns > 1 ? ns : 0);
      repeat_ok &= a == b;
      std::size_t un = 0;
      fd_errs.push_back(err(a.o, &un));
      ok &= fd_errs.back() <= tol && un == 0;
      fds.push_back(a);
      fps.push_back(f);
    }
    double lean_fd1 = 0;
    for (std::size_t i = 0; i < l1.o.size(); ++i) {
      const double a = pr.bf16 ? Elem<true>::to_float_host(l1.o[i]) : Elem<false>::to_float_host(l1.o[i]);
      const double b = pr.bf16 ? Elem<true>::to_float_host(fds[one].o[i])
                               : Elem<false>::to_float_host(fds[one].o[i]);
      lean_fd1 = std::max(lean_fd1, std::fabs(a - b));
    }
    ok &= repeat_ok;
    failures += !ok;
    std::printf("%-24s %5d %5lld %6d %7d %7.0f | %10.3g %10.3g %10.3g %10.3g | %s%s%s\n",
                c.name.c_str(), lp.grid, lp.total, lp.max_splits, heur, maxv, lean_err,
                fd_errs[0], fd_errs[one], lean_fd1, repeat_ok ? "identical" : "DIFFER",
                part_missing ? " PARTIAL-UNWRITTEN" : "", ok ? "" : "  FAIL");

    // Record.
    rec.first_array = true;
    rec.json.clear();
    const std::string n = c.name;
    rec.array(n + "/lk", "<i4", {std::size_t(pr.batch)}, pr.lk.data(), pr.lk.size() * 4);
    rec.array(n + "/q", "<u2", {std::size_t(pr.batch), std::size_t(pr.hq), std::size_t(d)},
              q.data(), q.size() * 2);
    const std::vector<std::size_t> kvshape = {std::size_t(pr.batch), std::size_t(pr.hk),
                                              std::size_t(lm), std::size_t(d)};
    rec.array(n + "/k", "<u2", kvshape, k.data(), k.size() * 2);
    rec.array(n + "/v", "<u2", kvshape, v.data(), v.size() * 2);
    const std::vector<int> cta = [&] {
      std::vector<int> x;
      for (int i = 0; i < lp.grid; ++i) {
        x.push_back(lp.cta_start[std::size_t(i)]);
        x.push_back(lp.cta_count[std::size_t(i)]);
      }
      return x;
    }();
    rec.array(n + "/lean/cta_tiles", "<i4", {std::size_t(lp.grid), 2}, cta.data(), cta.size() * 4);
    rec.array(n + "/lean/segments", "<i4", {std::size_t(lp.nseg()), std::size_t(kSegCols)},
              lp.segs.data(), lp.segs.size() * 4);
    rec.array(n + "/lean/o", "<u2", {std::size_t(pr.batch), std::size_t(pr.hq), std::size_t(d)},
              l1.o.data(), l1.o.size() * 2);
    const std::vector<std::size_t> pshape = {std::size_t(lp.max_splits), std::size_t(pr.batch),
                                             std::size_t(pr.hk), std::size_t(g), std::size_t(d)};
    rec.array(n + "/lean/o_partial", "<u4", pshape, l1.o_part.data(), l1.o_part.size() * 4);
    rec.array(n + "/lean/lse_partial", "<u4",
              {std::size_t(lp.max_splits), std::size_t(pr.batch), std::size_t(pr.hk), std::size_t(g)},
              l1.lse_part.data(), l1.lse_part.size() * 4);
    std::string fd_attrs;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const FdPlan& f = fps[i];
      const std::string gname = n + "/fd_s" + std::to_string(f.num_splits);
      rec.array(gname + "/o", "<u2", {std::size_t(pr.batch), std::size_t(pr.hq), std::size_t(d)},
                fds[i].o.data(), fds[i].o.size() * 2);
      if (f.num_splits > 1) {
        rec.array(gname + "/o_partial", "<u4",
                  {std::size_t(f.num_splits), std::size_t(pr.batch), std::size_t(pr.hk),
                   std::size_t(g), std::size_t(d)},
                  fds[i].o_part.data(), fds[i].o_part.size() * 4);
        rec.array(gname + "/lse_partial", "<u4",
                  {std::size_t(f.num_splits), std::size_t(pr.batch), std::size_t(pr.hk),
                   std::size_t(g)},
                  fds[i].lse_part.data(), fds[i].lse_part.size() * 4);
      }
      fd_attrs += std::string(i ? ", " : "") + "\"fd_s" + std::to_string(f.num_splits) + "\": {" +
                  attr("num_splits", f.num_splits) + ", " +
                  attr("heuristic", i == 0) + ", " + attr("combine_rows", f.combine_rows) + ", " +
                  attr("combine_max_splits", f.kmax) + ", " + attr("combine_lanes", f.lanes) +
                  ", " + attr("combine_values_per_lane", f.nl) + ", " +
                  attr("combine_grid", f.combine_grid) + ", " + attr_f("max_abs_err", fd_errs[i]) +
                  "}";
    }
    float sc = softmax_scale_of(d), sl2 = scale_log2_of(d);
    std::uint32_t scb, sl2b;
    std::memcpy(&scb, &sc, 4);
    std::memcpy(&sl2b, &sl2, 4);
    json += std::string(ncases ? "," : "") + "\n {" + attr("name", c.name) + ", " +
            attr("kind", c.kind) + ", " + attr("note", c.note) + ", \"attrs\": {" +
            attr("batch", pr.batch) + ", " + attr("hq", pr.hq) + ", " + attr("hk", pr.hk) + ", " +
            attr("d", d) + ", " + attr("g", g) + ", " + attr("dtype", pr.bf16 ? "bf16" : "fp16") +
            ", " + attr("lk_max", lm) + ", " + attr("block_m", kBlockM) + ", " +
            attr("block_n", pr.block_n()) + ", " + attr("m_blocks", pr.mblocks()) + ", " +
            attr("num_sms", sms) + ", " + attr("seed", (long long)c.seed) + ", " +
            attr("softmax_scale_bits", scb) + ", " + attr("scale_log2_bits", sl2b) + ", " +
            attr_f("max_abs_v", maxv) + ", " + attr_f("tolerance", tol) + ", " +
            attr("repeat_identical", repeat_ok) + ", " + attr("checks_passed", ok) +
            "}, \"lean\": {" + attr("grid", lp.grid) + ", " + attr("total_tiles", lp.total) +
            ", " + attr("max_tiles_per_tb", lp.mtpt) + ", " + attr("high_load_tbs", lp.high) +
            ", " + attr("num_n_blocks", lp.nnb) + ", " + attr("num_splits", lp.max_splits) +
            ", " + attr("num_splits_ort", lp.num_splits_ort) + ", " +
            attr("host_max_splits", lp.kmax) + ", " + attr("host_values_per_lane", lp.nl) + ", " +
            attr_f("max_abs_err", lean_err) + "}, " + fd_attrs + ", \"arrays\": [" + rec.json +
            "]}";
    ++ncases;
    for (void* ptr : {(void*)dp.q, (void*)dp.k, (void*)dp.v, (void*)dp.o, (void*)dp.kv_off,
                      (void*)dp.kv_ld, (void*)dp.lk, (void*)dp.flags, (void*)dp.segs,
                      (void*)dp.seg_begin, (void*)dp.o_part, (void*)dp.lse_part})
      ATTNSIM_CUDA_CHECK(cudaFree(ptr));
  }
  json += "\n]}\n";
  std::fclose(rec.bin);
  attnsim::probe::write_bin(dir + "/lean_manifest.json", json.data(), json.size());
  std::printf("record: %d cases, %d failed (tolerance 4e-3 * max(1, max|V|) vs FP64; repeat "
              "bit-identity; no output or partial left at its poison)\n",
              ncases, failures);
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// time

// ragged_lengths: numerics/ragged.hpp (shared with `attnsim repro lean-ragged`).

struct TimeConfig {
  std::string kind, spec;
  Problem pr;
  double kv_bytes() const {
    double s = 0;
    for (int x : pr.lk) s += x;
    return 2.0 * pr.hk * s * pr.d * 2;
  }
};

std::vector<TimeConfig> time_configs(double limit) {
  std::vector<TimeConfig> out;
  const std::pair<int, int> heads[] = {{32, 32}, {32, 8}, {64, 8}};
  for (int b : {1, 2, 4, 8, 16, 32, 64})
    for (auto [hq, hk] : heads)
      for (int lk = 1024; lk <= 512 * 1024; lk *= 2) {
        TimeConfig c;
        c.kind = "uniform";
        c.pr.batch = b, c.pr.hq = hq, c.pr.hk = hk, c.pr.d = 128;
        c.pr.lk.assign(std::size_t(b), lk);
        if (c.kv_bytes() <= limit) out.push_back(c);
      }
  std::uint64_t seed = 1;
  for (int b : {4, 8, 16, 32})
    for (int m : {8192, 32768, 131072})
      for (double ratio : {0.1, 0.25, 0.5, 0.75, 1.0})
        for (auto [hq, hk] : heads) {
          TimeConfig c;
          c.kind = "ragged";
          c.pr.batch = b, c.pr.hq = hq, c.pr.hk = hk, c.pr.d = 128;
          c.pr.lk = ragged_lengths(b, m, ratio, seed++);
          char buf[96];
          std::snprintf(buf, sizeof buf, "B=%d;max=%d;ratio=%.2f", b, m, ratio);
          c.spec = buf;
          if (!c.pr.lk.empty() && c.kv_bytes() <= limit) out.push_back(c);
        }
  return out;
}

struct Stat {
  double median = 0, p10 = 0, p90 = 0;
};
Stat stat_of(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  auto at = [&](double q) { return double(ms[std::size_t(std::floor(q * double(n - 1)))]) * 1e3; };
  Stat s;
  s.median = n % 2 ? double(ms[n / 2]) * 1e3 : 0.5e3 * (double(ms[n / 2 - 1]) + double(ms[n / 2]));
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  return s;
}

int run_time(const std::string& path, int max_configs) {
  set_attributes();
  cudaDeviceProp prop;
  ATTNSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("time: %s, %d SMs\n", prop.name, sms);
  for (int d : {64, 128})
    for (bool bf : {false, true})
      dispatch(d, bf, [&](auto k) {
        using K = decltype(k);
        std::printf("occupancy d=%d %s: lean %d CTAs/SM, fd %d CTAs/SM\n", d, bf ? "bf16" : "fp16",
                    K::occupancy(true), K::occupancy(false));
      });
  int occ = 0;
  dispatch(128, false, [&](auto k) { occ = decltype(k)::occupancy(true); });
  if (occ * sms < 2 * sms) {
    std::fprintf(stderr, "lean kernel: %d CTAs/SM, the grid of up to 2*SMs is not co-resident\n",
                 occ);
    return 1;
  }
  const double limit = 20e9;
  std::vector<TimeConfig> cfgs = time_configs(limit);
  if (max_configs > 0 && int(cfgs.size()) > max_configs) {
    // A spread subset (smoke runs): every k-th configuration.
    std::vector<TimeConfig> sub;
    for (std::size_t i = 0; i < cfgs.size(); i += cfgs.size() / std::size_t(max_configs))
      sub.push_back(cfgs[i]);
    cfgs = sub;
  }
  // Buffers sized for the largest configuration.
  std::size_t max_rows = 0, max_part = 0, max_blocks = 0, max_segs = 0, max_grid = 0;
  for (const TimeConfig& c : cfgs) {
    const LeanPlan lp = lean_plan(c.pr, sms);
    const int ns = fd_default_splits(c.pr, sms);
    max_rows = std::max(max_rows, rows_of(c.pr));
    max_part = std::max(max_part, std::size_t(std::max(lp.max_splits, ns)) * rows_of(c.pr));
    max_blocks = std::max(max_blocks, std::size_t(c.pr.blocks()));
    max_segs = std::max(max_segs, lp.segs.size());
    max_grid = std::max(max_grid, std::size_t(lp.grid) + 1);
  }
  const std::size_t buf_elems = std::size_t(limit / 2);
  std::uint16_t *buf, *dq, *o[3];
  float *o_part, *lse_part;
  int *flags, *segs, *seg_begin, *lk, *ld;
  long long* off;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&buf, buf_elems * 2));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&dq, max_rows * 128 * 2));
  for (auto& x : o) ATTNSIM_CUDA_CHECK(cudaMalloc(&x, max_rows * 128 * 2));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&o_part, max_part * 128 * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&lse_part, max_part * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&flags, max_blocks * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&segs, max_segs * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&seg_begin, max_grid * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&lk, 64 * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&ld, 64 * 4));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&off, 64 * 8));
  fill_kernel<false><<<4 * sms, 512>>>(buf, buf_elems, 2);
  fill_kernel<false><<<sms, 256>>>(dq, max_rows * 128, 1);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());

  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return 2;
  std::fprintf(f,
               "config,kind,kernel,batch,hq,hk,d,lk_max,lk_sum,lk,ragged_spec,kv_bytes,grid,"
               "combine_grid,tiles,num_splits,max_tiles_per_tb,high_load_tbs,time_us,p10_us,"
               "p90_us,launches,rotation,max_abs_diff_vs_fd1\n");
  const int kWarm = 3, kTimed = 25;
  cudaEvent_t ev[2 * kTimed];
  for (auto& e : ev) ATTNSIM_CUDA_CHECK(cudaEventCreate(&e));
  int bad = 0;
  double worst = 0;
  std::printf("%-4s %-8s %3s %3s %3s %8s %9s | %5s %9s | %4s %9s %9s | %7s %7s\n", "id", "kind",
              "B", "HQ", "HK", "lk_max", "GB", "grid", "lean_us", "ns", "fd_us", "fd1_us",
              "fd/lean", "fd1/ln");
  for (std::size_t ci = 0; ci < cfgs.size(); ++ci) {
    const TimeConfig& c = cfgs[ci];
    const Problem& pr = c.pr;
    const LeanPlan lp = lean_plan(pr, sms);
    const int ns = fd_default_splits(pr, sms);
    const FdPlan fps[2] = {fd_plan(pr, ns), fd_plan(pr, 1)};
    std::vector<long long> offs(std::size_t(pr.batch));
    std::vector<int> lds(pr.lk);
    long long kv_elems = 0;
    for (int b = 0; b < pr.batch; ++b) {
      offs[std::size_t(b)] = kv_elems;
      kv_elems += 1LL * pr.hk * pr.lk[std::size_t(b)] * pr.d;
    }
    ATTNSIM_CUDA_CHECK(cudaMemcpy(off, offs.data(), offs.size() * 8, cudaMemcpyHostToDevice));
    ATTNSIM_CUDA_CHECK(cudaMemcpy(ld, lds.data(), lds.size() * 4, cudaMemcpyHostToDevice));
    ATTNSIM_CUDA_CHECK(cudaMemcpy(lk, pr.lk.data(), pr.lk.size() * 4, cudaMemcpyHostToDevice));
    ATTNSIM_CUDA_CHECK(cudaMemcpy(segs, lp.segs.data(), lp.segs.size() * 4, cudaMemcpyHostToDevice));
    ATTNSIM_CUDA_CHECK(
        cudaMemcpy(seg_begin, lp.seg_begin.data(), lp.seg_begin.size() * 4, cudaMemcpyHostToDevice));
    ATTNSIM_CUDA_CHECK(cudaMemset(flags, 0, std::size_t(pr.blocks()) * 4));
    // Rotate over slices of the buffer so that small problems are not served from L2 (50 MB).
    const std::size_t slice = std::size_t(cdiv(2 * kv_elems, 2048) * 2048);  // elements
    const std::size_t nrot =
        std::max<std::size_t>(1, std::min(buf_elems / slice, std::size_t(cdiv(256LL << 20, 2 * slice))));
    Params p{};
    p.q = dq, p.kv_off = off, p.kv_ld = ld, p.lk = lk, p.o_part = o_part, p.lse_part = lse_part;
    p.flags = flags, p.segs = segs, p.seg_begin = seg_begin;
    p.batch = pr.batch, p.hq = pr.hq, p.hk = pr.hk, p.g = pr.g(), p.mblocks = pr.mblocks();
    p.lk_max = pr.lk_max(), p.lean_nl = lp.nl, p.record_all = 0;
    p.scale_log2 = scale_log2_of(pr.d), p.softmax_scale = softmax_scale_of(pr.d);
    Stat st[3];
    for (int kern = 0; kern < 3; ++kern) {
      p.o = o[kern];
      const FdPlan& fp = fps[kern == 2 ? 1 : 0];
      p.num_splits = fp.num_splits;
      auto launch = [&](int i) {
        p.k = buf + std::size_t(i) % nrot * slice;
        p.v = p.k + kv_elems;
        dispatch(pr.d, false, [&](auto k) {
          using K = decltype(k);
          if (kern == 0) {
            K::lean(p, lp.grid, 0);
          } else {
            K::fd(p, fp, pr.blocks(), 0);
          }
        });
      };
      for (int i = 0; i < kWarm; ++i) launch(i);
      for (int i = 0; i < kTimed; ++i) {
        ATTNSIM_CUDA_CHECK(cudaEventRecord(ev[2 * i]));
        launch(kWarm + i);
        ATTNSIM_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
      }
      ATTNSIM_CUDA_CHECK(cudaEventSynchronize(ev[2 * kTimed - 1]));
      std::vector<float> ms(kTimed);
      for (int i = 0; i < kTimed; ++i)
        ATTNSIM_CUDA_CHECK(cudaEventElapsedTime(&ms[std::size_t(i)], ev[2 * i], ev[2 * i + 1]));
      st[kern] = stat_of(ms);
    }
    // The three outputs (same last slice) agree within rounding.
    const std::size_t n = rows_of(pr) * pr.d;
    std::vector<std::uint16_t> h[3];
    for (int kern = 0; kern < 3; ++kern) h[kern] = from_device(o[kern], n);
    double diff[3] = {0, 0, 0};
    for (int kern = 0; kern < 2; ++kern)
      for (std::size_t i = 0; i < n; ++i) {
        const double a = Elem<false>::to_float_host(h[kern][i]);
        const double b = Elem<false>::to_float_host(h[2][i]);
        diff[kern] = std::isfinite(a) ? std::max(diff[kern], std::fabs(a - b)) : INFINITY;
      }
    worst = std::max({worst, diff[0], diff[1]});
    bad += !(diff[0] <= 1e-2 && diff[1] <= 1e-2);
    std::string lks;
    long long lk_sum = 0;
    for (int b = 0; b < pr.batch; ++b) {
      lks += (b ? ";" : "") + std::to_string(pr.lk[std::size_t(b)]);
      lk_sum += pr.lk[std::size_t(b)];
    }
    if (c.kind == "uniform") lks = std::to_string(pr.lk[0]);
    const char* names[3] = {"lean", "fd", "fd1"};
    for (int kern = 0; kern < 3; ++kern) {
      const FdPlan& fp = fps[kern == 2 ? 1 : 0];
      const int grid = kern == 0 ? lp.grid : fp.num_splits * pr.blocks();
      const int cgrid = kern == 0 || fp.num_splits == 1 ? 0 : fp.combine_grid;
      const int nsplit = kern == 0 ? lp.max_splits : fp.num_splits;
      std::fprintf(f, "%zu,%s,%s,%d,%d,%d,%d,%d,%lld,%s,%s,%.0f,%d,%d,%lld,%d,%lld,%lld,%.2f,%.2f,"
                      "%.2f,%d,%zu,%.3g\n",
                   ci, c.kind.c_str(), names[kern], pr.batch, pr.hq, pr.hk, pr.d, pr.lk_max(),
                   lk_sum, lks.c_str(), c.spec.c_str(), c.kv_bytes(), grid, cgrid, lp.total,
                   nsplit, kern == 0 ? lp.mtpt : 0LL, kern == 0 ? lp.high : 0LL, st[kern].median,
                   st[kern].p10, st[kern].p90, kTimed, nrot, kern == 2 ? 0.0 : diff[kern]);
    }
    std::printf("%-4zu %-8s %3d %3d %3d %8d %9.3f | %5d %9.1f | %4d %9.1f %9.1f | %7.3f %7.3f%s\n",
                ci, c.kind.c_str(), pr.batch, pr.hq, pr.hk, pr.lk_max(), c.kv_bytes() * 1e-9,
                lp.grid, st[0].median, ns, st[1].median, st[2].median,
                st[1].median / st[0].median, st[2].median / st[0].median,
                diff[0] <= 1e-2 && diff[1] <= 1e-2 ? "" : "  MISMATCH");
    std::fflush(stdout);
  }
  std::fclose(f);
  std::printf("time: %zu configurations, %d with lean or fd differing from fd1 by > 1e-2 (worst "
              "%.3g)\n",
              cfgs.size(), bad, worst);
  return bad ? 1 : 0;
}

// plan: the lean plans of the recorded cases (no GPU needed).
int run_plan(int sms) {
  for (const Case& c : record_cases()) {
    const LeanPlan lp = lean_plan(c.pr, c.sms ? c.sms : sms);
    std::printf("%-24s tiles %3lld grid %3d mtpt %lld high %lld nnb %d splits %d (ort %d) fd %d\n",
                c.name.c_str(), lp.total, lp.grid, lp.mtpt, lp.high, lp.nnb, lp.max_splits,
                lp.num_splits_ort, fd_default_splits(c.pr, c.sms ? c.sms : sms));
    for (int i = 0; i < lp.nseg(); ++i) {
      const int* s = &lp.segs[std::size_t(i) * kSegCols];
      std::printf("   cta %2d b %d h %d m %d n [%2d,%2d) host %d fin %d split %d of %d\n", s[0], s[1],
                  s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]);
    }
  }
  std::printf("time configurations: %zu\n", time_configs(20e9).size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "record" && (argc == 3 || argc == 4))
    return run_record(argv[2], argc == 4 ? argv[3] : "");
  if (mode == "time" && (argc == 3 || argc == 4))
    return run_time(argv[2], argc == 4 ? std::atoi(argv[3]) : 0);
  if (mode == "plan") return run_plan(argc > 2 ? std::atoi(argv[2]) : 132);
  std::fprintf(stderr, "usage: %s record DIR [CASE] | time FILE.csv [MAX_CONFIGS] | plan [SMS]\n",
               argv[0]);
  return 2;
}
