// Probe: records what the H100's matrix instructions compute (mma.sync HMMA/IMMA paths, the
// emulated FP8 and INT4 mma.sync, FP8 wgmma/QGMMA, f16/bf16 wgmma/HGMMA and INT8 wgmma/IGMMA) on
// designed, random and special-operand inputs (NaN payloads, Inf, overflow, signed zeros,
// subnormals, int32 limits), so that the CPU models in numerics/mma.* can be checked bit for bit
// in CI.
//
// Usage: mma_probe OUTDIR
// For every instruction kind and chain length, writes OUTDIR/<prefix>.{a,b,c,d,tag}.bin: P problems
// back to back, A as M x K row-major encodings, Bt as N x K row-major encodings, C and D as M x N
// row-major (f32 bits, f16 bits or s32). OUTDIR/mma_manifest.txt lists the files and shapes, and
// which packed file each belongs to: `main` (the groups of data/hw/h100/mma_h100.h5, generated
// exactly as when that file was recorded), `special` (special operands and HGMMA,
// data/hw/h100/mma_h100_special.h5), `igmma` (INT8 wgmma, data/hw/h100/mma_h100_igmma.h5) or
// `f16acc` (FP8 wgmma with f16 accumulation and the two-level "promoted" chains,
// data/hw/h100/mma_h100_f16acc.h5); a last manifest field gives the promotion interval (0: none).
// Inputs are generated here from fixed seeds; the recording, not the generator, is the reference.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_check/probe_util.cuh"
#include "formats/float16.hpp"
#include "formats/float8.hpp"

namespace {

enum Kind : int {
  kHmmaF16F32,   // mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
  kHmmaBf16F32,  // mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
  kHmmaF16F16,   // mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16
  kMmaE4m3F32,   // mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (emulated on sm_90)
  kMmaE5m2F32,   // mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 (emulated on sm_90)
  kImmaS8,       // mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (wraps)
  kImmaS8Sat,    // mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32
  kImmaS4,       // mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 (emulated on sm_90)
  kWgmmaE4m3,    // wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3
  kWgmmaE5m2,    // wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2
  kWgmmaF16,     // wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 (HGMMA)
  kWgmmaBf16,    // wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 (HGMMA)
  // INT8 wgmma (IGMMA), appended so that the seeds of the kinds above stay as recorded.
  kWgmmaS8,     // wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8
  kWgmmaS8Sat,  // wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite
  kWgmmaU8,     // wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8
  kWgmmaS8U8,   // wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 (A signed, B unsigned)
  kWgmmaU8S8,   // wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8
  // FP8 wgmma with FP16 accumulation (f16x2 accumulator registers), appended likewise.
  kWgmmaE4m3F16,  // wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3
  kWgmmaE5m2F16,  // wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e5m2
  kKindCount
};

struct KindInfo {
  const char* name;  // attnsim mma --instr name
  int m, n, k;       // instruction shape
  int in_bits;       // bits per A/B element
  int acc;           // 0 f32, 1 f16, 2 s32
};

const KindInfo kKinds[kKindCount] = {
    {"sm90.hmma.f16.f32", 16, 8, 16, 16, 0},
    {"sm90.hmma.bf16.f32", 16, 8, 16, 16, 0},
    {"sm90.hmma.f16.f16", 16, 8, 16, 16, 1},
    {"sm90.mma_sync.e4m3.f32", 16, 8, 32, 8, 0},
    {"sm90.mma_sync.e5m2.f32", 16, 8, 32, 8, 0},
    {"sm90.imma.s8.s32", 16, 8, 32, 8, 2},
    {"sm90.imma.s8.s32.satfinite", 16, 8, 32, 8, 2},
    {"sm90.imma.s4.s32", 16, 8, 64, 4, 2},
    {"sm90.wgmma.e4m3.f32", 64, 8, 32, 8, 0},
    {"sm90.wgmma.e5m2.f32", 64, 8, 32, 8, 0},
    {"sm90.wgmma.f16.f32", 64, 8, 16, 16, 0},
    {"sm90.wgmma.bf16.f32", 64, 8, 16, 16, 0},
    {"sm90.wgmma.s8.s32", 64, 8, 32, 8, 2},
    {"sm90.wgmma.s8.s32.satfinite", 64, 8, 32, 8, 2},
    {"sm90.wgmma.u8.s32", 64, 8, 32, 8, 2},
    {"sm90.wgmma.s8.u8.s32", 64, 8, 32, 8, 2},
    {"sm90.wgmma.u8.s8.s32", 64, 8, 32, 8, 2},
    {"sm90.wgmma.e4m3.f16", 64, 8, 32, 8, 1},
    {"sm90.wgmma.e5m2.f16", 64, 8, 32, 8, 1},
};

__host__ __device__ constexpr bool is_igmma(int kind) {
  return kind >= kWgmmaS8 && kind <= kWgmmaU8S8;
}
__host__ __device__ constexpr bool is_qgmma_f16(int kind) {
  return kind == kWgmmaE4m3F16 || kind == kWgmmaE5m2F16;
}
bool is_wgmma(int kind) {
  return kind == kWgmmaE4m3 || kind == kWgmmaE5m2 || kind == kWgmmaF16 || kind == kWgmmaBf16 ||
         is_igmma(kind) || is_qgmma_f16(kind);
}
// Unsigned 8-bit operands (u8) of the INT8 wgmma kinds; every other integer operand is signed.
bool a_unsigned(int kind) { return kind == kWgmmaU8 || kind == kWgmmaU8S8; }
bool b_unsigned(int kind) { return kind == kWgmmaU8 || kind == kWgmmaS8U8; }
bool is_bf16(int kind) { return kind == kHmmaBf16F32 || kind == kWgmmaBf16; }
bool is_e4m3(int kind) {
  return kind == kMmaE4m3F32 || kind == kWgmmaE4m3 || kind == kWgmmaE4m3F16;
}

// ---- fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16/k32/k64") ----
// g = lane / 4 (groupID), t = lane % 4 (threadID_in_group).
__device__ __forceinline__ void a_f16_k16(int i, int g, int t, int* r, int* c) {
  *r = g + 8 * ((i >> 1) & 1);
  *c = 2 * t + (i & 1) + 8 * (i >> 2);
}
__device__ __forceinline__ void b_f16_k16(int i, int g, int t, int* k, int* n) {
  *k = 2 * t + (i & 1) + 8 * (i >> 1);
  *n = g;
}
__device__ __forceinline__ void a_8b_k32(int i, int g, int t, int* r, int* c) {
  *r = g + 8 * ((i >> 2) & 1);
  *c = 4 * t + (i & 3) + 16 * (i >> 3);
}
__device__ __forceinline__ void b_8b_k32(int i, int g, int t, int* k, int* n) {
  *k = 4 * t + (i & 3) + 16 * (i >> 2);
  *n = g;
}
__device__ __forceinline__ void a_4b_k64(int i, int g, int t, int* r, int* c) {
  *r = g + 8 * ((i >> 3) & 1);
  *c = 8 * t + (i & 7) + 32 * (i >> 4);
}
__device__ __forceinline__ void b_4b_k64(int i, int g, int t, int* k, int* n) {
  *k = 8 * t + (i & 7) + 32 * (i >> 3);
  *n = g;
}
__device__ __forceinline__ void c_k(int i, int g, int t, int* r, int* c) {
  *r = g + 8 * (i >> 1);
  *c = 2 * t + (i & 1);
}

// Element (row, col) of a row-major matrix of `bits`-bit elements, `ld` elements per row.
__device__ __forceinline__ std::uint32_t elem(const std::uint8_t* base, int bits, int ld, int r,
                                              int c) {
  const std::size_t idx = std::size_t(r) * ld + c;
  if (bits == 16) return reinterpret_cast<const std::uint16_t*>(base)[idx];
  if (bits == 8) return base[idx];
  return (base[idx / 2] >> (4 * (idx & 1))) & 0xF;  // 4-bit: element 0 in the low nibble
}

// One warp runs one problem: D = chain of mma over K / k steps, D of a step the C of the next.
__global__ void mma_sync_kernel(int kind, KindInfo info, int K, const std::uint8_t* A,
                                const std::uint8_t* Bt, const std::uint32_t* C, std::uint32_t* D) {
  const int p = blockIdx.x;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const std::size_t a_bytes = std::size_t(16) * K * info.in_bits / 8,
                    b_bytes = std::size_t(8) * K * info.in_bits / 8;
  const std::uint8_t* a = A + p * a_bytes;
  const std::uint8_t* b = Bt + p * b_bytes;
  const std::uint32_t* c = C + p * 128;
  std::uint32_t* d = D + p * 128;
  std::uint32_t acc[4];
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    acc[i] = c[r * 8 + cc];
  }
  for (int k0 = 0; k0 < K; k0 += info.k) {
    std::uint32_t ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
    const int per_reg = 32 / info.in_bits;
    for (int i = 0; i < 4 * per_reg; ++i) {
      int r, cc;
      if (info.in_bits == 16)
        a_f16_k16(i, g, t, &r, &cc);
      else if (info.in_bits == 8)
        a_8b_k32(i, g, t, &r, &cc);
      else
        a_4b_k64(i, g, t, &r, &cc);
      ar[i / per_reg] |= elem(a, info.in_bits, K, r, k0 + cc) << (info.in_bits * (i % per_reg));
    }
    for (int i = 0; i < 2 * per_reg; ++i) {
      int kk, n;
      if (info.in_bits == 16)
        b_f16_k16(i, g, t, &kk, &n);
      else if (info.in_bits == 8)
        b_8b_k32(i, g, t, &kk, &n);
      else
        b_4b_k64(i, g, t, &kk, &n);
      br[i / per_reg] |= elem(b, info.in_bits, K, n, k0 + kk) << (info.in_bits * (i % per_reg));
    }
    switch (kind) {
      case kHmmaF16F32:
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kHmmaBf16F32:
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kHmmaF16F16: {
        std::uint32_t c01 = (acc[0] & 0xFFFF) | (acc[1] << 16),
                      c23 = (acc[2] & 0xFFFF) | (acc[3] << 16);
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
            "{%0,%1};"
            : "+r"(c01), "+r"(c23)
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        acc[0] = c01 & 0xFFFF;
        acc[1] = c01 >> 16;
        acc[2] = c23 & 0xFFFF;
        acc[3] = c23 >> 16;
        break;
      }
      case kMmaE4m3F32:
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kMmaE5m2F32:
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS8:
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS8Sat:
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS4:
        asm volatile(
            "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
    }
  }
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    d[r * 8 + cc] = acc[i];
  }
}

// wgmma shared-memory matrix descriptor, no swizzle (PTX ISA "Matrix Descriptor Format"):
// bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension
// byte offset >> 4, 62-63 swizzle mode (0 = none).
__device__ __forceinline__ std::uint64_t smem_desc(const void* p, std::uint32_t lbo,
                                                   std::uint32_t sbo) {
  const std::uint32_t addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  return std::uint64_t((addr >> 4) & 0x3FFF) | (std::uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (std::uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

// One warpgroup (128 threads) runs one m64n8k32 FP8 or INT8 or m64n8k16 f16/bf16 problem chain
// (32 bytes of K per instruction in every case; the INT8 kinds reuse the FP8 staging and
// descriptors unchanged). Operands are staged in shared memory as 8x16-byte core
// matrices, K-major: core matrix (row block rb, k block kb) at byte (rb * 2 + kb) * 128, rows of 16
// K-bytes inside. `variant` swaps the two byte offsets, so that the probe can confirm which
// reading of the descriptor fields is right (validation problems decide). `row_bytes`: bytes of K
// per row of A and Bt (K * bits / 8). The f16-accumulating FP8 kinds hold D in two f16x2
// registers (elements 0,1 and 2,3 of the f32 fragment, low half first, as mma.sync .f16).
// `promote` > 0 (bytes of K, a multiple of 32): two-level accumulation as SageAttention2's sm90
// kernel and DeepGEMM do it: the wgmma chain restarts from a zero accumulator every `promote`
// bytes of K, and each chunk's D (f16 widened exactly) is added to FP32 registers holding C with an
// ordinary FP32 add; D is then those FP32 registers.
__global__ void wgmma_kernel(int kind, int row_bytes, int variant, int promote,
                             const std::uint8_t* A, const std::uint8_t* Bt, const std::uint32_t* C,
                             std::uint32_t* D) {
  __shared__ alignas(128) std::uint8_t sa[64 * 32];
  __shared__ alignas(128) std::uint8_t sb[8 * 32];
  const int p = blockIdx.x;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int K = row_bytes;  // byte-wise staging below
  const std::uint8_t* a = A + std::size_t(p) * 64 * K;
  const std::uint8_t* b = Bt + std::size_t(p) * 8 * K;
  const std::uint32_t* c = C + std::size_t(p) * 512;
  std::uint32_t* d = D + std::size_t(p) * 512;
  float acc[4];
  std::uint32_t iacc[4];  // s32 accumulators of the INT8 kinds (same fragment layout)
  float total[4];         // promote > 0: the FP32 registers the chunks are added to
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    iacc[i] = c[(16 * warp + r) * 8 + cc];
    acc[i] = __uint_as_float(iacc[i]);
    total[i] = acc[i];
  }
  std::uint32_t hacc[2] = {(iacc[0] & 0xFFFFu) | (iacc[1] << 16),
                           (iacc[2] & 0xFFFFu) | (iacc[3] << 16)};
  const std::uint32_t lbo = variant == 0 ? 128 : 256, sbo = variant == 0 ? 256 : 128;
  for (int k0 = 0; k0 < K; k0 += 32) {
    if (promote > 0 && k0 % promote == 0) {
      for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
      hacc[0] = hacc[1] = 0u;
    }
    for (int idx = tid; idx < 64 * 32; idx += 128) {
      const int r = idx / 32, kk = idx % 32;
      sa[((r / 8) * 2 + kk / 16) * 128 + (r % 8) * 16 + kk % 16] = a[r * K + k0 + kk];
    }
    for (int idx = tid; idx < 8 * 32; idx += 128) {
      const int r = idx / 32, kk = idx % 32;
      sb[((r / 8) * 2 + kk / 16) * 128 + (r % 8) * 16 + kk % 16] = b[r * K + k0 + kk];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const std::uint64_t da = smem_desc(sa, lbo, sbo), db = smem_desc(sb, lbo, sbo);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if (kind == kWgmmaE4m3) {
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "l"(da), "l"(db));
    } else if (kind == kWgmmaF16) {
      // scale-d 1 (accumulate), scale-a/b 1, trans-a/b 0: both operands K-major, as staged.
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, 1, 1, 1, 0, 0;"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "l"(da), "l"(db));
    } else if (kind == kWgmmaBf16) {
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, 1, 1, 1, 0, 0;"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "l"(da), "l"(db));
    } else if (kind == kWgmmaS8) {
      // Integer wgmma takes scale-d only (no operand negation or transpose): both K-major.
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0,%1,%2,%3}, %4, %5, 1;"
                   : "+r"(iacc[0]), "+r"(iacc[1]), "+r"(iacc[2]), "+r"(iacc[3])
                   : "l"(da), "l"(db));
    } else if (kind == kWgmmaS8Sat) {
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8.satfinite {%0,%1,%2,%3}, %4, %5, 1;"
          : "+r"(iacc[0]), "+r"(iacc[1]), "+r"(iacc[2]), "+r"(iacc[3])
          : "l"(da), "l"(db));
    } else if (kind == kWgmmaU8) {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.u8 {%0,%1,%2,%3}, %4, %5, 1;"
                   : "+r"(iacc[0]), "+r"(iacc[1]), "+r"(iacc[2]), "+r"(iacc[3])
                   : "l"(da), "l"(db));
    } else if (kind == kWgmmaS8U8) {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {%0,%1,%2,%3}, %4, %5, 1;"
                   : "+r"(iacc[0]), "+r"(iacc[1]), "+r"(iacc[2]), "+r"(iacc[3])
                   : "l"(da), "l"(db));
    } else if (kind == kWgmmaU8S8) {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {%0,%1,%2,%3}, %4, %5, 1;"
                   : "+r"(iacc[0]), "+r"(iacc[1]), "+r"(iacc[2]), "+r"(iacc[3])
                   : "l"(da), "l"(db));
    } else if (kind == kWgmmaE4m3F16) {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {%0,%1}, %2, %3, 1, 1, 1;"
                   : "+r"(hacc[0]), "+r"(hacc[1])
                   : "l"(da), "l"(db));
    } else if (kind == kWgmmaE5m2F16) {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e5m2 {%0,%1}, %2, %3, 1, 1, 1;"
                   : "+r"(hacc[0]), "+r"(hacc[1])
                   : "l"(da), "l"(db));
    } else {
      asm volatile(
          "wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    __syncthreads();
    if (promote > 0 && (k0 + 32) % promote == 0) {
      for (int i = 0; i < 4; ++i) {
        float part = acc[i];
        if (is_qgmma_f16(kind)) {
          const std::uint32_t h = (hacc[i >> 1] >> (16 * (i & 1))) & 0xFFFFu;
          part = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));  // exact widening
        }
        total[i] = __fadd_rn(total[i], part);  // FADD.RN, never contracted
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    std::uint32_t out = is_igmma(kind) ? iacc[i] : __float_as_uint(acc[i]);
    if (is_qgmma_f16(kind)) out = (hacc[i >> 1] >> (16 * (i & 1))) & 0xFFFFu;
    if (promote > 0) out = __float_as_uint(total[i]);
    d[(16 * warp + r) * 8 + cc] = out;
  }
}

// ---------------- host: inputs ----------------

struct Problems {
  int kind, K, count;
  int promote = 0;  // > 0: two-level accumulation every `promote` elements; C and D are then f32
  std::vector<std::uint8_t> a, b;
  std::vector<std::uint32_t> c, d;
  std::vector<std::int32_t> tag;  // which generator made each problem (see kTagNames)
};

const char* const kTagNames[] = {
    "small_integers", "designed",    "normal",       "mixed_scales",    "softmax_p",   "outliers",
    "cancellation",   "extremes",    "special_mix",  "subnormal",       "signed_zero", "overflow",
    "inf_cancel",     "nan_payload", "int_extremes", "special_designed"};

std::uint32_t enc_in(int kind, float x) {
  using namespace attnsim;
  constexpr Policy kRn{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  switch (kind) {
    case kHmmaF16F32:
    case kWgmmaF16:
    case kHmmaF16F16:
      return encode<fp16>(x, kRn);
    case kWgmmaBf16:
    case kHmmaBf16F32:
      return encode<bf16>(x, kRn);
    case kMmaE4m3F32:
    case kWgmmaE4m3F16:
    case kWgmmaE4m3:
      return encode<e4m3fn>(x, kRn);
    default:
      return encode<e5m2>(x, kRn);
  }
}

void put(Problems& P, std::vector<std::uint8_t>& buf, std::size_t idx, std::uint32_t v) {
  const int bits = kKinds[P.kind].in_bits;
  if (bits == 16) {
    buf[2 * idx] = std::uint8_t(v);
    buf[2 * idx + 1] = std::uint8_t(v >> 8);
  } else if (bits == 8) {
    buf[idx] = std::uint8_t(v);
  } else {
    buf[idx / 2] =
        std::uint8_t((buf[idx / 2] & ~(0xF << (4 * (idx & 1)))) | ((v & 0xF) << (4 * (idx & 1))));
  }
}

void add_problem(Problems& P, int tag, const std::vector<float>& af, const std::vector<float>& bf,
                 const std::vector<float>& cf, std::mt19937& rng) {
  const KindInfo& info = kKinds[P.kind];
  const int M = info.m, N = info.n, K = P.K;
  const std::size_t a0 = P.a.size(), b0 = P.b.size();
  P.a.resize(a0 + std::size_t(M) * K * info.in_bits / 8, 0);
  P.b.resize(b0 + std::size_t(N) * K * info.in_bits / 8, 0);
  std::vector<std::uint8_t> as(std::size_t(M) * K * info.in_bits / 8, 0),
      bs(std::size_t(N) * K * info.in_bits / 8, 0);
  const bool integer = info.acc == 2;
  for (int i = 0; i < M * K; ++i)
    put(P, as, i, integer ? std::uint32_t(int(af[i])) : enc_in(P.kind, af[i]));
  for (int i = 0; i < N * K; ++i)
    put(P, bs, i, integer ? std::uint32_t(int(bf[i])) : enc_in(P.kind, bf[i]));
  std::memcpy(P.a.data() + a0, as.data(), as.size());
  std::memcpy(P.b.data() + b0, bs.data(), bs.size());
  for (int i = 0; i < M * N; ++i) {
    std::uint32_t cv;
    if (integer)
      cv = std::uint32_t(std::int32_t(cf[i]));
    else if (info.acc == 1)
      cv = attnsim::encode<attnsim::fp16>(
          cf[i],
          {attnsim::Round::kNearestEven, attnsim::Overflow::kInf, attnsim::NanEncoding::kCuda});
    else
      std::memcpy(&cv, &cf[i], 4);
    P.c.push_back(cv);
  }
  P.tag.push_back(tag);
  P.count++;
  (void)rng;
}

// Designed single-vector cases (tensor-core-numerics.md section 7): the vector sits in row 0 of A
// and row 0 of Bt (column 0 of B), C[0][0] = c, everything else zero.
struct Designed {
  std::vector<std::pair<int, std::pair<float, float>>> terms;  // k, (a, b)
  float c;
};
std::vector<Designed> designed_f16acc(int kind);

// Designed cases of the f16-accumulating FP8 wgmma (QGMMA .F16): every value below is exact in
// e4m3 and e5m2 (powers of two from 2^-9 up, small significands) and C is exact in fp16.
// A product 2^s is written as 2^(s/2) * 2^(s - s/2) so that both factors stay representable.
std::vector<Designed> designed_f16acc(int kind) {
  auto p2 = [](int s) { return std::ldexp(1.0f, s); };
  auto prod = [&](int k, int s, float sign) -> std::pair<int, std::pair<float, float>> {
    const int h = s >= 0 ? s / 2 : -((-s) / 2);
    return {k, {sign * p2(h), p2(s - h)}};
  };
  const bool e5 = !is_e4m3(kind);
  std::vector<Designed> v;
  // Single products, C = 0: exact in fp16, or overflow (448 * 448, 256 * 256 > 65504).
  const float vals[] = {1.0f, 1.125f, 1.75f, 3.5f, 0.375f, 24.0f, 448.0f, 256.0f};
  for (float x : vals) {
    for (float y : vals) v.push_back({{{3, {x, y}}}, 0.0f});
  }
  // C only (no products): passes through unchanged?
  for (float c : {1.0f, -1.0f, 65504.0f, -65504.0f, 1.0f + p2(-10), p2(-14), p2(-24), -p2(-24),
                  3.0f * p2(-24), 1023.0f * p2(-24), 0.333251953125f}) {
    v.push_back({{}, c});
  }
  // The alignment window next to C = +-1 and C = 1 + 2^-10: one, two or three products +-2^-s.
  for (float c : {1.0f, -1.0f, 1.0f + p2(-10)}) {
    for (int s = 10; s <= 18; ++s) {
      for (int n = 1; n <= 3; ++n) {
        for (float sign : {1.0f, -1.0f}) {
          Designed d{{}, c};
          for (int i = 0; i < n; ++i) d.terms.push_back(prod(5 + 9 * i, -s, sign));
          v.push_back(d);
        }
      }
    }
  }
  // The window next to the largest product (C = 0): 1 + n * 2^-s, the 1 a product.
  for (int s = 10; s <= 16; ++s) {
    for (int n = 1; n <= 3; ++n) {
      Designed d{{{0, {1.0f, 1.0f}}}, 0.0f};
      for (int i = 0; i < n; ++i) d.terms.push_back(prod(7 + 8 * i, -s, 1.0f));
      v.push_back(d);
    }
  }
  // Rounding ties at fp16's ulp (2^-10 at 1, 2 at 2048): tie to even up or down, with and without
  // a sticky 2^-20 below the tie; in C, in a product, in a sum of products.
  for (float c : {1.0f, 1.0f + p2(-10), 2048.0f, 2050.0f, -1.0f - p2(-10)}) {
    const int ulp = c >= 2048.0f ? 1 : -10;
    v.push_back({{prod(2, ulp - 1, 1.0f)}, c});
    v.push_back({{prod(2, ulp - 1, -1.0f)}, c});
    v.push_back({{prod(2, ulp - 1, 1.0f), prod(20, ulp - 10, 1.0f)}, c});
    v.push_back({{prod(2, ulp - 1, 1.0f), prod(20, ulp - 10, -1.0f)}, c});
    v.push_back({{prod(2, ulp - 2, 1.0f), prod(30, ulp - 2, 1.0f)}, c});
  }
  // Overflow at 65504: 65504 + 16 (RNE tie: Inf), + 8, + 31, - 16; 32 products of 2048.
  for (float add : {16.0f, 8.0f, 32.0f, 15.0f}) {
    v.push_back({{{4, {add / 4.0f, 4.0f}}}, 65504.0f});
    v.push_back({{{4, {-add / 4.0f, 4.0f}}}, -65504.0f});
  }
  {
    Designed d{{}, 0.0f};
    for (int k = 0; k < 32; ++k) d.terms.push_back({k, {64.0f, 32.0f}});  // 32 * 2048 = 65536
    v.push_back(d);
    d.terms.pop_back();  // 31 * 2048 = 63488
    v.push_back(d);
  }
  v.push_back({{{0, {448.0f, 128.0f}}, {1, {-448.0f, 128.0f}}, {2, {1.0f, 1.0f}}},
               0.0f});  // 57344 - 57344 + 1
  // Subnormal results (fp16 grid 2^-24): 2^-25 (a tie) plus 2^-s below it, both signs; the floor
  // of the alignment decides which 2^-s survive.
  const int smax = e5 ? 32 : 18;
  for (int s = 25; s <= smax; ++s) {
    v.push_back({{prod(0, -25, 1.0f), prod(9, -s, 1.0f)}, 0.0f});
    v.push_back({{prod(0, -25, -1.0f), prod(9, -s, -1.0f)}, 0.0f});
    v.push_back({{prod(0, -24, 1.0f), prod(9, -25, 1.0f), prod(17, -s, 1.0f)}, 0.0f});
    v.push_back({{prod(0, -s, 1.0f)}, p2(-24)});
    v.push_back({{prod(0, -s, -1.0f)}, p2(-24)});
  }
  for (int s = 14; s <= smax; ++s) v.push_back({{prod(0, -s, 1.0f)}, 0.0f});  // lone tiny products
  // Cancellation: 1 - 1 + small, small in the same block; 448 - 448 + 2^-9.
  v.push_back({{{0, {448, 448}}, {1, {448, -448}}, {2, {1, std::ldexp(1.0f, -9)}}}, 0.0f});
  v.push_back(
      {{{0, {1, 1}}, {31, {1, -1}}, {16, {std::ldexp(1.0f, -9), std::ldexp(1.0f, -9)}}}, 0.0f});
  v.push_back({{{0, {1, 1}}, {31, {1, -1}}}, p2(-20)});
  return v;
}

std::vector<Designed> designed_cases(int kind) {
  const float t24 = std::ldexp(1.0f, -24), t13 = std::ldexp(1.0f, -13), t12 = std::ldexp(1.0f, -12);
  std::vector<Designed> v;
  if (kKinds[kind].in_bits == 16) {
    v.push_back({{{0, {1, 1}}}, -(1.0f - t24)});  // F1
    v.push_back(
        {{{0, {0.5f, t24}}, {1, {0.5f, t24}}, {2, {0.5f, t24}}, {3, {0.5f, t24}}}, 1.0f});  // F2
    v.push_back({{{0, {1, 1}}, {1, {1.5f * t12, t12}}}, 0.0f});                             // F3
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {8, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}},
                 0.0f});  // F4
    v.push_back({{{0, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}, {8, {1, 1}}, {9, {1, -1}}},
                 0.0f});                                         // F5
    v.push_back({{{0, {1, 1}}, {1, {t13, -t13}}}, 0.0f});        // F6
    v.push_back({{{0, {1.5f, 1.5f}}, {1, {t13, -t12}}}, 0.0f});  // F7
    v.push_back({{{0, {t12, t13}}, {1, {t24, t24}}}, 0.0f});     // F8
    v.push_back({{}, -0.0f});                                    // Z1
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}}, -0.0f});           // Z1b
    v.push_back({{{0, {1, 1}}, {1, {1, 1}}, {2, {1, 1}}, {3, {1, 1}}},
                 1.0f + std::ldexp(1.0f, -22) + std::ldexp(1.0f, -23)});  // F12
    if (is_wgmma(kind)) {
      // HGMMA only (the HMMA groups must stay as recorded): which k positions share a block. A +1
      // and a -1 product at (j1, j2) cancel; a 2^-30 product at k survives only outside their
      // block (inside, the 25-bit window aligned at 2^0 truncates it).
      const float e15 = std::ldexp(1.0f, -15);
      const int pairs[][2] = {{0, 1}, {8, 9}, {0, 15}, {0, 8}, {4, 12}};
      for (const auto& pr : pairs) {
        for (int k = 0; k < 16; ++k) {
          if (k == pr[0] || k == pr[1]) continue;
          v.push_back({{{pr[0], {1, 1}}, {pr[1], {1, -1}}, {k, {e15, e15}}}, 0.0f});
        }
      }
      // Window next to C (F2-like): C = +-1 and two products 2^-sh, sh = 23..27: with neab 2 the
      // 2^-25 terms survive (C = -1 gives -(1 - 2^-24)), 2^-26 ones do not.
      for (int sh = 23; sh <= 27; ++sh) {
        v.push_back(
            {{{0, {0.5f, std::ldexp(1.0f, -sh + 1)}}, {5, {0.5f, std::ldexp(1.0f, -sh + 1)}}},
             1.0f});
        v.push_back(
            {{{0, {0.5f, std::ldexp(1.0f, -sh + 1)}}, {5, {0.5f, std::ldexp(1.0f, -sh + 1)}}},
             -1.0f});
      }
      if (is_bf16(kind)) {
        v.push_back({{{0, {std::ldexp(1.0f, -76), std::ldexp(1.0f, -77)}},
                      {1, {std::ldexp(1.0f, -76), std::ldexp(1.0f, -77)}},
                      {2, {std::ldexp(1.0f, -76), std::ldexp(1.0f, -77)}},
                      {3, {std::ldexp(1.0f, -76), std::ldexp(1.0f, -77)}}},
                     0.0f});  // F9 (4 terms)
        v.push_back({{{0, {std::ldexp(1.0f, 100), std::ldexp(1.0f, 100)}},
                      {1, {std::ldexp(1.0f, 100), -std::ldexp(1.0f, 100)}},
                      {2, {1, 1}}},
                     0.0f});  // F10
        v.push_back({{{0, {std::ldexp(1.0f, 127), 1.5f}}, {1, {std::ldexp(1.0f, 127), 1.5f}}},
                     0.0f});  // F11
      }
    }
  } else {
    const float e8 = std::ldexp(1.0f, -8), e7 = std::ldexp(1.0f, -7);
    v.push_back({{}, 1.0f + std::ldexp(1.0f, -23)});                                           // Q1
    v.push_back({{}, 1.0f + t13});                                                             // Q2
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {16, {e8, e8}}}, 0.0f});                          // Q3
    v.push_back({{{0, {1, 1}}, {2, {e7, e7}}, {3, {e7, e7}}}, 0.0f});                          // Q4
    v.push_back({{}, std::ldexp(1.0f, -149)});                                                 // Q5
    v.push_back({{{0, {448, 448}}, {1, {448, -448}}, {2, {1, std::ldexp(1.0f, -9)}}}, 0.0f});  // Q6
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {16, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}},
                 0.0f});  // Q7
    v.push_back({{{0, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}, {16, {1, 1}}, {17, {1, -1}}},
                 0.0f});  // Q8
    // Which k positions share a block: a +1 and a -1 product at (0, j) and a tiny product at k.
    for (int j = 1; j < 32; j += 3) {
      for (int k = 0; k < 32; k += 5) {
        if (k == 0 || k == j) continue;
        v.push_back(
            {{{0, {1, 1}}, {j, {1, -1}}, {k, {std::ldexp(1.0f, -7), std::ldexp(1.0f, -7)}}}, 0.0f});
      }
    }
    if (is_qgmma_f16(kind)) {
      const std::vector<Designed> f16 = designed_f16acc(kind);
      v.insert(v.end(), f16.begin(), f16.end());
    }
  }
  return v;
}

void add_int_designed(Problems& P);

Problems make_problems(int kind, int K, int random_count, std::uint32_t seed) {
  Problems P{kind, K, 0, 0, {}, {}, {}, {}, {}};
  const KindInfo& info = kKinds[kind];
  const int M = info.m, N = info.n;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  auto zeros = [&](int n) { return std::vector<float>(std::size_t(n), 0.0f); };
  const bool integer = info.acc == 2;
  const int qmax = info.in_bits == 4 ? 7 : 127, qmin = info.in_bits == 4 ? -8 : -128;
  // Operand ranges (u8 operands of the INT8 wgmma kinds: 0..255; extremes 255 and 128). The
  // signed kinds draw exactly as when mma_h100.h5 was recorded.
  const bool ua = a_unsigned(kind), ub = b_unsigned(kind);
  const int qa_max = ua ? 255 : qmax, qa_min = ua ? 0 : qmin, qb_max = ub ? 255 : qmax,
            qb_min = ub ? 0 : qmin;
  const int xa_min = ua ? 128 : qmin, xb_min = ub ? 128 : qmin;
  // Small integers: exact in every model, so any difference is a fragment-layout bug (u8
  // operands: 0..6 instead of -3..3).
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<float> a = zeros(M * K), b = zeros(N * K), c = zeros(M * N);
    for (auto& x : a) x = float(int(ud(rng) * 7) - 3 + (ua ? 3 : 0));
    for (auto& x : b) x = float(int(ud(rng) * 7) - 3 + (ub ? 3 : 0));
    for (auto& x : c) x = float(int(ud(rng) * 201) - 100);
    add_problem(P, 0, a, b, c, rng);
  }
  if (is_igmma(kind)) add_int_designed(P);
  if (!integer && K == info.k) {
    for (const Designed& d : designed_cases(kind)) {
      std::vector<float> a = zeros(M * K), b = zeros(N * K), c = zeros(M * N);
      for (const auto& term : d.terms) {
        if (term.first >= K) continue;
        a[term.first] = term.second.first;
        b[term.first] = term.second.second;
      }
      c[0] = d.c;
      add_problem(P, 1, a, b, c, rng);
    }
  }
  for (int r = 0; r < random_count; ++r) {
    const int tag = 2 + r % 6;
    std::vector<float> a = zeros(M * K), b = zeros(N * K), c = zeros(M * N);
    if (integer) {
      for (auto& x : a) x = float(qa_min + int(ud(rng) * (qa_max - qa_min + 1)));
      for (auto& x : b) x = float(qb_min + int(ud(rng) * (qb_max - qb_min + 1)));
      for (auto& x : c) x = std::ldexp(nd(rng), int(ud(rng) * 30));
      if (tag == 7) {  // extremes: all-max products and C near the int32 limits (wrap vs saturate)
        for (auto& x : a) x = float(ud(rng) < 0.5f ? qa_max : xa_min);
        for (auto& x : b) x = float(ud(rng) < 0.5f ? qb_max : xb_min);
        for (auto& x : c) x = ud(rng) < 0.5f ? 2147483000.0f : -2147483000.0f;
      }
      add_problem(P, tag, a, b, c, rng);
      continue;
    }
    const float big = info.in_bits == 8 ? 448.0f : 65504.0f;
    for (int i = 0; i < M * K; ++i) {
      switch (tag) {
        case 2:
          a[i] = nd(rng);
          break;
        case 3:
          a[i] = std::ldexp(nd(rng), int(ud(rng) * 24) - 12);
          break;
        case 4:
          a[i] = info.in_bits == 8 ? ud(rng) * 448.0f : ud(rng);
          break;
        case 5:
          a[i] = nd(rng) * (ud(rng) < 0.02f ? 300.0f : 1.0f);
          break;
        case 6:
          a[i] = nd(rng);
          break;
        default:
          a[i] = (ud(rng) < 0.5f ? -1.0f : 1.0f) * big * ud(rng);
          break;
      }
    }
    for (int i = 0; i < N * K; ++i) {
      b[i] = tag == 3 ? std::ldexp(nd(rng), int(ud(rng) * 24) - 12) : nd(rng);
      if (tag == 7) b[i] = (ud(rng) < 0.5f ? -1.0f : 1.0f) * big * ud(rng);
    }
    if (tag == 6) {  // cancellation: second half of each k-step repeats the first with B negated
      for (int n = 0; n < N; ++n) {
        for (int k = 0; k < K; ++k) {
          if ((k % info.k) >= info.k / 2) {
            a[0 * K + k] = a[0 * K + k - info.k / 2];
            b[n * K + k] = -b[n * K + k - info.k / 2] * (1.0f + std::ldexp(nd(rng), -10));
          }
        }
      }
    }
    for (auto& x : c) x = ud(rng) < 0.2f ? 0.0f : std::ldexp(nd(rng), int(ud(rng) * 20) - 10);
    if (info.acc == 1)
      for (auto& x : c) x = std::fmax(std::fmin(x, 60000.0f), -60000.0f);
    add_problem(P, tag, a, b, c, rng);
  }
  P.d.assign(std::size_t(P.count) * M * N, 0xFFFFFFFFu);  // poisoned
  return P;
}

// ---------------- host: special operands ----------------
// Problems built from raw encodings (NaN payloads cannot travel through float): NaN of several
// payloads and both signs, +-Inf, products and sums that overflow, Inf - Inf within a block, across
// blocks and across the k-steps of a chain, signed zeros, subnormal operands and subnormal C.

// Bit layout of an input format: exponent and fraction bits.
struct InFmt {
  int ebits, mbits;
  bool has_inf;  // e4m3fn has no Inf; its only NaN is S.1111.111
};

InFmt in_fmt(int kind) {
  if (kKinds[kind].in_bits == 16) return is_bf16(kind) ? InFmt{8, 7, true} : InFmt{5, 10, true};
  return is_e4m3(kind) ? InFmt{4, 3, false} : InFmt{5, 2, true};
}

struct SpecialGen {
  InFmt f;
  std::mt19937& rng;
  std::uint32_t u(std::uint32_t n) { return std::uint32_t(rng() % n); }
  double uni() { return double(rng()) / 4294967296.0; }
  std::uint32_t bits(std::uint32_t sign, std::uint32_t e, std::uint32_t m) const {
    return (sign << (f.ebits + f.mbits)) | (e << f.mbits) | m;
  }
  std::uint32_t emax_field() const { return f.has_inf ? (1u << f.ebits) - 2 : (1u << f.ebits) - 1; }
  std::uint32_t mmask() const { return (1u << f.mbits) - 1; }
  std::uint32_t bias() const { return (1u << (f.ebits - 1)) - 1; }
  std::uint32_t mant() { return u(1u << f.mbits); }
  std::uint32_t nan() {
    if (f.ebits == 4) return u(2) ? 0xFFu : 0x7Fu;
    const std::uint32_t e = (1u << f.ebits) - 1;
    const std::uint32_t quiet = 1u << (f.mbits - 1);
    const std::uint32_t payloads[] = {quiet, 1u, mmask(), quiet | 1u, quiet | (mmask() >> 2), 2u};
    return bits(u(4) == 0, e, payloads[u(6)]);  // mostly positive, some negative
  }
  std::uint32_t inf() {
    if (!f.has_inf) return bits(u(2), emax_field(), 6);  // e4m3: 448 instead
    return bits(u(2), (1u << f.ebits) - 1, 0);
  }
  std::uint32_t zero() { return bits(u(2), 0, 0); }
  std::uint32_t subnormal() { return bits(u(2), 0, 1 + u(mmask())); }
  std::uint32_t tiny() { return bits(u(2), u(3), mant()); }  // subnormal or smallest binades
  std::uint32_t maxf() { return bits(u(2), emax_field(), f.has_inf ? mmask() : 6); }  // e4m3fn: 448
  std::uint32_t big() {
    const std::uint32_t e = emax_field() - u(3);
    std::uint32_t m = mant();
    if (!f.has_inf && e == emax_field() && m == mmask()) m = 6;
    return bits(u(2), e, m);
  }
  std::uint32_t normal() { return bits(u(2), bias() - 4 + u(8), mant()); }  // 2^-4 .. 2^4
  std::uint32_t unit() {
    const std::uint32_t r = u(6);
    return bits(r & 1, bias() + (r >> 1) % 2, 0);  // +-1, +-2
  }
  std::uint32_t any_special() {
    switch (u(7)) {
      case 0:
        return nan();
      case 1:
        return inf();
      case 2:
        return zero();
      case 3:
        return subnormal();
      case 4:
        return maxf();
      case 5:
        return tiny();
      default:
        return big();
    }
  }
};

// Accumulator (C) values: fp32 bits, or fp16 bits for the f16-accumulating instruction.
struct AccGen {
  bool f16;
  std::mt19937& rng;
  std::uint32_t u(std::uint32_t n) { return std::uint32_t(rng() % n); }
  std::uint32_t sign() { return u(2) ? (f16 ? 0x8000u : 0x80000000u) : 0u; }
  std::uint32_t nan() {
    static const std::uint32_t n32[] = {0x7FC00000u, 0x7FC00001u, 0xFFC00000u, 0x7F800001u,
                                        0xFFFFFFFFu, 0x7FBFFFFFu, 0x7FFFFFFFu, 0x7FD5A5A5u};
    static const std::uint32_t n16[] = {0x7E00u, 0x7C01u, 0xFE00u, 0x7FFFu,
                                        0xFDFFu, 0x7E55u, 0x7D00u, 0xFFFFu};
    return f16 ? n16[u(8)] : n32[u(8)];
  }
  std::uint32_t inf() { return sign() | (f16 ? 0x7C00u : 0x7F800000u); }
  std::uint32_t zero() { return sign(); }
  std::uint32_t subnormal() { return sign() | (f16 ? 1 + u(0x3FF) : 1 + u(0x7FFFFF)); }
  std::uint32_t tiny() {
    return sign() | (f16 ? ((1 + u(3)) << 10) | u(1024) : ((1 + u(3)) << 23) | u(1u << 23));
  }
  std::uint32_t maxf() { return sign() | (f16 ? 0x7BFFu : 0x7F7FFFFFu); }
  std::uint32_t big() {
    return sign() | (f16 ? ((28 + u(3)) << 10) | u(1024) : ((251 + u(4)) << 23) | u(1u << 23));
  }
  std::uint32_t normal() {
    return sign() | (f16 ? ((11 + u(9)) << 10) | u(1024) : ((123 + u(9)) << 23) | u(1u << 23));
  }
  std::uint32_t unit() { return sign() | (f16 ? 0x3C00u : 0x3F800000u); }
  std::uint32_t any_special() {
    switch (u(6)) {
      case 0:
        return nan();
      case 1:
        return inf();
      case 2:
        return zero();
      case 3:
        return subnormal();
      case 4:
        return maxf();
      default:
        return big();
    }
  }
};

// Appends one problem given as encodings (A: M x K, Bt: N x K) and accumulator bits (M x N).
void add_raw(Problems& P, int tag, const std::vector<std::uint32_t>& a,
             const std::vector<std::uint32_t>& b, const std::vector<std::uint32_t>& c) {
  const KindInfo& info = kKinds[P.kind];
  const std::size_t a0 = P.a.size(), b0 = P.b.size();
  P.a.resize(a0 + std::size_t(info.m) * P.K * info.in_bits / 8, 0);
  P.b.resize(b0 + std::size_t(info.n) * P.K * info.in_bits / 8, 0);
  std::vector<std::uint8_t> as(P.a.size() - a0, 0), bs(P.b.size() - b0, 0);
  for (std::size_t i = 0; i < a.size(); ++i) put(P, as, i, a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) put(P, bs, i, b[i]);
  std::memcpy(P.a.data() + a0, as.data(), as.size());
  std::memcpy(P.b.data() + b0, bs.data(), bs.size());
  P.c.insert(P.c.end(), c.begin(), c.end());
  P.tag.push_back(tag);
  P.count++;
}

// Designed INT8 wgmma problems (tag "designed"): rows of A and Bt are byte patterns, C cycles
// through int32 edge values, so that one problem holds 512 designed dot products. Bytes are read
// as s8 or u8 by the instruction (0x80 is -128 or 128, 0xFF is -1 or 255). The patterns ask:
// does D wrap (or, .satfinite, clamp) the exact C + sum, or does it clamp partial sums on the way
// (sign patterns with period 1, 2, 4, 8 and 16 in k, positive or negative first, against C at
// INT32_MAX/MIN); in a chain, is each instruction clamped (rows whose sign alternates by k-step);
// and C values one product or one all-extreme row (2^19; u8: 32 * 255^2) away from the limits.
void add_int_designed(Problems& P) {
  const KindInfo& info = kKinds[P.kind];
  const int M = info.m, N = info.n, K = P.K;
  const std::int64_t kMax = 2147483647, kMin = -kMax - 1;
  const std::int64_t cs[16] = {kMax,
                               kMin,
                               kMax - 1,
                               kMin + 1,
                               0,
                               -1,
                               1,
                               kMax - (1 << 19) + 1,
                               kMax - (1 << 19),
                               kMin + (1 << 19),
                               kMin + (1 << 19) - 1,
                               kMax - 16128,
                               kMin + 16255,
                               1 << 30,
                               -(1 << 30),
                               kMax - 2080799};
  const std::uint8_t ext[] = {0x80, 0x7F, 0x81, 0xFF, 0x01, 0x00};
  std::mt19937 rng(4242u + 17u * P.kind + K);
  std::vector<std::uint32_t> a(std::size_t(M) * K), b(std::size_t(N) * K), c(std::size_t(M) * N);
  for (int m = 0; m < M; ++m) {
    for (int k = 0; k < K; ++k) {
      const int kk = k % 32, s = k / 32;
      std::uint32_t x;
      if (m < 5) {
        const std::uint32_t flat[] = {0x01, 0x7F, 0x80, 0xFF, 0x00};
        x = flat[m];
      } else if (m < 25) {  // sign patterns: period 2g in k, g = 1..16, +127/-127 or -128/+127
        const int j = (m - 5) % 10, g = 1 << (j / 2);
        const bool first = ((kk / g) % 2 == 0) != (j % 2 == 1);
        x = m < 15 ? (first ? 0x7F : 0x81) : (first ? 0x80 : 0x7F);
      } else if (m < 29) {  // sign alternating by k-step (instruction) of a chain
        const bool even = s % 2 == 0;
        x = m == 25   ? (even ? 0x7F : 0x81)
            : m == 26 ? (even ? 0x81 : 0x7F)
            : m == 27 ? (even ? 0x80 : 0x7F)
                      : (even ? 0x7F : 0x80);
      } else if (m < 37) {  // one -128 (128) at k = 1, 5, ..., 29
        x = kk == (m - 29) * 4 + 1 ? 0x80 : 0x00;
      } else if (m < 45) {  // one 127 at k = 31, 27, ..., 3
        x = kk == 31 - (m - 37) * 4 ? 0x7F : 0x00;
      } else {
        x = ext[rng() % 6];
      }
      a[std::size_t(m) * K + k] = x;
    }
  }
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      const int kk = k % 32, s = k / 32;
      std::uint32_t x;
      switch (n) {
        case 0:
          x = 0x01;
          break;
        case 1:
          x = 0x7F;
          break;
        case 2:
          x = 0x80;
          break;
        case 3:
          x = kk < 16 ? 0x01 : 0xFF;
          break;
        case 4:
          x = s % 2 == 0 ? 0x7F : 0x81;
          break;
        case 5:
          x = 0xFF;
          break;
        case 6:
          x = ext[rng() % 6];
          break;
        default:
          x = 0x00;
          break;  // D = C: the edge values themselves
      }
      b[std::size_t(n) * K + k] = x;
    }
  }
  const int problems = K == info.k ? 16 : 6;
  for (int p = 0; p < problems; ++p) {
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n)
        c[std::size_t(m) * N + n] = std::uint32_t(cs[(m + 5 * n + p) % 16]);
    }
    add_raw(P, 1, a, b, c);
  }
}

// Designed special cases (tag 15), one per problem in row 0 of A and Bt and C[0][0], the rest zero:
// the sign of zero results (C = -0 with -0 products, exact cancellation, results that underflow
// to zero), overflow of finite operands, Inf - Inf inside a block and across the two halves of
// the emulated FP8 mma.sync, Inf * 0, NaN operands and C, subnormal operands and C.
struct RawCase {
  std::vector<std::pair<int, std::pair<std::uint32_t, std::uint32_t>>>
      terms;  // k, (a bits, b bits)
  std::uint32_t c;
  bool all_k;  // repeat the term of k = 0 at every k
};

std::vector<RawCase> special_designed(int kind) {
  using attnsim::Overflow;
  const KindInfo& info = kKinds[kind];
  const InFmt f = in_fmt(kind);
  auto e = [&](double x) -> std::uint32_t {  // exact finite values only
    if (x == 0) return std::signbit(x) ? (1u << (f.ebits + f.mbits)) : 0u;
    return enc_in(kind, float(x));
  };
  const bool f16acc = info.acc == 1;
  auto cf = [&](double x) -> std::uint32_t {
    if (f16acc) {
      return attnsim::encode<attnsim::fp16>(
          float(x), {attnsim::Round::kNearestEven, Overflow::kInf, attnsim::NanEncoding::kCuda});
    }
    float v = float(x);
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  const std::uint32_t sgn = 1u << (f.ebits + f.mbits);
  const std::uint32_t c_neg0 = f16acc ? 0x8000u : 0x80000000u,
                      c_pinf = f16acc ? 0x7C00u : 0x7F800000u;
  const std::uint32_t c_ninf = f16acc ? 0xFC00u : 0xFF800000u,
                      c_snan = f16acc ? 0x7C01u : 0x7F800001u;
  const std::uint32_t c_nnan = f16acc ? 0xFE00u : 0xFFC00000u,
                      c_max = f16acc ? 0x7BFFu : 0x7F7FFFFFu;
  const std::uint32_t one = e(1), m1 = e(-1), z = 0, nz = sgn;
  const std::uint32_t nan_a =
      f.ebits == 4 ? 0x7Fu : ((((1u << f.ebits) - 1) << f.mbits) | 1u);  // signalling payload
  const std::uint32_t nan_b =
      f.ebits == 4 ? 0xFFu : (sgn | (((1u << f.ebits) - 1) << f.mbits) | (1u << (f.mbits - 1)));
  const std::uint32_t pinf = (((1u << f.ebits) - 1) << f.mbits), ninf = sgn | pinf;
  const std::uint32_t sub_min = 1u, nsub_min = sgn | 1u, sub_max = (1u << f.mbits) - 1;
  std::vector<RawCase> v;
  // Signed zeros.
  v.push_back({{{0, {nz, one}}}, c_neg0, true});   // every product -0, C = -0 (IEEE: -0)
  v.push_back({{{0, {nz, one}}}, 0u, true});       // every product -0, C = +0
  v.push_back({{{0, {one, nz}}}, c_neg0, false});  // one product -0, C = -0
  v.push_back({{{0, {nz, nz}}}, c_neg0, true});    // every product +0 (from -0 * -0), C = -0
  v.push_back({{{0, {one, one}}, {1, {one, m1}}}, c_neg0, false});  // exact cancellation, C = -0
  v.push_back({{{0, {m1, one}}, {1, {one, one}}}, 0u, false});      // exact cancellation, C = +0
  v.push_back({{}, c_neg0, false});                                 // nothing, C = -0
  v.push_back(
      {{{0, {one, one}}}, f16acc ? cf(-1.0) : cf(-1.0), false});  // 1 + (-1): exact zero via C
  v.push_back({{{0, {m1, one}}}, cf(1.0), false});                // -1 + 1
  // Inf and NaN.
  if (f.has_inf) {
    v.push_back({{{0, {pinf, one}}, {1, {ninf, one}}}, 0u, false});  // Inf - Inf in one block
    v.push_back(
        {{{0, {pinf, one}}, {2, {ninf, one}}}, 0u, false});  // FP8 mma.sync: across the two HMMAs
    v.push_back({{{0, {pinf, z}}}, 0u, false});              // Inf * 0
    v.push_back({{{0, {pinf, nz}}}, 0u, false});             // Inf * -0
    v.push_back({{{0, {ninf, sub_min}}}, 0u, false});        // -Inf * subnormal
    v.push_back({{{0, {pinf, one}}}, c_ninf, false});        // +Inf product, C = -Inf
    v.push_back({{{0, {pinf, m1}}}, c_ninf, false});         // -Inf product, C = -Inf
    v.push_back({{{0, {pinf, one}}, {1, {pinf, m1}}, {2, {nan_a, z}}}, 0u, false});
    v.push_back({{{0, {pinf, pinf}}}, c_nnan, false});
  }
  v.push_back({{}, c_pinf, false});
  v.push_back({{}, c_ninf, false});
  v.push_back({{}, c_snan, false});
  v.push_back({{}, c_nnan, false});
  v.push_back({{{0, {nan_a, one}}}, 0u, false});
  v.push_back({{{0, {nan_b, z}}}, c_ninf, false});
  v.push_back({{{0, {one, nan_b}}}, c_snan, false});
  v.push_back({{{5, {nan_a, nan_b}}}, cf(2.0), false});
  // Subnormal operands and C; results at the bottom of the range.
  v.push_back({{{0, {sub_min, sub_min}}}, 0u, false});
  v.push_back({{{0, {sub_max, nsub_min}}}, 0u, false});
  v.push_back({{{0, {sub_min, one}}, {1, {nsub_min, one}}}, c_neg0, false});
  v.push_back({{{0, {sub_max, sub_max}}}, f16acc ? 0x8001u : 0x80000001u, false});
  v.push_back({{{0, {sub_min, one}}}, f16acc ? 0x0001u : 0x00000001u, false});
  v.push_back({{{0, {nsub_min, one}}}, f16acc ? 0x03FFu : 0x007FFFFFu, false});
  v.push_back({{}, f16acc ? 0x8001u : 0x80000001u, false});
  v.push_back({{}, f16acc ? 0x83FFu : 0x807FFFFFu, false});
  if (is_bf16(kind)) {
    // bf16 products below the FP32 subnormal grid: does a negative one truncate to -0?
    const double t75 = std::ldexp(1.0, -75);
    v.push_back({{{0, {nsub_min, e(std::ldexp(1.0, -20))}}}, 0u, false});  // -2^-153
    v.push_back({{{0, {sub_min, e(std::ldexp(1.0, -20))}}}, 0u, false});   // +2^-153
    v.push_back({{{0, {e(-t75), e(t75)}}}, 0u, false});                    // -2^-150
    v.push_back({{{0, {e(t75), e(t75)}}}, 0u, false});                     // +2^-150
    v.push_back({{{0, {e(-t75), e(t75)}}}, c_neg0, false});
    v.push_back({{{0, {e(-t75), e(t75)}}}, 0x00000001u, false});  // 2^-149 - 2^-150
    v.push_back({{{0, {e(t75), e(t75)}}}, 0x80000001u, false});   // -2^-149 + 2^-150
    v.push_back({{{0, {e(-t75), e(t75)}}, {1, {e(-t75), e(t75)}}, {2, {e(-t75), e(t75)}}},
                 0u,
                 false});  // -3 * 2^-150
    // Overflow of finite operands.
    const double p127 = std::ldexp(1.0, 127);
    v.push_back({{{0, {e(p127), e(1.5)}}, {1, {e(p127), e(1.5)}}}, 0u, false});  // F11: 3 * 2^127
    v.push_back({{{0, {e(p127), e(2)}}}, 0u, false});  // one product 2^128
    v.push_back({{{0, {e(-p127), e(2)}}}, 0u, false});
    v.push_back(
        {{{0, {e(p127), e(2)}}, {1, {e(p127), e(-2)}}, {2, {one, one}}}, 0u, false});  // F10-like
    v.push_back({{{0, {e(std::ldexp(1.0, 104)), one}}}, c_max, false});  // FLT_MAX + ulp
    v.push_back({{{0, {e(std::ldexp(1.0, 103)), one}}}, c_max, false});  // FLT_MAX + ulp/2
    v.push_back({{{0, {e(-std::ldexp(1.0, 104)), one}}}, c_max | 0x80000000u, false});
    v.push_back({{{0, {e(std::ldexp(1.0, 100)), e(std::ldexp(1.0, 100))}}}, c_ninf, false});
  }
  if (f16acc) {
    v.push_back({{{0, {e(256), e(256)}}}, 0u, false});  // 65536 -> Inf
    v.push_back({{{0, {e(-256), e(256)}}}, 0u, false});
    v.push_back({{{0, {e(16), one}}}, c_max, false});  // 65520: the RNE tie to Inf
    v.push_back({{{0, {e(15), one}}}, c_max, false});  // 65519
    v.push_back({{{0, {e(256), e(256)}}, {1, {e(256), e(-256)}}, {2, {one, one}}}, 0u, false});
    v.push_back({{{0, {e(-std::ldexp(1.0, -24)), e(0.25)}}}, 0u, false});  // -2^-26 -> -0 or +0
    v.push_back({{{0, {e(-std::ldexp(1.0, -24)), e(0.5)}}}, 0u, false});   // -2^-25: tie
    v.push_back({{{0, {e(-std::ldexp(1.0, -24)), e(0.75)}}}, 0u, false});  // -0.75 * 2^-24
    v.push_back({{{0, {e(std::ldexp(1.0, -24)), e(0.25)}}}, 0u, false});
    v.push_back({{{0, {e(-std::ldexp(1.0, -24)), e(0.25)}}}, c_neg0, false});
    v.push_back({{{0, {e(-std::ldexp(1.0, -24)), e(1.25)}}}, 0x0001u, false});  // -0.25 * 2^-24
    v.push_back({{{0, {e(std::ldexp(1.0, -24)), e(1.25)}}}, 0x8001u, false});
  }
  return v;
}

// `per_scenario` problems of each special scenario (tags 8-13), or integer extremes (tag 14).
Problems make_special_problems(int kind, int K, int per_scenario, std::uint32_t seed) {
  Problems P{kind, K, 0, 0, {}, {}, {}, {}, {}};
  const KindInfo& info = kKinds[kind];
  const int M = info.m, N = info.n;
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> a(std::size_t(M) * K), b(std::size_t(N) * K), c(std::size_t(M) * N);
  if (info.acc == 2) {
    const std::uint32_t mask = (1u << info.in_bits) - 1;
    const int qmax = info.in_bits == 4 ? 7 : 127, qmin = -qmax - 1;
    const int vals[] = {qmin, qmax, 0, -1, 1, qmin, qmax};
    const int uvals[] = {0, 255, 0, 254, 1, 128, 255};  // u8 operands of the INT8 wgmma kinds
    const int* va = a_unsigned(kind) ? uvals : vals;
    const int* vb = b_unsigned(kind) ? uvals : vals;
    const std::uint32_t cs[] = {0x80000000u, 0x7FFFFFFFu, 0x80000001u,
                                0x7FFFFFFEu, 0u,          0xFFFFFFFFu};
    for (int r = 0; r < 6 * per_scenario; ++r) {
      for (auto& x : a) x = std::uint32_t(va[rng() % 7]) & mask;
      for (auto& x : b) x = std::uint32_t(vb[rng() % 7]) & mask;
      for (auto& x : c) x = rng() % 3 ? cs[rng() % 6] : std::uint32_t(rng());
      add_raw(P, 14, a, b, c);
    }
    P.d.assign(std::size_t(P.count) * M * N, 0xFFFFFFFFu);
    return P;
  }
  SpecialGen g{in_fmt(kind), rng};
  AccGen cg{info.acc == 1, rng};
  for (int r = 0; r < 6 * per_scenario; ++r) {
    const int tag = 8 + r % 6;
    const double dens[] = {0.03, 0.1, 0.3};
    const double d = dens[(r / 6) % 3];
    for (int m = 0; m < M; ++m) {
      for (int k = 0; k < K; ++k) {
        std::uint32_t& x = a[std::size_t(m) * K + k];
        switch (tag) {
          case 8:
            x = g.uni() < d ? g.any_special() : g.normal();
            break;
          case 9: {
            const double v = g.uni();
            x = v < 0.5 ? g.tiny() : v < 0.65 ? g.zero() : g.normal();
            break;
          }
          case 10:
            x = (m % 4 == 0 || g.uni() < 0.4) ? g.zero() : g.unit();
            break;
          case 11: {
            const double v = g.uni();
            x = v < 0.6 ? g.big() : v < 0.8 ? g.normal() : g.unit();
            break;
          }
          case 12: {
            const double v = g.uni();
            x = v < 2.0 / K ? g.inf() : v < 2.0 / K + 0.02 ? g.zero() : g.normal();
            break;
          }
          default:
            x = g.uni() < 0.5 / K ? g.nan() : g.normal();
            break;
        }
        if (tag == 9 && m % 5 == 0) x = g.zero();  // rows of zeros: D is C through the block
      }
    }
    for (int n = 0; n < N; ++n) {
      for (int k = 0; k < K; ++k) {
        std::uint32_t& x = b[std::size_t(n) * K + k];
        switch (tag) {
          case 8:
            x = g.uni() < d ? g.any_special() : g.normal();
            break;
          case 9:
            x = g.uni() < 0.5 ? g.tiny() : g.normal();
            break;
          case 10:
            x = (n % 4 == 1 || g.uni() < 0.4) ? g.zero() : g.unit();
            break;
          case 11: {
            const double v = g.uni();
            x = v < 0.6 ? g.big() : v < 0.8 ? g.normal() : g.unit();
            break;
          }
          case 12: {
            const double v = g.uni();
            x = v < 2.0 / K ? g.inf() : v < 2.0 / K + 0.02 ? g.zero() : g.normal();
            break;
          }
          default:
            x = g.uni() < 0.5 / K ? g.nan() : g.normal();
            break;
        }
      }
    }
    for (auto& x : c) {
      const double v = g.uni();
      switch (tag) {
        case 8:
          x = v < 0.4 ? cg.any_special() : cg.normal();
          break;
        case 9:
          x = v < 0.4 ? cg.subnormal() : v < 0.6 ? cg.zero() : v < 0.8 ? cg.tiny() : cg.normal();
          break;
        case 10:
          x = v < 0.8 ? cg.zero() : cg.unit();
          break;
        case 11:
          x = v < 0.3 ? cg.maxf() : v < 0.6 ? cg.big() : v < 0.8 ? cg.zero() : cg.normal();
          break;
        case 12:
          x = v < 0.3 ? cg.inf() : cg.normal();
          break;
        default:
          x = v < 0.3 ? cg.nan() : v < 0.4 ? cg.inf() : cg.normal();
          break;
      }
    }
    add_raw(P, tag, a, b, c);
  }
  if (K == info.k) {
    for (const RawCase& rc : special_designed(kind)) {
      std::fill(a.begin(), a.end(), 0u);
      std::fill(b.begin(), b.end(), 0u);
      std::fill(c.begin(), c.end(), 0u);
      for (const auto& t : rc.terms) {
        for (int k = rc.all_k ? 0 : t.first; k < (rc.all_k ? K : t.first + 1); ++k) {
          a[k] = t.second.first;
          b[k] = t.second.second;
        }
      }
      c[0] = rc.c;
      add_raw(P, 15, a, b, c);
    }
  }
  P.d.assign(std::size_t(P.count) * M * N, 0xFFFFFFFFu);  // poisoned
  return P;
}

template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(1, v.size() * sizeof(T))));
  if (!v.empty())
    ATTNSIM_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

void run(Problems& P, int variant) {
  std::uint8_t* a = to_device(P.a);
  std::uint8_t* b = to_device(P.b);
  std::uint32_t* c = to_device(P.c);
  std::uint32_t* d = to_device(P.d);
  if (is_wgmma(P.kind)) {
    wgmma_kernel<<<P.count, 128>>>(P.kind, P.K * kKinds[P.kind].in_bits / 8, variant, P.promote, a,
                                   b, c, d);
  } else {
    mma_sync_kernel<<<P.count, 32>>>(P.kind, kKinds[P.kind], P.K, a, b, c, d);
  }
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  ATTNSIM_CUDA_CHECK(cudaMemcpy(P.d.data(), d, P.d.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(d);
}

// Exact result of a small-integer problem (FP inputs hold small integers exactly).
bool small_integers_exact(const Problems& P, int p) {
  KindInfo info = kKinds[P.kind];
  if (P.promote > 0) info.acc = 0;  // promoted: C and D are FP32
  const int M = info.m, N = info.n, K = P.K;
  auto get = [&](const std::vector<std::uint8_t>& buf, std::size_t base_elems, int idx,
                 bool u8) -> double {
    const std::size_t e = base_elems + std::size_t(idx);
    if (info.in_bits == 16) {
      const std::uint16_t bits = std::uint16_t(buf[2 * e] | (buf[2 * e + 1] << 8));
      return is_bf16(P.kind) ? attnsim::decode_f64<attnsim::bf16>(bits)
                             : attnsim::decode_f64<attnsim::fp16>(bits);
    }
    if (info.in_bits == 8) {
      if (info.acc == 2) return u8 ? double(buf[e]) : double(std::int8_t(buf[e]));
      return is_e4m3(P.kind) ? attnsim::decode_f64<attnsim::e4m3fn>(buf[e])
                             : attnsim::decode_f64<attnsim::e5m2>(buf[e]);
    }
    const int v = (buf[e / 2] >> (4 * (e & 1))) & 0xF;
    return double(v >= 8 ? v - 16 : v);
  };
  for (int r = 0; r < M; ++r) {
    for (int n = 0; n < N; ++n) {
      double s;
      const std::uint32_t cv = P.c[std::size_t(p) * M * N + r * N + n];
      if (info.acc == 2)
        s = double(std::int32_t(cv));
      else if (info.acc == 1)
        s = attnsim::decode_f64<attnsim::fp16>(std::uint16_t(cv));
      else {
        float f;
        std::memcpy(&f, &cv, 4);
        s = f;
      }
      for (int k = 0; k < K; ++k) {
        s += get(P.a, std::size_t(p) * M * K, r * K + k, a_unsigned(P.kind)) *
             get(P.b, std::size_t(p) * N * K, n * K + k, b_unsigned(P.kind));
      }
      const std::uint32_t dv = P.d[std::size_t(p) * M * N + r * N + n];
      double got;
      if (info.acc == 2)
        got = double(std::int32_t(dv));
      else if (info.acc == 1)
        got = attnsim::decode_f64<attnsim::fp16>(std::uint16_t(dv));
      else {
        float f;
        std::memcpy(&f, &dv, 4);
        got = f;
      }
      if (got != s) return false;
    }
  }
  return true;
}

// INT8 wgmma: how many recorded outputs each candidate rule misses (printed in the log; the
// bit-exact check of record is tests/hw/mma_h100_test.cpp). Per instruction: W wraps C + sum mod
// 2^32; S clamps the exact C + sum to int32; E (chains) wraps per instruction but clamps only once
// at the end of the chain (a 64-bit accumulator); Q clamps after every product in k order.
void igmma_rule_misses(const Problems& P, int* w, int* sat, int* e, int* q) {
  const KindInfo& info = kKinds[P.kind];
  const int M = info.m, N = info.n, K = P.K;
  const std::int64_t lo = INT32_MIN, hi = INT32_MAX;
  auto clamp = [&](std::int64_t v) { return v < lo ? lo : v > hi ? hi : v; };
  *w = *sat = *e = *q = 0;
  for (int p = 0; p < P.count; ++p) {
    for (int r = 0; r < M; ++r) {
      for (int n = 0; n < N; ++n) {
        const std::size_t o = std::size_t(p) * M * N + r * N + n;
        const std::int64_t c = std::int32_t(P.c[o]);
        std::int64_t vw = c, vs = c, ve = c, vq = c;
        for (int k0 = 0; k0 < K; k0 += 32) {
          std::int64_t sum = 0;
          for (int k = k0; k < k0 + 32; ++k) {
            const std::uint8_t x = P.a[std::size_t(p) * M * K + r * K + k],
                               y = P.b[std::size_t(p) * N * K + n * K + k];
            const std::int64_t prod =
                std::int64_t(a_unsigned(P.kind) ? int(x) : int(std::int8_t(x))) *
                (b_unsigned(P.kind) ? int(y) : int(std::int8_t(y)));
            sum += prod;
            vq = clamp(vq + prod);
          }
          vw = std::int32_t(std::uint32_t(std::uint64_t(vw + sum)));
          vs = clamp(vs + sum);
          ve += sum;
        }
        const std::int32_t d = std::int32_t(P.d[o]);
        *w += d != vw;
        *sat += d != vs;
        *e += d != clamp(ve);
        *q += d != vq;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: mma_probe OUTDIR [wgmma]\n");
    return 2;
  }
  const std::string dir = argv[1];
  FILE* manifest = std::fopen((dir + "/mma_manifest.txt").c_str(), "w");
  if (!manifest) return 1;
  std::fprintf(
      manifest,
      "# kind instr M N K problems in_bits acc(0=f32,1=f16,2=s32) file_prefix file\n# tags:");
  for (const char* t : kTagNames) std::fprintf(manifest, " %s", t);
  std::fprintf(manifest, "\n");
  // The mma.sync kinds first: a fault in the wgmma kernel (a sticky CUDA error) must not cost
  // their recordings. `mma_probe OUTDIR wgmma` runs only the wgmma part (for compute-sanitizer).
  const bool wgmma_only = argc > 2 && std::string(argv[2]) == "wgmma";
  int wgmma_variant = -1;
  auto record = [&](Problems& P, const std::string& prefix, const char* file) {
    KindInfo info = kKinds[P.kind];
    if (P.promote > 0) info.acc = 0;  // promoted: C and D are FP32
    run(P, wgmma_variant);
    int bad = 0, nan = 0, inf = 0, negzero = 0;
    for (int p = 0; p < P.count; ++p) {
      if (P.tag[p] == 0 && !small_integers_exact(P, p)) ++bad;
    }
    for (const std::uint32_t dv : P.d) {
      if (info.acc == 0) {
        nan += (dv & 0x7FFFFFFFu) > 0x7F800000u;
        inf += (dv & 0x7FFFFFFFu) == 0x7F800000u;
        negzero += dv == 0x80000000u;
      } else if (info.acc == 1) {
        nan += (dv & 0x7FFFu) > 0x7C00u;
        inf += (dv & 0x7FFFu) == 0x7C00u;
        negzero += dv == 0x8000u;
      }
    }
    attnsim::probe::write_bin(dir + "/" + prefix + ".a.bin", P.a.data(), P.a.size());
    attnsim::probe::write_bin(dir + "/" + prefix + ".b.bin", P.b.data(), P.b.size());
    attnsim::probe::write_bin(dir + "/" + prefix + ".c.bin", P.c.data(), P.c.size() * 4);
    attnsim::probe::write_bin(dir + "/" + prefix + ".d.bin", P.d.data(), P.d.size() * 4);
    attnsim::probe::write_bin(dir + "/" + prefix + ".tag.bin", P.tag.data(), P.tag.size() * 4);
    std::fprintf(manifest, "%d %s %d %d %d %d %d %d %s %s %d\n", P.kind, info.name, info.m, info.n,
                 P.K, P.count, info.in_bits, info.acc, prefix.c_str(), file, P.promote);
    std::fflush(manifest);
    std::printf(
        "%-40s K=%-4d %5d problems, small-integer layout check: %s; D: %d NaN, %d Inf, %d -0\n",
        prefix.c_str(), P.K, P.count, bad ? "FAILED" : "ok", nan, inf, negzero);
    if (is_igmma(P.kind)) {
      int w, sat, e, q;
      igmma_rule_misses(P, &w, &sat, &e, &q);
      std::printf(
          "%-40s outputs %zu missed by: wrap %d, clamp per instruction %d, clamp at chain end %d, "
          "clamp per product %d\n",
          prefix.c_str(), P.d.size(), w, sat, e, q);
    }
    std::fflush(stdout);
  };
  for (int kind = 0; kind < kKindCount; ++kind) {
    const KindInfo& info = kKinds[kind];
    const bool wg = is_wgmma(kind);
    if (wgmma_only && !wg) continue;
    if (wg && wgmma_variant < 0) {
      for (int variant = 0; variant < 2 && wgmma_variant < 0; ++variant) {
        Problems v = make_problems(kWgmmaE4m3, 32, 0, 99);
        run(v, variant);
        bool ok = true;
        for (int p = 0; p < v.count; ++p) ok = ok && (v.tag[p] != 0 || small_integers_exact(v, p));
        std::printf("wgmma descriptor variant %d: small-integer validation %s\n", variant,
                    ok ? "passed" : "FAILED");
        std::fflush(stdout);
        if (ok) wgmma_variant = variant;
      }
      if (wgmma_variant < 0) {
        std::printf("%-28s skipped: no descriptor variant validated\n", info.name);
        continue;
      }
    }
    // HGMMA (new in this recording) goes to the second file with the special operands; INT8
    // wgmma (IGMMA, added later) to a third, mma_h100_igmma.h5, special groups included.
    const bool igmma = is_igmma(kind);
    // FP8 wgmma with f16 accumulation (added later still): its own file, mma_h100_f16acc.h5.
    const bool f16acc = is_qgmma_f16(kind);
    const char* file = f16acc                                      ? "f16acc"
                       : igmma                                     ? "igmma"
                       : (kind == kWgmmaF16 || kind == kWgmmaBf16) ? "special"
                                                                   : "main";
    // IGMMA: fewer random sets (size of data/hw), most for s8 with and without .satfinite.
    const bool igmma_s8 = kind == kWgmmaS8 || kind == kWgmmaS8Sat;
    for (int steps : {1, 8}) {
      const int K = info.k * steps;
      const bool hgmma =
          kind == kWgmmaF16 || kind == kWgmmaBf16;  // fewer random sets: size of data/hw
      int random_count = steps == 1 ? (hgmma ? 60 : wg ? 150 : 600) : (hgmma ? 8 : wg ? 24 : 96);
      if (igmma) random_count = steps == 1 ? (igmma_s8 ? 32 : 16) : (igmma_s8 ? 4 : 2);
      if (f16acc) random_count = steps == 1 ? 64 : 8;
      Problems P = make_problems(kind, K, random_count, 1000u + 17u * kind + steps);
      record(P, std::string(info.name) + "_k" + std::to_string(K), file);
    }
    for (int steps : {1, 8}) {
      const int K = info.k * steps;
      int per = info.acc == 2 ? (steps == 1 ? 6 : 2)
                : wg          ? (steps == 1 ? 6 : 2)
                              : (steps == 1 ? 16 : 3);
      if (igmma) per = steps == 1 ? (igmma_s8 ? 4 : 2) : 1;
      if (f16acc) per = steps == 1 ? 4 : 1;
      Problems P = make_special_problems(kind, K, per, 5000u + 17u * kind + steps);
      record(P, std::string(info.name) + "_k" + std::to_string(K) + "_special",
             f16acc  ? "f16acc"
             : igmma ? "igmma"
                     : "special");
    }
  }
  // Two-level accumulation (SageAttention2 sm90, DeepGEMM; SageAttention2++ with f16 chunks):
  // e4m3 wgmma chains over chunks of `every` elements from zero, each chunk's D added to FP32
  // registers holding C (FP32 C and D). Operands from the FP32-accumulator generator (C in f32).
  if (wgmma_variant >= 0) {
    for (int f16 = 0; f16 < 2; ++f16) {
      for (const int K : {256, 512}) {
        for (const int every : {32, 64, 128}) {
          if (K == 512 && every != 128) continue;
          const int kind = f16 ? kWgmmaE4m3F16 : kWgmmaE4m3;
          Problems P =
              make_problems(kWgmmaE4m3, K, K == 256 ? 4 : 2, 7000u + 100u * f16 + K + every);
          P.kind = kind;
          P.promote = every;
          record(P,
                 std::string(kKinds[kind].name) + "_k" + std::to_string(K) + "_promote" +
                     std::to_string(every),
                 "f16acc");
        }
      }
    }
  }
  std::fclose(manifest);
  return 0;
}
