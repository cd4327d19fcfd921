// Our CUDA kernels of TurboAttention's arithmetic as cuda_check/turbo/README.md fixes it
// (the contract sim/turbo reproduces): FlashQ stage-1 INT8 quantization, the prefill (Algorithm 1:
// INT8 mma.sync m16n8k32 for Q·Kᵀ and P̃·V, SAS in fp16 mul+add, one P scale per 64x64 tile), BPQ
// stage-2 compression, the buffer and teacher-forced decode steps (Algorithm 2). Plus a plain FP16
// FlashAttention-2-style prefill (mma.sync m16n8k16, exp2f) and a plain FP16 decode (exp2f online
// softmax, FP32 accumulation, one CTA per (b, q head) or split-KV) to time against.
// Build: nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -fmad=false turbo_attention.cu
// Usage: turbo_attention record IN.bin OUT.bin | turbo_attention time CSV (prefill rows, then one
// decode step at B 1/16 x 8 heads x L 4096/16384 x d 128)
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

constexpr int BR = 64, BC = 64;

// ---- SAS (fp16 mul+add, n_r = 6) ----
__device__ __forceinline__ float sas(float x) {
  const __half h = __float2half_rn(x);
  const __half t = __hneg(h);
  const float tf = __half2float(t);
  if (!(tf <= 6.0f)) return 0.0f;
  const int n = tf < 0.0f ? 0 : int(tf);  // floor for t >= 0
  const __half f = __hsub(t, __int2half_rn(n));  // exact
  const __half c3 = __ushort_as_half(0xae8f), c2 = __ushort_as_half(0x3767),
               c1 = __ushort_as_half(0xbbf0), c0 = __ushort_as_half(0x3bff);
  __half p = c3;
  p = __hadd(__hmul(p, f), c2);
  p = __hadd(__hmul(p, f), c1);
  p = __hadd(__hmul(p, f), c0);
  const unsigned short T[7] = {0x3c00, 0x35e3, 0x3055, 0x2a5f, 0x24b0, 0x1ee6, 0x1914};
  const __half y = __hmul(__ushort_as_half(T[n]), p);
  return __half2float(y);
}

// q = rint(x / s), 0/0 -> 0 (s == 0 gives 0 for every x in a block whose amax is 0)
__device__ __forceinline__ int q8_of(float x, float s) {
  if (s == 0.0f) return 0;
  const float r = __fdiv_rn(x, s);
  return r != r ? 0 : __float2int_rn(r);
}

// ---- stage 1: one CTA per (row-group, block of 64 rows) ----
// x: [groups][n][d] fp16; q: [groups][n][d] int8; scale: [groups][ceil(n_used/64)]
__global__ void stage1_kernel(const __half* x, int n, int n_used, int d, int8_t* q, float* scale) {
  const int g = blockIdx.y, blk = blockIdx.x;
  const int r0 = blk * BC, rows = min(BC, n_used - r0);
  const __half* src = x + ((size_t)g * n + r0) * d;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < rows * d; i += blockDim.x) amax = fmaxf(amax, fabsf(__half2float(src[i])));
  __shared__ float red[32];
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float a = 0;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) a = fmaxf(a, red[w]);
    red[0] = a;
  }
  __syncthreads();
  const float s = __fdiv_rn(red[0], 119.0f);
  if (threadIdx.x == 0) scale[(size_t)g * gridDim.x + blk] = s;
  int8_t* dst = q + ((size_t)g * n + r0) * d;
  for (int i = threadIdx.x; i < rows * d; i += blockDim.x) dst[i] = (int8_t)q8_of(__half2float(src[i]), s);
}

// ---- mma helpers ----
__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(float* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- prefill: one CTA (4 warps x 16 rows) per (b, q head, 64-query tile) ----
// q8: [B*Hq][N][d], k8/v8: [B*Hkv][N][d]; sq: [B*Hq][ceil(N/64)], sk/sv: [B*Hkv][ceil(N/64)]
// o: [B*Hq][N][d] fp32. Queries and keys 0..n-1 (len_q = len_kv = n).
template <int D>
__global__ void __launch_bounds__(128) prefill_kernel(const int8_t* q8, const int8_t* k8, const int8_t* v8,
                                                      const float* sq, const float* sk, const float* sv, int Hq,
                                                      int group, int N, int n, int causal, float sm, float* o) {
  __shared__ __align__(16) int8_t Qs[BR][D + 16];
  __shared__ __align__(16) int8_t Ks[BC][D + 16];
  __shared__ __align__(16) int8_t Vt[D][BC + 16];
  __shared__ __align__(16) int8_t Ps[BR][BC + 16];
  __shared__ float wmax[4];
  const int tile = blockIdx.x, bh = blockIdx.y, b = bh / Hq, hq = bh % Hq;
  const int Hkv = Hq / group, bkv = b * Hkv + hq / group;
  const int nqb = (N + BR - 1) / BR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = tile * BR;
  const int8_t* qsrc = q8 + (size_t)bh * N * D;
  const int8_t* ksrc = k8 + (size_t)bkv * N * D;
  const int8_t* vsrc = v8 + (size_t)bkv * N * D;
  for (int i = threadIdx.x; i < BR * D; i += 128) {
    const int r = i / D, c = i % D;
    Qs[r][c] = (q0 + r < n) ? qsrc[(size_t)(q0 + r) * D + c] : 0;
  }
  const float sQ = sq[(size_t)bh * nqb + tile];
  const int kv_end = causal ? min(n, q0 + BR) : n;
  const int nkb = (kv_end + BC - 1) / BC;
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float O[2][D / 8][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < D / 8; ++j) O[r][j][0] = O[r][j][1] = 0.0f;

  for (int jb = 0; jb < nkb; ++jb) {
    const int k0 = jb * BC;
    __syncthreads();
    for (int i = threadIdx.x; i < BC * D; i += 128) {
      const int r = i / D, c = i % D;
      const bool ok = k0 + r < n;
      Ks[r][c] = ok ? ksrc[(size_t)(k0 + r) * D + c] : 0;
      Vt[c][r] = ok ? vsrc[(size_t)(k0 + r) * D + c] : 0;
    }
    __syncthreads();
    const float dq = __fmul_rn(sQ, sk[(size_t)bkv * nqb + jb]);
    // S = Q K^T
    int acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
#pragma unroll
    for (int kk = 0; kk < D; kk += 32) {
      unsigned a[4];
      a[0] = *(const unsigned*)&Qs[warp * 16 + g][kk + t * 4];
      a[1] = *(const unsigned*)&Qs[warp * 16 + g + 8][kk + t * 4];
      a[2] = *(const unsigned*)&Qs[warp * 16 + g][kk + 16 + t * 4];
      a[3] = *(const unsigned*)&Qs[warp * 16 + g + 8][kk + 16 + t * 4];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned bb[2];
        bb[0] = *(const unsigned*)&Ks[j * 8 + g][kk + t * 4];
        bb[1] = *(const unsigned*)&Ks[j * 8 + g][kk + 16 + t * 4];
        mma_s8(acc[j], a, bb);
      }
    }
    float S[2][16];  // [row][j*2+e]: column 8j+2t+e
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float bm = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = k0 + j * 8 + 2 * t + e;
          const bool vis = rows[r] < n && col < n && (!causal || col <= rows[r]);
          const float s = vis ? __fmul_rn(__int2float_rn(acc[j][r * 2 + e]), dq) : -INFINITY;
          S[r][j * 2 + e] = s;
          bm = fmaxf(bm, s);
        }
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
      const float m_old = m[r];
      m[r] = fmaxf(m_old, bm);
      const float m_use = m[r] == -INFINITY ? 0.0f : m[r];
      alpha[r] = sas(__fmul_rn(__fsub_rn(m_old, m_use), sm));
      l[r] = __fmul_rn(l[r], alpha[r]);
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        O[r][j][0] = __fmul_rn(O[r][j][0], alpha[r]);
        O[r][j][1] = __fmul_rn(O[r][j][1], alpha[r]);
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float p = sas(__fmul_rn(__fsub_rn(S[r][i], m_use), sm));
        S[r][i] = p;
        l[r] = __fadd_rn(l[r], p);
      }
    }
    // One P scale per tile.
    float pm = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = 0; i < 16; ++i) pm = fmaxf(pm, S[r][i]);
    for (int off = 16; off; off >>= 1) pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, off));
    if (lane == 0) wmax[warp] = pm;
    __syncthreads();
    const float amaxP = fmaxf(fmaxf(wmax[0], wmax[1]), fmaxf(wmax[2], wmax[3]));
    const float sP = __fdiv_rn(amaxP, 119.0f);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) Ps[warp * 16 + g + 8 * r][j * 8 + 2 * t + e] = (int8_t)q8_of(S[r][j * 2 + e], sP);
    __syncwarp();
    // chunk = P~ V (exact INT32)
    const float f = __fmul_rn(sP, sv[(size_t)bkv * nqb + jb]);
    int ch[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) ch[j][0] = ch[j][1] = ch[j][2] = ch[j][3] = 0;
#pragma unroll
    for (int kk = 0; kk < BC; kk += 32) {
      unsigned a[4];
      a[0] = *(const unsigned*)&Ps[warp * 16 + g][kk + t * 4];
      a[1] = *(const unsigned*)&Ps[warp * 16 + g + 8][kk + t * 4];
      a[2] = *(const unsigned*)&Ps[warp * 16 + g][kk + 16 + t * 4];
      a[3] = *(const unsigned*)&Ps[warp * 16 + g + 8][kk + 16 + t * 4];
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        unsigned bb[2];
        bb[0] = *(const unsigned*)&Vt[j * 8 + g][kk + t * 4];
        bb[1] = *(const unsigned*)&Vt[j * 8 + g][kk + 16 + t * 4];
        mma_s8(ch[j], a, bb);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          O[r][j][e] = __fadd_rn(O[r][j][e], __fmul_rn(__int2float_rn(ch[j][r * 2 + e]), f));
  }
  // epilogue: l = (l0 + l2) + (l1 + l3)
  const int qb = lane & ~3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l0 = __shfl_sync(0xffffffffu, l[r], qb + 0), l1 = __shfl_sync(0xffffffffu, l[r], qb + 1),
                l2 = __shfl_sync(0xffffffffu, l[r], qb + 2), l3 = __shfl_sync(0xffffffffu, l[r], qb + 3);
    const float ls = __fadd_rn(__fadd_rn(l0, l2), __fadd_rn(l1, l3));
    const float inv = (ls == 0.0f || ls != ls) ? 1.0f : __fdiv_rn(1.0f, ls);
    if (rows[r] < n) {
      float* dst = o + ((size_t)bh * N + rows[r]) * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        dst[j * 8 + 2 * t] = __fmul_rn(O[r][j][0], inv);
        dst[j * 8 + 2 * t + 1] = __fmul_rn(O[r][j][1], inv);
      }
    }
  }
}

// ---- BPQ stage 2 of one block: one CTA per (b*Hkv, block), thread per channel ----
// x: int8 [64][d] at src (row stride d); writes code [64][d], s, z [d]
__device__ void bpq_block(const int8_t* x, int d, int bits, uint8_t* code, int8_t* s_out, int8_t* z_out) {
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    int mn = 127, mx = -128;
    for (int r = 0; r < BC; ++r) {
      const int v = x[r * d + c];
      mn = min(mn, v);
      mx = max(mx, v);
    }
    const int levels = (1 << bits) - 1;
    const int s = max(1, (mx - mn + levels - 1) / levels);
    s_out[c] = (int8_t)s;
    z_out[c] = (int8_t)mn;
    for (int r = 0; r < BC; ++r) {
      const int num = x[r * d + c] - mn;
      int qq = num / s;
      const int rem = num - qq * s;
      if (2 * rem > s || (2 * rem == s && (qq & 1))) ++qq;
      code[r * d + c] = (uint8_t)qq;
    }
  }
}

struct CacheDev {
  uint8_t *k_code, *v_code;  // [BH][maxblk*64][d]
  int8_t *k_s, *k_z, *v_s, *v_z;  // [BH][maxblk][d]
  float *k_scale, *v_scale;       // [BH][maxblk]
  int8_t *buf_k, *buf_v;          // [BH][64][d]
  float *su_k, *su_v;             // [BH]
  const int* bits_k;              // [Hkv]
  const int* bits_v;
  int maxblk, Hkv, d;
};

// Compresses the prompt's complete block `blockIdx.x` (stage-1 values k8/v8) for bh = blockIdx.y.
__global__ void compress_prompt_kernel(CacheDev c, const int8_t* k8, const int8_t* v8, const float* sk,
                                       const float* sv, int N, int nsb) {
  const int blk = blockIdx.x, bh = blockIdx.y, h = bh % c.Hkv, d = c.d;
  const size_t tok = (size_t)blk * BC;
  bpq_block(k8 + ((size_t)bh * N + tok) * d, d, c.bits_k[h], c.k_code + ((size_t)bh * c.maxblk * BC + tok) * d,
            c.k_s + ((size_t)bh * c.maxblk + blk) * d, c.k_z + ((size_t)bh * c.maxblk + blk) * d);
  bpq_block(v8 + ((size_t)bh * N + tok) * d, d, c.bits_v[h], c.v_code + ((size_t)bh * c.maxblk * BC + tok) * d,
            c.v_s + ((size_t)bh * c.maxblk + blk) * d, c.v_z + ((size_t)bh * c.maxblk + blk) * d);
  if (threadIdx.x == 0) {
    c.k_scale[(size_t)bh * c.maxblk + blk] = sk[(size_t)bh * nsb + blk];
    c.v_scale[(size_t)bh * c.maxblk + blk] = sv[(size_t)bh * nsb + blk];
  }
}

// s_u = max over the prompt's stage-1 block scales; blockIdx.x = bh.
__global__ void su_kernel(CacheDev c, const float* sk, const float* sv, int nsb, int npb) {
  const int bh = blockIdx.x;
  if (threadIdx.x == 0) {
    float a = 0, b = 0;
    for (int i = 0; i < npb; ++i) {
      a = fmaxf(a, sk[(size_t)bh * nsb + i]);
      b = fmaxf(b, sv[(size_t)bh * nsb + i]);
    }
    c.su_k[bh] = a;
    c.su_v[bh] = b;
  }
}

__device__ __forceinline__ int8_t buf_q(float x, float su) {
  float r = __fdiv_rn(x, su);
  if (r != r) return 0;
  r = rintf(r);
  r = fminf(119.0f, fmaxf(-119.0f, r));
  return (int8_t)(int)r;
}

// Appends tokens [t_begin, t_end) of bh = blockIdx.x into the buffer (slot = token % 64).
__global__ void buffer_push_kernel(CacheDev c, const __half* k, const __half* v, int N, int t_begin, int t_end) {
  const int bh = blockIdx.x, d = c.d;
  const float suk = c.su_k[bh], suv = c.su_v[bh];
  for (int i = threadIdx.x; i < (t_end - t_begin) * d; i += blockDim.x) {
    const int tt = t_begin + i / d, ch = i % d;
    const size_t src = ((size_t)bh * N + tt) * d + ch;
    const size_t dst = ((size_t)bh * BC + (tt % BC)) * d + ch;
    c.buf_k[dst] = buf_q(__half2float(k[src]), suk);
    c.buf_v[dst] = buf_q(__half2float(v[src]), suv);
  }
}

// Flushes the (full) buffer of bh = blockIdx.x into block `blk` with stage-1 scale s_u.
__global__ void flush_kernel(CacheDev c, int blk) {
  const int bh = blockIdx.x, h = bh % c.Hkv, d = c.d;
  const size_t tok = (size_t)blk * BC;
  bpq_block(c.buf_k + (size_t)bh * BC * d, d, c.bits_k[h], c.k_code + ((size_t)bh * c.maxblk * BC + tok) * d,
            c.k_s + ((size_t)bh * c.maxblk + blk) * d, c.k_z + ((size_t)bh * c.maxblk + blk) * d);
  bpq_block(c.buf_v + (size_t)bh * BC * d, d, c.bits_v[h], c.v_code + ((size_t)bh * c.maxblk * BC + tok) * d,
            c.v_s + ((size_t)bh * c.maxblk + blk) * d, c.v_z + ((size_t)bh * c.maxblk + blk) * d);
  if (threadIdx.x == 0) {
    c.k_scale[(size_t)bh * c.maxblk + blk] = c.su_k[bh];
    c.v_scale[(size_t)bh * c.maxblk + blk] = c.su_v[bh];
  }
}

// One decode step: query t of (b, q head) = blockIdx.x, 128 threads (thread c owns channel c).
__global__ void __launch_bounds__(128) decode_kernel(CacheDev c, const __half* q, int Hq, int group, int N, int t,
                                                     float sm, float* o) {
  const int bhq = blockIdx.x, b = bhq / Hq, hq = bhq % Hq, bh = b * c.Hkv + hq / group, d = c.d;
  __shared__ int q8s[128];
  __shared__ float red[4];
  __shared__ float S[BC], P[BC];
  __shared__ int pq[BC];
  __shared__ float sh_alpha, sh_f;
  const int tid = threadIdx.x;
  const float x = tid < d ? __half2float(q[((size_t)bhq * N + t) * d + tid]) : 0.0f;
  float a = fabsf(x);
  for (int off = 16; off; off >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
  if ((tid & 31) == 0) red[tid >> 5] = a;
  __syncthreads();
  const float sq = __fdiv_rn(fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])), 119.0f);
  if (tid < d) q8s[tid] = q8_of(x, sq);
  float m = -INFINITY, l[4] = {0, 0, 0, 0}, O = 0.0f;
  const int kblk = t / BC;
  __syncthreads();
  for (int jb = 0; jb <= kblk; ++jb) {
    const bool buf = jb == kblk;
    const int cols = buf ? t - jb * BC + 1 : BC;
    const float ks = buf ? c.su_k[bh] : c.k_scale[(size_t)bh * c.maxblk + jb];
    const float vs = buf ? c.su_v[bh] : c.v_scale[(size_t)bh * c.maxblk + jb];
    const float dq = __fmul_rn(sq, ks);
    if (tid < cols) {
      int acc = 0;
      if (buf) {
        const int8_t* kr = c.buf_k + ((size_t)bh * BC + tid) * d;
        for (int ch = 0; ch < d; ++ch) acc += q8s[ch] * (int)kr[ch];
      } else {
        const uint8_t* cr = c.k_code + ((size_t)bh * c.maxblk * BC + (size_t)jb * BC + tid) * d;
        const int8_t* sr = c.k_s + ((size_t)bh * c.maxblk + jb) * d;
        const int8_t* zr = c.k_z + ((size_t)bh * c.maxblk + jb) * d;
        for (int ch = 0; ch < d; ++ch) acc += q8s[ch] * ((int)cr[ch] * (int)sr[ch] + (int)zr[ch]);
      }
      S[tid] = __fmul_rn(__int2float_rn(acc), dq);
    }
    __syncthreads();
    if (tid == 0) {
      float bm = -INFINITY;
      for (int j = 0; j < cols; ++j) bm = fmaxf(bm, S[j]);
      const float m_old = m;
      m = fmaxf(m_old, bm);
      const float m_use = m == -INFINITY ? 0.0f : m;
      const float al = sas(__fmul_rn(__fsub_rn(m_old, m_use), sm));
      for (int i = 0; i < 4; ++i) l[i] = __fmul_rn(l[i], al);
      float pm = 0.0f;
      for (int j = 0; j < cols; ++j) {
        const float p = sas(__fmul_rn(__fsub_rn(S[j], m_use), sm));
        P[j] = p;
        l[(j % 8) / 2] = __fadd_rn(l[(j % 8) / 2], p);
        pm = fmaxf(pm, p);
      }
      const float sP = __fdiv_rn(pm, 119.0f);
      for (int j = 0; j < cols; ++j) pq[j] = q8_of(P[j], sP);
      sh_alpha = al;
      sh_f = __fmul_rn(sP, vs);
    }
    __syncthreads();
    if (tid < d) {
      int chunk = 0;
      if (buf) {
        for (int j = 0; j < cols; ++j) chunk += pq[j] * (int)c.buf_v[((size_t)bh * BC + j) * d + tid];
      } else {
        const uint8_t* cr = c.v_code + ((size_t)bh * c.maxblk * BC + (size_t)jb * BC) * d;
        const int s = c.v_s[((size_t)bh * c.maxblk + jb) * d + tid], z = c.v_z[((size_t)bh * c.maxblk + jb) * d + tid];
        for (int j = 0; j < cols; ++j) chunk += pq[j] * ((int)cr[(size_t)j * d + tid] * s + z);
      }
      O = __fmul_rn(O, sh_alpha);
      O = __fadd_rn(O, __fmul_rn(__int2float_rn(chunk), sh_f));
    }
    __syncthreads();
  }
  __shared__ float inv_s;
  if (tid == 0) {
    const float ls = __fadd_rn(__fadd_rn(l[0], l[2]), __fadd_rn(l[1], l[3]));
    inv_s = (ls == 0.0f || ls != ls) ? 1.0f : __fdiv_rn(1.0f, ls);
  }
  __syncthreads();
  if (tid < d) o[((size_t)bhq * N + t) * d + tid] = __fmul_rn(O, inv_s);
}

// ---- plain FP16 FlashAttention-2-style prefill (timing reference) ----
// q/k/v fp16 [BH][N][D] (GQA group), o fp16. One CTA of 4 warps per 64-query tile.
template <int D>
__global__ void __launch_bounds__(128) fa2_fp16_kernel(const __half* q, const __half* k, const __half* v, int Hq,
                                                       int group, int N, int causal, float sl2, __half* o) {
  __shared__ __align__(16) __half Ks[BC][D + 8];
  __shared__ __align__(16) __half Vt[D][BC + 8];
  const int tile = blockIdx.x, bh = blockIdx.y, b = bh / Hq, hq = bh % Hq;
  const int Hkv = Hq / group, bkv = b * Hkv + hq / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = tile * BR;
  unsigned qa[D / 16][4];  // A fragments of the warp's 16 query rows, straight from global
  {
    const __half* r0 = q + ((size_t)bh * N + q0 + warp * 16 + g) * D;
    const __half* r1 = r0 + 8 * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = *(const unsigned*)&r0[kk * 16 + 2 * t];
      qa[kk][1] = *(const unsigned*)&r1[kk * 16 + 2 * t];
      qa[kk][2] = *(const unsigned*)&r0[kk * 16 + 8 + 2 * t];
      qa[kk][3] = *(const unsigned*)&r1[kk * 16 + 8 + 2 * t];
    }
  }
  const int kv_end = causal ? min(N, q0 + BR) : N;
  const int nkb = (kv_end + BC - 1) / BC;
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  float O[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) O[j][0] = O[j][1] = O[j][2] = O[j][3] = 0;
  for (int jb = 0; jb < nkb; ++jb) {
    const int k0 = jb * BC;
    __syncthreads();
    for (int i = threadIdx.x; i < BC * D / 8; i += 128) {
      const int r = i / (D / 8), c = (i % (D / 8)) * 8;
      *(uint4*)&Ks[r][c] = *(const uint4*)&k[((size_t)bkv * N + k0 + r) * D + c];
      uint4 vv = *(const uint4*)&v[((size_t)bkv * N + k0 + r) * D + c];
      const __half* hv = (const __half*)&vv;
#pragma unroll
      for (int e = 0; e < 8; ++e) Vt[c + e][r] = hv[e];
    }
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned bb[2];
        bb[0] = *(const unsigned*)&Ks[j * 8 + g][kk + 2 * t];
        bb[1] = *(const unsigned*)&Ks[j * 8 + g][kk + 8 + 2 * t];
        mma_f16(s[j], qa[kk / 16], bb);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float bm = m[r];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = k0 + j * 8 + 2 * t + e;
          if (causal && col > rows[r]) s[j][r * 2 + e] = -INFINITY;
          bm = fmaxf(bm, s[j][r * 2 + e]);
        }
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
      alpha[r] = exp2f((m[r] - bm) * sl2);
      m[r] = bm;
      float ls = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(s[j][r * 2 + e] * sl2 - bm * sl2);
          s[j][r * 2 + e] = p;
          ls += p;
        }
      l[r] = l[r] * alpha[r] + ls;
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      O[j][0] *= alpha[0];
      O[j][1] *= alpha[0];
      O[j][2] *= alpha[1];
      O[j][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      unsigned a[4];
      __half2 h;
      h = __floats2half2_rn(s[2 * kk][0], s[2 * kk][1]); a[0] = *(unsigned*)&h;
      h = __floats2half2_rn(s[2 * kk][2], s[2 * kk][3]); a[1] = *(unsigned*)&h;
      h = __floats2half2_rn(s[2 * kk + 1][0], s[2 * kk + 1][1]); a[2] = *(unsigned*)&h;
      h = __floats2half2_rn(s[2 * kk + 1][2], s[2 * kk + 1][3]); a[3] = *(unsigned*)&h;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        unsigned bb[2];
        bb[0] = *(const unsigned*)&Vt[j * 8 + g][kk * 16 + 2 * t];
        bb[1] = *(const unsigned*)&Vt[j * 8 + g][kk * 16 + 8 + 2 * t];
        mma_f16(O[j], a, bb);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float ls = l[r];
    ls += __shfl_xor_sync(0xffffffffu, ls, 1);
    ls += __shfl_xor_sync(0xffffffffu, ls, 2);
    const float inv = 1.0f / ls;
    __half* dst = o + ((size_t)bh * N + rows[r]) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *(__half2*)&dst[j * 8 + 2 * t] = __floats2half2_rn(O[j][r * 2] * inv, O[j][r * 2 + 1] * inv);
  }
}

// ---- plain FP16 decode (timing reference): one query token per (b, q head) over an FP16 K/V cache ----
// q fp16 [B*Hq][D], k/v fp16 [B*Hkv][n][D]. grid (splits, B*Hq), 128 threads: the CTA takes keys
// [split*chunk, min(n, (split+1)*chunk)); each warp runs its own exp2f online softmax over every 4th
// group of 8 keys (lane owns 4 channels; dot via xor shuffles), the 4 warps are merged in shared
// memory and the CTA writes a partial (m, l, O) to the workspace; fp16_decode_combine merges splits.
constexpr int DEC_U = 8;
__global__ void __launch_bounds__(128) fp16_decode_kernel(const __half* q, const __half* k, const __half* v, int Hq,
                                                          int group, int n, int chunk, float sl2, float* pm, float* pl,
                                                          float* po) {
  constexpr int D = 128;
  const int split = blockIdx.x, bhq = blockIdx.y, b = bhq / Hq, hq = bhq % Hq;
  const int Hkv = Hq / group, bkv = b * Hkv + hq / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j0 = split * chunk, j1 = min(n, j0 + chunk);
  float qf[4];
  {
    const uint2 qq = *(const uint2*)&q[(size_t)bhq * D + lane * 4];
    const __half2* h = (const __half2*)&qq;
    const float2 a = __half22float2(h[0]), c = __half22float2(h[1]);
    qf[0] = a.x * sl2; qf[1] = a.y * sl2; qf[2] = c.x * sl2; qf[3] = c.y * sl2;
  }
  const __half* kb = k + (size_t)bkv * n * D + lane * 4;
  const __half* vb = v + (size_t)bkv * n * D + lane * 4;
  float m = -INFINITY, l = 0.0f, O[4] = {0, 0, 0, 0};
  for (int jg = j0 + warp * DEC_U; jg < j1; jg += 4 * DEC_U) {
    uint2 kr[DEC_U], vr[DEC_U];
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {
      const int j = min(jg + u, j1 - 1);
      kr[u] = __ldg((const uint2*)(kb + (size_t)j * D));
      vr[u] = __ldg((const uint2*)(vb + (size_t)j * D));
    }
    float s[DEC_U];
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {
      const __half2* h = (const __half2*)&kr[u];
      const float2 a = __half22float2(h[0]), c = __half22float2(h[1]);
      s[u] = qf[0] * a.x + qf[1] * a.y + qf[2] * c.x + qf[3] * c.y;
    }
#pragma unroll
    for (int off = 16; off; off >>= 1)
#pragma unroll
      for (int u = 0; u < DEC_U; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);
    float bm = m;
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {
      if (jg + u >= j1) s[u] = -INFINITY;
      bm = fmaxf(bm, s[u]);
    }
    const float alpha = exp2f(m - bm);
    m = bm;
    l *= alpha;
#pragma unroll
    for (int e = 0; e < 4; ++e) O[e] *= alpha;
#pragma unroll
    for (int u = 0; u < DEC_U; ++u) {
      const float p = exp2f(s[u] - bm);
      l += p;
      const __half2* h = (const __half2*)&vr[u];
      const float2 a = __half22float2(h[0]), c = __half22float2(h[1]);
      O[0] += p * a.x; O[1] += p * a.y; O[2] += p * c.x; O[3] += p * c.y;
    }
  }
  __shared__ float wm[4], wl[4], wo[4][D];
  if (lane == 0) { wm[warp] = m; wl[warp] = l; }
#pragma unroll
  for (int e = 0; e < 4; ++e) wo[warp][lane * 4 + e] = O[e];
  __syncthreads();
  const int c = threadIdx.x;
  const float M = fmaxf(fmaxf(wm[0], wm[1]), fmaxf(wm[2], wm[3]));
  float L = 0.0f, acc = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float f = wm[w] == -INFINITY ? 0.0f : exp2f(wm[w] - M);
    L += wl[w] * f;
    acc += wo[w][c] * f;
  }
  const size_t ws = (size_t)bhq * gridDim.x + split;
  po[ws * D + c] = acc;
  if (c == 0) { pm[ws] = M; pl[ws] = L; }
}

// Merges the splits of bhq = blockIdx.x (128 threads, thread per channel); o fp16 [B*Hq][D].
__global__ void __launch_bounds__(128) fp16_decode_combine(const float* pm, const float* pl, const float* po,
                                                           int splits, __half* o) {
  constexpr int D = 128;
  const int bhq = blockIdx.x, c = threadIdx.x;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, pm[(size_t)bhq * splits + s]);
  float L = 0.0f, acc = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const size_t ws = (size_t)bhq * splits + s;
    const float f = pm[ws] == -INFINITY ? 0.0f : exp2f(pm[ws] - M);
    L += pl[ws] * f;
    acc += po[ws * D + c] * f;
  }
  o[(size_t)bhq * D + c] = __float2half_rn(acc / L);
}

// ---- host ----
template <class T>
T* dalloc(size_t n) {
  T* p;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  CK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}
template <class T>
std::vector<T> d2h(const T* p, size_t n) {
  std::vector<T> v(n);
  if (n) CK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

void launch_prefill(int D, dim3 grid, const int8_t* q8, const int8_t* k8, const int8_t* v8, const float* sq,
                    const float* sk, const float* sv, int Hq, int group, int N, int n, int causal, float sm, float* o) {
  if (D == 64)
    prefill_kernel<64><<<grid, 128>>>(q8, k8, v8, sq, sk, sv, Hq, group, N, n, causal, sm, o);
  else if (D == 128)
    prefill_kernel<128><<<grid, 128>>>(q8, k8, v8, sq, sk, sv, Hq, group, N, n, causal, sm, o);
  else {
    std::fprintf(stderr, "d must be 64 or 128\n");
    std::exit(1);
  }
  CK(cudaGetLastError());
}

int record(const char* in_path, const char* out_path) {
  FILE* f = std::fopen(in_path, "rb");
  if (!f) return std::perror(in_path), 1;
  int hdr[6];
  if (std::fread(hdr, 4, 6, f) != 6) return 1;
  const int B = hdr[0], Hq = hdr[1], Hkv = hdr[2], N = hdr[3], d = hdr[4], P = hdr[5], group = Hq / Hkv;
  std::vector<int> bk(Hkv), bv(Hkv);
  if (std::fread(bk.data(), 4, Hkv, f) != (size_t)Hkv || std::fread(bv.data(), 4, Hkv, f) != (size_t)Hkv) return 1;
  const size_t nq = (size_t)B * Hq * N * d, nk = (size_t)B * Hkv * N * d;
  std::vector<__half> hq(nq), hk(nk), hv(nk);
  if (std::fread(hq.data(), 2, nq, f) != nq || std::fread(hk.data(), 2, nk, f) != nk ||
      std::fread(hv.data(), 2, nk, f) != nk)
    return 1;
  std::fclose(f);
  const float sm = (float)(1.0 / std::sqrt((double)d));
  __half *q = dalloc<__half>(nq), *k = dalloc<__half>(nk), *v = dalloc<__half>(nk);
  CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  const int nsb = (N + BC - 1) / BC, npb = (P + BC - 1) / BC;
  int8_t *q8 = dalloc<int8_t>(nq), *k8 = dalloc<int8_t>(nk), *v8 = dalloc<int8_t>(nk);
  float *sq = dalloc<float>((size_t)B * Hq * nsb), *sk = dalloc<float>((size_t)B * Hkv * nsb),
        *sv = dalloc<float>((size_t)B * Hkv * nsb);
  float* o = dalloc<float>(nq);
  // stage 1 over the prompt (grid.x = npb blocks, scale row stride npb -> use nsb stride by padding)
  stage1_kernel<<<dim3(npb, B * Hq), 256>>>(q, N, P, d, q8, sq);
  stage1_kernel<<<dim3(npb, B * Hkv), 256>>>(k, N, P, d, k8, sk);
  stage1_kernel<<<dim3(npb, B * Hkv), 256>>>(v, N, P, d, v8, sv);
  CK(cudaGetLastError());
  // the stage-1 kernel writes scales with row stride gridDim.x = npb; the prefill reads stride nsb:
  // re-stride on the host.
  auto restride = [&](float* s, int rowsn) {
    std::vector<float> a = d2h(s, (size_t)rowsn * npb), b2((size_t)rowsn * nsb, 0.0f);
    for (int r = 0; r < rowsn; ++r)
      for (int i = 0; i < npb; ++i) b2[(size_t)r * nsb + i] = a[(size_t)r * npb + i];
    CK(cudaMemcpy(s, b2.data(), b2.size() * 4, cudaMemcpyHostToDevice));
  };
  CK(cudaDeviceSynchronize());
  restride(sq, B * Hq);
  restride(sk, B * Hkv);
  restride(sv, B * Hkv);
  launch_prefill(d, dim3(npb, B * Hq), q8, k8, v8, sq, sk, sv, Hq, group, N, P, 1, sm, o);
  // cache
  CacheDev c;
  const int BH = B * Hkv, maxblk = N / BC + 1;
  c.maxblk = maxblk;
  c.Hkv = Hkv;
  c.d = d;
  c.k_code = dalloc<uint8_t>((size_t)BH * maxblk * BC * d);
  c.v_code = dalloc<uint8_t>((size_t)BH * maxblk * BC * d);
  c.k_s = dalloc<int8_t>((size_t)BH * maxblk * d);
  c.k_z = dalloc<int8_t>((size_t)BH * maxblk * d);
  c.v_s = dalloc<int8_t>((size_t)BH * maxblk * d);
  c.v_z = dalloc<int8_t>((size_t)BH * maxblk * d);
  c.k_scale = dalloc<float>((size_t)BH * maxblk);
  c.v_scale = dalloc<float>((size_t)BH * maxblk);
  c.buf_k = dalloc<int8_t>((size_t)BH * BC * d);
  c.buf_v = dalloc<int8_t>((size_t)BH * BC * d);
  c.su_k = dalloc<float>(BH);
  c.su_v = dalloc<float>(BH);
  int *dbk = dalloc<int>(Hkv), *dbv = dalloc<int>(Hkv);
  CK(cudaMemcpy(dbk, bk.data(), 4 * Hkv, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbv, bv.data(), 4 * Hkv, cudaMemcpyHostToDevice));
  c.bits_k = dbk;
  c.bits_v = dbv;
  const int full = P / BC;
  if (full) compress_prompt_kernel<<<dim3(full, BH), 128>>>(c, k8, v8, sk, sv, N, nsb);
  su_kernel<<<BH, 32>>>(c, sk, sv, nsb, npb);
  if (P % BC) buffer_push_kernel<<<BH, 256>>>(c, k, v, N, full * BC, P);
  CK(cudaGetLastError());
  for (int t = P; t < N; ++t) {
    buffer_push_kernel<<<BH, 256>>>(c, k, v, N, t, t + 1);
    decode_kernel<<<B * Hq, 128>>>(c, q, Hq, group, N, t, sm, o);
    if ((t + 1) % BC == 0) flush_kernel<<<BH, 128>>>(c, t / BC);
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  // output
  FILE* w = std::fopen(out_path, "wb");
  std::vector<float> ho = d2h(o, nq);
  std::fwrite(ho.data(), 4, nq, w);
  const int nblk = N / BC, nbuf = N % BC;
  auto kc = d2h(c.k_code, (size_t)BH * maxblk * BC * d), vc = d2h(c.v_code, (size_t)BH * maxblk * BC * d);
  auto ks = d2h(c.k_s, (size_t)BH * maxblk * d), kz = d2h(c.k_z, (size_t)BH * maxblk * d),
       vs = d2h(c.v_s, (size_t)BH * maxblk * d), vz = d2h(c.v_z, (size_t)BH * maxblk * d);
  auto ksc = d2h(c.k_scale, (size_t)BH * maxblk), vsc = d2h(c.v_scale, (size_t)BH * maxblk);
  auto bfk = d2h(c.buf_k, (size_t)BH * BC * d), bfv = d2h(c.buf_v, (size_t)BH * BC * d);
  auto suk = d2h(c.su_k, BH), suv = d2h(c.su_v, BH);
  for (int bh = 0; bh < BH; ++bh) {
    const int hdr2[2] = {nblk, nbuf};
    std::fwrite(hdr2, 4, 2, w);
    std::fwrite(&kc[(size_t)bh * maxblk * BC * d], 1, (size_t)nblk * BC * d, w);
    std::fwrite(&vc[(size_t)bh * maxblk * BC * d], 1, (size_t)nblk * BC * d, w);
    for (auto* a : {&ks, &kz, &vs, &vz}) std::fwrite(&(*a)[(size_t)bh * maxblk * d], 1, (size_t)nblk * d, w);
    std::fwrite(&ksc[(size_t)bh * maxblk], 4, nblk, w);
    std::fwrite(&vsc[(size_t)bh * maxblk], 4, nblk, w);
    std::fwrite(&bfk[(size_t)bh * BC * d], 1, (size_t)nbuf * d, w);
    std::fwrite(&bfv[(size_t)bh * BC * d], 1, (size_t)nbuf * d, w);
    std::fwrite(&suk[bh], 4, 1, w);
    std::fwrite(&suv[bh], 4, 1, w);
  }
  std::fclose(w);
  std::printf("%s: B=%d Hq=%d Hkv=%d N=%d d=%d P=%d blocks=%d buffer=%d recorded\n", in_path, B, Hq, Hkv, N, d, P,
              nblk, nbuf);
  return 0;
}

__global__ void fill_kernel(__half* x, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2half_rn(((h & 0xffff) / 65536.0f - 0.5f) * 4.0f);
  }
}

// The median of `reps` timed launches of fn (cudaEvents around each), after `warmup` untimed ones.
template <class F>
float time_median_ms(F&& fn, int warmup, int reps, cudaEvent_t e0, cudaEvent_t e1) {
  for (int i = 0; i < warmup; ++i) fn();
  CK(cudaGetLastError());
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0));
    fn();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

__global__ void fill_bytes_kernel(uint8_t* x, size_t n, unsigned seed, unsigned mask, int bias) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = (uint8_t)((int)(h & mask) + bias);
  }
}
__global__ void fill_float_kernel(float* x, size_t n, float val) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = val;
}

// One decode step at context L (B x 8 q heads x 8 kv heads, d 128), median of 50 launches:
// turbo decode_kernel at t = L over a 4-bit cache of L/64 complete blocks (codes 0..15, one uint8 per
// code as the cache stores them) plus a buffer holding token t; our FP16 decode over L+1 FP16 tokens,
// one CTA per (b, q head) (splits = 1) and split-KV. GB/s from the bytes each kernel reads.
void timing_decode(FILE* w, int B, int L, cudaEvent_t e0, cudaEvent_t e1) {
  const int Hq = 8, Hkv = 8, D = 128, group = Hq / Hkv, t = L, N = L + 1, n = L + 1;
  const int BH = B * Hkv, maxblk = L / BC + 1;
  const float sm = (float)(1.0 / std::sqrt((double)D));
  CacheDev c;
  c.maxblk = maxblk;
  c.Hkv = Hkv;
  c.d = D;
  const size_t ncode = (size_t)BH * maxblk * BC * D, nsz = (size_t)BH * maxblk * D;
  c.k_code = dalloc<uint8_t>(ncode);
  c.v_code = dalloc<uint8_t>(ncode);
  c.k_s = dalloc<int8_t>(nsz);
  c.k_z = dalloc<int8_t>(nsz);
  c.v_s = dalloc<int8_t>(nsz);
  c.v_z = dalloc<int8_t>(nsz);
  c.k_scale = dalloc<float>((size_t)BH * maxblk);
  c.v_scale = dalloc<float>((size_t)BH * maxblk);
  c.buf_k = dalloc<int8_t>((size_t)BH * BC * D);
  c.buf_v = dalloc<int8_t>((size_t)BH * BC * D);
  c.su_k = dalloc<float>(BH);
  c.su_v = dalloc<float>(BH);
  c.bits_k = c.bits_v = nullptr;  // not read by decode_kernel
  fill_bytes_kernel<<<1024, 256>>>(c.k_code, ncode, 11, 15, 0);
  fill_bytes_kernel<<<1024, 256>>>(c.v_code, ncode, 12, 15, 0);
  fill_bytes_kernel<<<1024, 256>>>((uint8_t*)c.k_s, nsz, 13, 7, 1);
  fill_bytes_kernel<<<1024, 256>>>((uint8_t*)c.v_s, nsz, 14, 7, 1);
  fill_bytes_kernel<<<1024, 256>>>((uint8_t*)c.k_z, nsz, 15, 63, -60);
  fill_bytes_kernel<<<1024, 256>>>((uint8_t*)c.v_z, nsz, 16, 63, -60);
  fill_bytes_kernel<<<256, 256>>>((uint8_t*)c.buf_k, (size_t)BH * BC * D, 17, 127, -63);
  fill_bytes_kernel<<<256, 256>>>((uint8_t*)c.buf_v, (size_t)BH * BC * D, 18, 127, -63);
  fill_float_kernel<<<64, 256>>>(c.k_scale, (size_t)BH * maxblk, 0.02f);
  fill_float_kernel<<<64, 256>>>(c.v_scale, (size_t)BH * maxblk, 0.02f);
  fill_float_kernel<<<1, 256>>>(c.su_k, BH, 0.02f);
  fill_float_kernel<<<1, 256>>>(c.su_v, BH, 0.02f);
  // qd/od: one query row per bhq (FP16 kernel); qv/ov: the [B*Hq][N][D] layout decode_kernel indexes
  const size_t nqrow = (size_t)B * Hq * D;
  __half* qd = dalloc<__half>(nqrow);
  float* od = dalloc<float>(nqrow);
  fill_kernel<<<64, 256>>>(qd, nqrow, 4);
  const size_t nkv = (size_t)BH * n * D;
  __half *kh = dalloc<__half>(nkv), *vh = dalloc<__half>(nkv), *oh = dalloc<__half>(nqrow);
  fill_kernel<<<1024, 256>>>(kh, nkv, 5);
  fill_kernel<<<1024, 256>>>(vh, nkv, 6);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  __half* qv = dalloc<__half>((size_t)B * Hq * N * D);
  float* ov = dalloc<float>((size_t)B * Hq * N * D);
  for (int bhq = 0; bhq < B * Hq; ++bhq)
    CK(cudaMemcpy(qv + ((size_t)bhq * N + t) * D, qd + (size_t)bhq * D, D * 2, cudaMemcpyDeviceToDevice));
  const int sms = 132;
  const int max_splits = std::max(1, n / 256);
  const int splits = std::min(max_splits, std::max(1, (2 * sms + B * Hq - 1) / (B * Hq)));
  float *pm = dalloc<float>((size_t)B * Hq * splits), *pl = dalloc<float>((size_t)B * Hq * splits),
        *po = dalloc<float>((size_t)B * Hq * splits * D);
  const float sl2 = sm * 1.4426950408889634f;
  const double nblk = L / BC;
  const double turbo_bytes = 2.0 * BH * (nblk * BC * D + nblk * 2 * D + nblk * 4 + 1.0 * D) + 2.0 * B * Hq * D +
                             4.0 * B * Hq * D;
  const double fp16_bytes = 2.0 * 2.0 * BH * (double)n * D + 2.0 * B * Hq * D + 2.0 * B * Hq * D;
  const double flops = 4.0 * B * Hq * (double)n * D;
  auto run = [&](const char* name, double bytes, auto fn) {
    const float med = time_median_ms(fn, 5, 50, e0, e1);
    const double gbs = bytes / (med * 1e-3) / 1e9;
    std::fprintf(w, "%s,1,%d,%d,%d,%d,%.5f,%.4f,%.1f\n", name, B, Hq, L, D, med, flops / (med * 1e-3) / 1e12, gbs);
    std::printf("%s B=%d L=%d median %.4f ms  %.1f GB/s (%.1f MB read)\n", name, B, L, med, gbs, bytes / 1e6);
  };
  run("turbo_decode_step", turbo_bytes, [&] { decode_kernel<<<B * Hq, 128>>>(c, qv, Hq, group, N, t, sm, ov); });
  run("fp16_decode", fp16_bytes, [&] {
    fp16_decode_kernel<<<dim3(1, B * Hq), 128>>>(qd, kh, vh, Hq, group, n, n, sl2, pm, pl, po);
    fp16_decode_combine<<<B * Hq, 128>>>(pm, pl, po, 1, oh);
  });
  char nm[64];
  std::snprintf(nm, sizeof nm, "fp16_decode_splitkv%d", splits);
  const int chunk = (n + splits - 1) / splits;
  run(nm, fp16_bytes, [&] {
    fp16_decode_kernel<<<dim3(splits, B * Hq), 128>>>(qd, kh, vh, Hq, group, n, chunk, sl2, pm, pl, po);
    fp16_decode_combine<<<B * Hq, 128>>>(pm, pl, po, splits, oh);
  });
  // check the FP16 decode (split-KV output in oh) against a double reference for bhq = 0 and the last
  {
    std::vector<__half> hk = d2h(kh, nkv), hv = d2h(vh, nkv), hq = d2h(qd, nqrow), ho = d2h(oh, nqrow);
    double maxerr = 0;
    for (int bhq : {0, B * Hq - 1}) {
      const int bkv = (bhq / Hq) * Hkv + (bhq % Hq) / group;
      std::vector<double> s(n);
      double mx = -1e300;
      for (int j = 0; j < n; ++j) {
        double a = 0;
        for (int ch = 0; ch < D; ++ch)
          a += (double)__half2float(hq[(size_t)bhq * D + ch]) * __half2float(hk[((size_t)bkv * n + j) * D + ch]);
        s[j] = a * sm;
        mx = std::max(mx, s[j]);
      }
      double lsum = 0;
      for (int j = 0; j < n; ++j) lsum += (s[j] = std::exp(s[j] - mx));
      for (int ch = 0; ch < D; ++ch) {
        double a = 0;
        for (int j = 0; j < n; ++j) a += s[j] * __half2float(hv[((size_t)bkv * n + j) * D + ch]);
        maxerr = std::max(maxerr, std::fabs(a / lsum - (double)__half2float(ho[(size_t)bhq * D + ch])));
      }
    }
    std::printf("fp16_decode B=%d L=%d: max |err| vs double reference (2 heads) %.3g\n", B, L, maxerr);
  }
  for (void* p : {(void*)c.k_code, (void*)c.v_code, (void*)c.k_s, (void*)c.k_z, (void*)c.v_s, (void*)c.v_z,
                  (void*)c.k_scale, (void*)c.v_scale, (void*)c.buf_k, (void*)c.buf_v, (void*)c.su_k, (void*)c.su_v,
                  (void*)qd, (void*)od, (void*)kh, (void*)vh, (void*)oh, (void*)qv, (void*)ov, (void*)pm, (void*)pl,
                  (void*)po})
    CK(cudaFree(p));
}

int timing(const char* csv) {
  const int B = 1, H = 8, N = 4096, D = 128;
  const size_t n = (size_t)B * H * N * D;
  __half *q = dalloc<__half>(n), *k = dalloc<__half>(n), *v = dalloc<__half>(n), *oh = dalloc<__half>(n);
  fill_kernel<<<512, 256>>>(q, n, 1);
  fill_kernel<<<512, 256>>>(k, n, 2);
  fill_kernel<<<512, 256>>>(v, n, 3);
  const int nsb = N / BC;
  int8_t *q8 = dalloc<int8_t>(n), *k8 = dalloc<int8_t>(n), *v8 = dalloc<int8_t>(n);
  float *sq = dalloc<float>(B * H * nsb), *sk = dalloc<float>(B * H * nsb), *sv = dalloc<float>(B * H * nsb);
  float* o = dalloc<float>(n);
  const float sm = (float)(1.0 / std::sqrt((double)D));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  FILE* w = std::fopen(csv, "w");
  std::fprintf(w, "kernel,causal,batch,heads,n,d,median_ms,tflops,gb_per_s\n");
  for (int causal = 0; causal < 2; ++causal) {
    const double flops = 4.0 * B * H * (double)N * N * D * (causal ? 0.5 : 1.0);
    auto run = [&](const char* name, auto fn) {
      const float med = time_median_ms(fn, 3, 20, e0, e1);
      std::fprintf(w, "%s,%d,%d,%d,%d,%d,%.5f,%.2f,\n", name, causal, B, H, N, D, med, flops / (med * 1e-3) / 1e12);
      std::printf("%s causal=%d median %.4f ms  %.1f TFLOP/s\n", name, causal, med, flops / (med * 1e-3) / 1e12);
    };
    auto quant = [&] {
      stage1_kernel<<<dim3(nsb, B * H), 256>>>(q, N, N, D, q8, sq);
      stage1_kernel<<<dim3(nsb, B * H), 256>>>(k, N, N, D, k8, sk);
      stage1_kernel<<<dim3(nsb, B * H), 256>>>(v, N, N, D, v8, sv);
    };
    quant();
    auto pre = [&] { launch_prefill(D, dim3(N / BR, B * H), q8, k8, v8, sq, sk, sv, H, 1, N, N, causal, sm, o); };
    run("turbo_prefill_int8", pre);
    run("turbo_stage1_plus_prefill", [&] {
      quant();
      pre();
    });
    run("fa2_fp16", [&] {
      fa2_fp16_kernel<128><<<dim3(N / BR, B * H), 128>>>(q, k, v, H, 1, N, causal, sm * 1.4426950408889634f, oh);
    });
    CK(cudaGetLastError());
  }
  CK(cudaFree(q));
  CK(cudaFree(k));
  CK(cudaFree(v));
  CK(cudaFree(oh));
  CK(cudaFree(q8));
  CK(cudaFree(k8));
  CK(cudaFree(v8));
  CK(cudaFree(o));
  for (int Bd : {1, 16})
    for (int L : {4096, 16384}) timing_decode(w, Bd, L, e0, e1);
  std::fclose(w);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 4 && !std::strcmp(argv[1], "record")) return record(argv[2], argv[3]);
  if (argc >= 3 && !std::strcmp(argv[1], "time")) return timing(argv[2]);
  std::fprintf(stderr, "usage: %s record IN.bin OUT.bin | time CSV\n", argv[0]);
  return 2;
}
