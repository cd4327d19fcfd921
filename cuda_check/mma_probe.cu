// Probe: records what the H100's matrix instructions compute (mma.sync HMMA/IMMA paths, the
// emulated FP8 and INT4 mma.sync, and FP8 wgmma/QGMMA) on designed and random inputs, so that the
// CPU models in numerics/mma.* can be checked bit for bit in CI.
//
// Usage: mma_probe OUTDIR
// For every instruction kind and chain length, writes OUTDIR/<kind>_<K>.{a,b,c,d}.bin: P problems
// back to back, A as M x K row-major encodings, Bt as N x K row-major encodings, C and D as M x N
// row-major (f32 bits, f16 bits or s32). OUTDIR/mma_manifest.txt lists the files and shapes.
// Inputs are generated here from fixed seeds; the recording, not the generator, is the reference.
#include "cuda_check/probe_util.cuh"
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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
  kKindCount
};

struct KindInfo {
  const char* name;  // attnsim mma --instr name
  int m, n, k;       // instruction shape
  int in_bits;       // bits per A/B element
  int acc;           // 0 f32, 1 f16, 2 s32
};

const KindInfo kKinds[kKindCount] = {
    {"sm90.hmma.f16.f32", 16, 8, 16, 16, 0},   {"sm90.hmma.bf16.f32", 16, 8, 16, 16, 0},
    {"sm90.hmma.f16.f16", 16, 8, 16, 16, 1},   {"sm90.mma_sync.e4m3.f32", 16, 8, 32, 8, 0},
    {"sm90.mma_sync.e5m2.f32", 16, 8, 32, 8, 0}, {"sm90.imma.s8.s32", 16, 8, 32, 8, 2},
    {"sm90.imma.s8.s32.satfinite", 16, 8, 32, 8, 2}, {"sm90.imma.s4.s32", 16, 8, 64, 4, 2},
    {"sm90.wgmma.e4m3.f32", 64, 8, 32, 8, 0},  {"sm90.wgmma.e5m2.f32", 64, 8, 32, 8, 0},
};

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
__device__ __forceinline__ std::uint32_t elem(const std::uint8_t* base, int bits, int ld, int r, int c) {
  const std::size_t idx = std::size_t(r) * ld + c;
  if (bits == 16) return reinterpret_cast<const std::uint16_t*>(base)[idx];
  if (bits == 8) return base[idx];
  return (base[idx / 2] >> (4 * (idx & 1))) & 0xF;  // 4-bit: element 0 in the low nibble
}

// One warp runs one problem: D = chain of mma over K / k steps, D of a step the C of the next.
__global__ void mma_sync_kernel(int kind, KindInfo info, int K, const std::uint8_t* A, const std::uint8_t* Bt,
                                const std::uint32_t* C, std::uint32_t* D) {
  const int p = blockIdx.x;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const std::size_t a_bytes = std::size_t(16) * K * info.in_bits / 8, b_bytes = std::size_t(8) * K * info.in_bits / 8;
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
      if (info.in_bits == 16) a_f16_k16(i, g, t, &r, &cc);
      else if (info.in_bits == 8) a_8b_k32(i, g, t, &r, &cc);
      else a_4b_k64(i, g, t, &r, &cc);
      ar[i / per_reg] |= elem(a, info.in_bits, K, r, k0 + cc) << (info.in_bits * (i % per_reg));
    }
    for (int i = 0; i < 2 * per_reg; ++i) {
      int kk, n;
      if (info.in_bits == 16) b_f16_k16(i, g, t, &kk, &n);
      else if (info.in_bits == 8) b_8b_k32(i, g, t, &kk, &n);
      else b_4b_k64(i, g, t, &kk, &n);
      br[i / per_reg] |= elem(b, info.in_bits, K, n, k0 + kk) << (info.in_bits * (i % per_reg));
    }
    switch (kind) {
      case kHmmaF16F32:
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kHmmaBf16F32:
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kHmmaF16F16: {
        std::uint32_t c01 = (acc[0] & 0xFFFF) | (acc[1] << 16), c23 = (acc[2] & 0xFFFF) | (acc[3] << 16);
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                     : "+r"(c01), "+r"(c23)
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        acc[0] = c01 & 0xFFFF;
        acc[1] = c01 >> 16;
        acc[2] = c23 & 0xFFFF;
        acc[3] = c23 >> 16;
        break;
      }
      case kMmaE4m3F32:
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kMmaE5m2F32:
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS8:
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS8Sat:
        asm volatile("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
                     : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
        break;
      case kImmaS4:
        asm volatile("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
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
__device__ __forceinline__ std::uint64_t smem_desc(const void* p, std::uint32_t lbo, std::uint32_t sbo) {
  const std::uint32_t addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  return std::uint64_t((addr >> 4) & 0x3FFF) | (std::uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (std::uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

// One warpgroup (128 threads) runs one m64n8k32 FP8 problem chain. Operands are staged in shared
// memory as 8x16-byte core matrices, K-major: core matrix (row block rb, k block kb) at byte
// (rb * 2 + kb) * 128, rows of 16 K-bytes inside. `variant` swaps the two byte offsets, so that the
// probe can confirm which reading of the descriptor fields is right (validation problems decide).
__global__ void wgmma_kernel(int kind, int K, int variant, const std::uint8_t* A, const std::uint8_t* Bt,
                             const std::uint32_t* C, std::uint32_t* D) {
  __shared__ alignas(128) std::uint8_t sa[64 * 32];
  __shared__ alignas(128) std::uint8_t sb[8 * 32];
  const int p = blockIdx.x;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const std::uint8_t* a = A + std::size_t(p) * 64 * K;
  const std::uint8_t* b = Bt + std::size_t(p) * 8 * K;
  const std::uint32_t* c = C + std::size_t(p) * 512;
  std::uint32_t* d = D + std::size_t(p) * 512;
  float acc[4];
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    acc[i] = __uint_as_float(c[(16 * warp + r) * 8 + cc]);
  }
  const std::uint32_t lbo = variant == 0 ? 128 : 256, sbo = variant == 0 ? 256 : 128;
  for (int k0 = 0; k0 < K; k0 += 32) {
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
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;"
                   : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                   : "l"(da), "l"(db));
    } else {
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;"
                   : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                   : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    int r, cc;
    c_k(i, g, t, &r, &cc);
    d[(16 * warp + r) * 8 + cc] = __float_as_uint(acc[i]);
  }
}

// ---------------- host: inputs ----------------

struct Problems {
  int kind, K, count;
  std::vector<std::uint8_t> a, b;
  std::vector<std::uint32_t> c, d;
  std::vector<std::int32_t> tag;  // which generator made each problem (see kTagNames)
};

const char* const kTagNames[] = {"small_integers", "designed", "normal", "mixed_scales", "softmax_p",
                                 "outliers", "cancellation", "extremes"};

std::uint32_t enc_in(int kind, float x) {
  using namespace attnsim;
  constexpr Policy kRn{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  switch (kind) {
    case kHmmaF16F32:
    case kHmmaF16F16: return encode<fp16>(x, kRn);
    case kHmmaBf16F32: return encode<bf16>(x, kRn);
    case kMmaE4m3F32:
    case kWgmmaE4m3: return encode<e4m3fn>(x, kRn);
    default: return encode<e5m2>(x, kRn);
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
    buf[idx / 2] = std::uint8_t((buf[idx / 2] & ~(0xF << (4 * (idx & 1)))) | ((v & 0xF) << (4 * (idx & 1))));
  }
}

void add_problem(Problems& P, int tag, const std::vector<float>& af, const std::vector<float>& bf,
                 const std::vector<float>& cf, std::mt19937& rng) {
  const KindInfo& info = kKinds[P.kind];
  const int M = info.m, N = info.n, K = P.K;
  const std::size_t a0 = P.a.size(), b0 = P.b.size();
  P.a.resize(a0 + std::size_t(M) * K * info.in_bits / 8, 0);
  P.b.resize(b0 + std::size_t(N) * K * info.in_bits / 8, 0);
  std::vector<std::uint8_t> as(std::size_t(M) * K * info.in_bits / 8, 0), bs(std::size_t(N) * K * info.in_bits / 8, 0);
  const bool integer = info.acc == 2;
  for (int i = 0; i < M * K; ++i) put(P, as, i, integer ? std::uint32_t(int(af[i])) : enc_in(P.kind, af[i]));
  for (int i = 0; i < N * K; ++i) put(P, bs, i, integer ? std::uint32_t(int(bf[i])) : enc_in(P.kind, bf[i]));
  std::memcpy(P.a.data() + a0, as.data(), as.size());
  std::memcpy(P.b.data() + b0, bs.data(), bs.size());
  for (int i = 0; i < M * N; ++i) {
    std::uint32_t cv;
    if (integer) cv = std::uint32_t(std::int32_t(cf[i]));
    else if (info.acc == 1) cv = attnsim::encode<attnsim::fp16>(cf[i], {attnsim::Round::kNearestEven, attnsim::Overflow::kInf, attnsim::NanEncoding::kCuda});
    else std::memcpy(&cv, &cf[i], 4);
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

std::vector<Designed> designed_cases(int kind) {
  const float t24 = std::ldexp(1.0f, -24), t13 = std::ldexp(1.0f, -13), t12 = std::ldexp(1.0f, -12);
  std::vector<Designed> v;
  if (kKinds[kind].in_bits == 16) {
    v.push_back({{{0, {1, 1}}}, -(1.0f - t24)});                                          // F1
    v.push_back({{{0, {0.5f, t24}}, {1, {0.5f, t24}}, {2, {0.5f, t24}}, {3, {0.5f, t24}}}, 1.0f});  // F2
    v.push_back({{{0, {1, 1}}, {1, {1.5f * t12, t12}}}, 0.0f});                           // F3
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {8, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}}, 0.0f});  // F4
    v.push_back({{{0, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}, {8, {1, 1}}, {9, {1, -1}}}, 0.0f});  // F5
    v.push_back({{{0, {1, 1}}, {1, {t13, -t13}}}, 0.0f});                                 // F6
    v.push_back({{{0, {1.5f, 1.5f}}, {1, {t13, -t12}}}, 0.0f});                           // F7
    v.push_back({{{0, {t12, t13}}, {1, {t24, t24}}}, 0.0f});                              // F8
    v.push_back({{}, -0.0f});                                                             // Z1
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}}, -0.0f});                                    // Z1b
    v.push_back({{{0, {1, 1}}, {1, {1, 1}}, {2, {1, 1}}, {3, {1, 1}}}, 1.0f + std::ldexp(1.0f, -22) + std::ldexp(1.0f, -23)});  // F12
  } else {
    const float e8 = std::ldexp(1.0f, -8), e7 = std::ldexp(1.0f, -7);
    v.push_back({{}, 1.0f + std::ldexp(1.0f, -23)});                                      // Q1
    v.push_back({{}, 1.0f + t13});                                                        // Q2
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {16, {e8, e8}}}, 0.0f});                     // Q3
    v.push_back({{{0, {1, 1}}, {2, {e7, e7}}, {3, {e7, e7}}}, 0.0f});                     // Q4
    v.push_back({{}, std::ldexp(1.0f, -149)});                                            // Q5
    v.push_back({{{0, {448, 448}}, {1, {448, -448}}, {2, {1, std::ldexp(1.0f, -9)}}}, 0.0f});  // Q6
    v.push_back({{{0, {1, 1}}, {1, {1, -1}}, {16, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}}, 0.0f});  // Q7
    v.push_back({{{0, {std::ldexp(1.0f, -15), std::ldexp(1.0f, -15)}}, {16, {1, 1}}, {17, {1, -1}}}, 0.0f});  // Q8
    // Which k positions share a block: a +1 and a -1 product at (0, j) and a tiny product at k.
    for (int j = 1; j < 32; j += 3) {
      for (int k = 0; k < 32; k += 5) {
        if (k == 0 || k == j) continue;
        v.push_back({{{0, {1, 1}}, {j, {1, -1}}, {k, {std::ldexp(1.0f, -7), std::ldexp(1.0f, -7)}}}, 0.0f});
      }
    }
  }
  return v;
}

Problems make_problems(int kind, int K, int random_count, std::uint32_t seed) {
  Problems P{kind, K, 0, {}, {}, {}, {}, {}};
  const KindInfo& info = kKinds[kind];
  const int M = info.m, N = info.n;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  auto zeros = [&](int n) { return std::vector<float>(std::size_t(n), 0.0f); };
  const bool integer = info.acc == 2;
  const int qmax = info.in_bits == 4 ? 7 : 127, qmin = info.in_bits == 4 ? -8 : -128;
  // Small integers: exact in every model, so any difference is a fragment-layout bug.
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<float> a = zeros(M * K), b = zeros(N * K), c = zeros(M * N);
    for (auto& x : a) x = float(int(ud(rng) * 7) - 3);
    for (auto& x : b) x = float(int(ud(rng) * 7) - 3);
    for (auto& x : c) x = float(int(ud(rng) * 201) - 100);
    add_problem(P, 0, a, b, c, rng);
  }
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
      for (auto& x : a) x = float(qmin + int(ud(rng) * (qmax - qmin + 1)));
      for (auto& x : b) x = float(qmin + int(ud(rng) * (qmax - qmin + 1)));
      for (auto& x : c) x = std::ldexp(nd(rng), int(ud(rng) * 30));
      if (tag == 7) {  // extremes: all-max products and C near the int32 limits (wrap vs saturate)
        for (auto& x : a) x = float(ud(rng) < 0.5f ? qmax : qmin);
        for (auto& x : b) x = float(ud(rng) < 0.5f ? qmax : qmin);
        for (auto& x : c) x = ud(rng) < 0.5f ? 2147483000.0f : -2147483000.0f;
      }
      add_problem(P, tag, a, b, c, rng);
      continue;
    }
    const float big = info.in_bits == 8 ? 448.0f : 65504.0f;
    for (int i = 0; i < M * K; ++i) {
      switch (tag) {
        case 2: a[i] = nd(rng); break;
        case 3: a[i] = std::ldexp(nd(rng), int(ud(rng) * 24) - 12); break;
        case 4: a[i] = info.in_bits == 8 ? ud(rng) * 448.0f : ud(rng); break;
        case 5: a[i] = nd(rng) * (ud(rng) < 0.02f ? 300.0f : 1.0f); break;
        case 6: a[i] = nd(rng); break;
        default: a[i] = (ud(rng) < 0.5f ? -1.0f : 1.0f) * big * ud(rng); break;
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
    if (info.acc == 1) for (auto& x : c) x = std::fmax(std::fmin(x, 60000.0f), -60000.0f);
    add_problem(P, tag, a, b, c, rng);
  }
  P.d.assign(std::size_t(P.count) * M * N, 0xFFFFFFFFu);  // poisoned
  return P;
}


template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(1, v.size() * sizeof(T))));
  if (!v.empty()) ATTNSIM_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

void run(Problems& P, int variant) {
  std::uint8_t* a = to_device(P.a);
  std::uint8_t* b = to_device(P.b);
  std::uint32_t* c = to_device(P.c);
  std::uint32_t* d = to_device(P.d);
  if (P.kind == kWgmmaE4m3 || P.kind == kWgmmaE5m2) {
    wgmma_kernel<<<P.count, 128>>>(P.kind, P.K, variant, a, b, c, d);
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
  const KindInfo& info = kKinds[P.kind];
  const int M = info.m, N = info.n, K = P.K;
  auto get = [&](const std::vector<std::uint8_t>& buf, std::size_t base_elems, int idx) -> double {
    const std::size_t e = base_elems + std::size_t(idx);
    if (info.in_bits == 16) {
      const std::uint16_t bits = std::uint16_t(buf[2 * e] | (buf[2 * e + 1] << 8));
      return P.kind == kHmmaBf16F32 ? attnsim::decode_f64<attnsim::bf16>(bits) : attnsim::decode_f64<attnsim::fp16>(bits);
    }
    if (info.in_bits == 8) {
      if (info.acc == 2) return double(std::int8_t(buf[e]));
      return (P.kind == kMmaE4m3F32 || P.kind == kWgmmaE4m3) ? attnsim::decode_f64<attnsim::e4m3fn>(buf[e])
                                                           : attnsim::decode_f64<attnsim::e5m2>(buf[e]);
    }
    const int v = (buf[e / 2] >> (4 * (e & 1))) & 0xF;
    return double(v >= 8 ? v - 16 : v);
  };
  for (int r = 0; r < M; ++r) {
    for (int n = 0; n < N; ++n) {
      double s;
      const std::uint32_t cv = P.c[std::size_t(p) * M * N + r * N + n];
      if (info.acc == 2) s = double(std::int32_t(cv));
      else if (info.acc == 1) s = attnsim::decode_f64<attnsim::fp16>(std::uint16_t(cv));
      else { float f; std::memcpy(&f, &cv, 4); s = f; }
      for (int k = 0; k < K; ++k) s += get(P.a, std::size_t(p) * M * K, r * K + k) * get(P.b, std::size_t(p) * N * K, n * K + k);
      const std::uint32_t dv = P.d[std::size_t(p) * M * N + r * N + n];
      double got;
      if (info.acc == 2) got = double(std::int32_t(dv));
      else if (info.acc == 1) got = attnsim::decode_f64<attnsim::fp16>(std::uint16_t(dv));
      else { float f; std::memcpy(&f, &dv, 4); got = f; }
      if (got != s) return false;
    }
  }
  return true;
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
  std::fprintf(manifest, "# kind instr M N K problems in_bits acc(0=f32,1=f16,2=s32) file_prefix\n# tags:");
  for (const char* t : kTagNames) std::fprintf(manifest, " %s", t);
  std::fprintf(manifest, "\n");
  // The mma.sync kinds first: a fault in the wgmma kernel (a sticky CUDA error) must not cost
  // their recordings. `mma_probe OUTDIR wgmma` runs only the wgmma part (for compute-sanitizer).
  const bool wgmma_only = argc > 2 && std::string(argv[2]) == "wgmma";
  int wgmma_variant = -1;
  for (int kind = 0; kind < kKindCount; ++kind) {
    const KindInfo& info = kKinds[kind];
    const bool wg = kind == kWgmmaE4m3 || kind == kWgmmaE5m2;
    if (wgmma_only && !wg) continue;
    if (wg && wgmma_variant < 0) {
      for (int variant = 0; variant < 2 && wgmma_variant < 0; ++variant) {
        Problems v = make_problems(kWgmmaE4m3, 32, 0, 99);
        run(v, variant);
        bool ok = true;
        for (int p = 0; p < v.count; ++p) ok = ok && (v.tag[p] != 0 || small_integers_exact(v, p));
        std::printf("wgmma descriptor variant %d: small-integer validation %s\n", variant, ok ? "passed" : "FAILED");
        std::fflush(stdout);
        if (ok) wgmma_variant = variant;
      }
      if (wgmma_variant < 0) {
        std::printf("%-28s skipped: no descriptor variant validated\n", info.name);
        continue;
      }
    }
    for (int steps : {1, 8}) {
      const int K = info.k * steps;
      Problems P = make_problems(kind, K, steps == 1 ? (wg ? 150 : 600) : (wg ? 24 : 96), 1000u + 17u * kind + steps);
      run(P, wgmma_variant);
      int bad = 0;
      for (int p = 0; p < P.count; ++p) {
        if (P.tag[p] == 0 && !small_integers_exact(P, p)) ++bad;
      }
      const std::string prefix = std::string(info.name) + "_k" + std::to_string(K);
      attnsim::probe::write_bin(dir + "/" + prefix + ".a.bin", P.a.data(), P.a.size());
      attnsim::probe::write_bin(dir + "/" + prefix + ".b.bin", P.b.data(), P.b.size());
      attnsim::probe::write_bin(dir + "/" + prefix + ".c.bin", P.c.data(), P.c.size() * 4);
      attnsim::probe::write_bin(dir + "/" + prefix + ".d.bin", P.d.data(), P.d.size() * 4);
      attnsim::probe::write_bin(dir + "/" + prefix + ".tag.bin", P.tag.data(), P.tag.size() * 4);
      std::fprintf(manifest, "%d %s %d %d %d %d %d %d %s\n", kind, info.name, info.m, info.n, K, P.count,
                   info.in_bits, info.acc, prefix.c_str());
      std::fflush(manifest);
      std::printf("%-28s K=%-4d %5d problems, small-integer layout check: %s\n", info.name, K, P.count,
                  bad ? "FAILED" : "ok");
      std::fflush(stdout);
    }
  }
  std::fclose(manifest);
  return 0;
}
