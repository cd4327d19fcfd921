// SageAttention2 as the paper writes it (arXiv 2411.10958, Alg. 1), INT4 per-thread Q/K, as a CUDA
// kernel of our own: the public code never released the INT4 path. It is here to cross-validate
// `sage2:arch=paper,target=h100` (sim/sage) bit for bit on the H100 (tests/hw/sage_int4_test.cpp).
//
// Operand preparation (INT4 per-thread quantization of the smoothed Q and K, ΔS, FP8 V with its
// per-channel scales) comes from the host in operands.bin, written by attnsim's own preparation
// (tools/sage_int4_operands.cpp): what is checked here is the attention kernel, every stage the
// pipeline models after preparation:
//   S   = mma.sync.m16n8k64.s32.s4.s4 (Hopper has no INT4 tensor cores: ptxas emulates it with
//         exact integer arithmetic), cvt.rn.f32.s32, S·(s_q·s_k) + ΔS          (Alg. 1 line 5)
//   online softmax per row in FP32 IEEE ops: m, alpha = ex2.approx.ftz((m_old − m)·c),
//         p = ex2.approx.ftz(fma(S, c, −m·c)), l = l·alpha + p in key order         (lines 6-7)
//   P   = cvt.rn.satfinite.e4m3(p · 448)                                             (line 6)
//   O   = O·alpha + mma.sync.m16n8k32.f32.e4m3.e4m3 over the 64-key block from zero (two k32
//         steps), added with an FADD (the two-level accumulation, §3.4)
//   out = ((O / l) / 448) · v_scale, rounded to bf16 / fp16                          (line 8)
// Keys in natural order (no in-16 permutation), blocks of 64 keys ascending; causal masking is
// bottom-right aligned; the KV block count of a row is that of its 128-row tile (the pipeline's
// block_q), so a row visits the same fully masked blocks as the simulator.
// Every float operation is an explicit _rn intrinsic: nothing is left to FMA contraction.
//
// Build and run (on the GPU, from the repository root):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I.
//        cuda_check/sage/int4_attention.cu -o int4_attention   (one command line)
//   ./int4_attention operands.bin outputs.bin
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check/probe_util.cuh"

namespace {

// One case of operands.bin (little-endian): int32 header[10] = {B, HQ, HKV, LQ, LKV, D, causal,
// out_bf16, 0, 0}, float c (the exponent's sm_scale·log2 e), then
//   q      int8  [B][HQ][LQ][D]   INT4 values
//   qs     float [B][HQ][LQ]      each row's scale (its per-thread group's)
//   k      int8  [B][HKV][LKV][D]
//   ks     float [B][HKV][LKV]
//   ds     float [B][HQ][cdiv(LQ,128)][LKV]   ΔS of each 128-row Q block
//   v      uint8 [B][HKV][LKV][D] e4m3 codes
//   vs     float [B][HKV][D]      per-channel V scales
struct Case {
  int B, HQ, HKV, LQ, LKV, D, causal, out_bf16;
  float c;
  std::vector<std::int8_t> q, k;
  std::vector<float> qs, ks, ds, vs;
  std::vector<std::uint8_t> v;
};

constexpr int kBk = 64, kBq = 128, kRows = 16, kMaxD = 128;

__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ std::uint8_t e4m3_satfinite(float x) {
  std::uint16_t r;
  // cvt packs (a, b) as (high, low): the low byte is the second operand.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return std::uint8_t(r & 0xFF);
}

__device__ __forceinline__ std::uint16_t out_bits(float x, int bf16) {
  std::uint16_t r;
  if (bf16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

struct Dev {
  int B, HQ, HKV, LQ, LKV, D, DP, causal, out_bf16;
  float c;
  const std::int8_t *q, *k;
  const float *qs, *ks, *ds, *vs;
  const std::uint8_t* v;
  std::uint16_t* o;
};

// One warp: 16 query rows of one (batch, head), every KV block of their 128-row tile.
__global__ void int4_attention_kernel(Dev a) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, r0 = blockIdx.x * kRows;
  const int hk = h / (a.HQ / a.HKV);
  __shared__ std::int32_t s_acc[kRows][kBk];
  __shared__ float s_alpha[kRows];
  __shared__ std::uint8_t s_p[kRows][kBk];
  __shared__ float s_l[kRows];

  const std::int8_t* q = a.q + (std::size_t(b) * a.HQ + h) * a.LQ * a.D;
  const std::int8_t* k = a.k + (std::size_t(b) * a.HKV + hk) * a.LKV * a.D;
  const std::uint8_t* v = a.v + (std::size_t(b) * a.HKV + hk) * a.LKV * a.D;
  auto qv = [&](int r, int c) -> std::uint32_t {
    return (r0 + r < a.LQ && c < a.D) ? std::uint32_t(q[std::size_t(r0 + r) * a.D + c]) & 0xF : 0u;
  };

  // Per-row state, owned by lane r (< 16).
  float m = -INFINITY, l = 0.0f;
  float o[kMaxD / 8][4];
  for (int n = 0; n < kMaxD / 8; ++n)
    for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;

  int n_blocks = (a.LKV + kBk - 1) / kBk;
  if (a.causal) {
    const int limit = (r0 / kBq) * kBq + kBq + a.LKV - a.LQ;
    n_blocks = min(n_blocks, limit <= 0 ? 0 : (limit + kBk - 1) / kBk);
  }
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int j0 = nb * kBk;
    const int cols = min(kBk, a.LKV - j0);
    // 1. S = Q Kᵀ on the INT4 tensor-core path, 8 n-tiles of 8 keys, k steps of 64 channels.
    for (int nt = 0; nt < kBk / 8; ++nt) {
      std::uint32_t acc[4] = {0, 0, 0, 0};
      for (int k0 = 0; k0 < a.DP; k0 += 64) {
        std::uint32_t ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {  // A m16k64: 32 nibbles per lane (PTX ISA fragments)
          const int r = g + 8 * ((i >> 3) & 1), c = 8 * t + (i & 7) + 32 * (i >> 4);
          ar[i / 8] |= qv(r, k0 + c) << (4 * (i % 8));
        }
        for (int i = 0; i < 16; ++i) {  // B k64n8: key nt·8 + g
          const int kk = 8 * t + (i & 7) + 32 * (i >> 3), key = j0 + nt * 8 + g;
          const std::uint32_t x =
              (key < a.LKV && k0 + kk < a.D) ? std::uint32_t(k[std::size_t(key) * a.D + k0 + kk]) & 0xF : 0u;
          br[i / 8] |= x << (4 * (i % 8));
        }
        asm volatile(
            "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
      }
      for (int i = 0; i < 4; ++i) s_acc[g + 8 * (i >> 1)][nt * 8 + 2 * t + (i & 1)] = std::int32_t(acc[i]);
    }
    __syncwarp();
    // 2. Online softmax, one lane per row, in key order.
    if (lane < kRows) {
      const int row = r0 + lane;
      const bool live = row < a.LQ;
      const float sq = live ? a.qs[(std::size_t(b) * a.HQ + h) * a.LQ + row] : 0.0f;
      const float* dsr = a.ds + ((std::size_t(b) * a.HQ + h) * ((a.LQ + kBq - 1) / kBq) +
                                 (live ? row : 0) / kBq) * a.LKV;
      float s[kBk];
      float bmax = -INFINITY;
      for (int j = 0; j < cols; ++j) {
        const int key = j0 + j;
        if (!live || (a.causal && key > row + a.LKV - a.LQ)) {
          s[j] = -INFINITY;
        } else {
          const float sk = a.ks[(std::size_t(b) * a.HKV + hk) * a.LKV + key];
          const float acc = __int2float_rn(s_acc[lane][j]);
          s[j] = __fadd_rn(__fmul_rn(acc, __fmul_rn(sq, sk)), dsr[key]);
        }
        bmax = s[j] > bmax ? s[j] : bmax;
      }
      const float m_old = m;
      m = bmax > m ? bmax : m;
      const float m_use = m == -INFINITY ? 0.0f : m;
      const float alpha = ex2_approx_ftz(__fmul_rn(__fsub_rn(m_old, m_use), a.c));
      const float ref = __fmul_rn(m_use, a.c);
      l = __fmul_rn(l, alpha);
      for (int j = 0; j < kBk; ++j) {
        std::uint8_t pb = 0;
        if (j < cols) {
          const float p = ex2_approx_ftz(__fmaf_rn(s[j], a.c, -ref));
          l = __fadd_rn(l, p);
          pb = e4m3_satfinite(__fmul_rn(p, 448.0f));
        }
        s_p[lane][j] = pb;
      }
      s_alpha[lane] = alpha;
      s_l[lane] = l;
    }
    __syncwarp();
    // 3. O = O·alpha + (P V over the block, two chained k32 FP8 mma.sync from zero).
    const float al0 = s_alpha[g], al1 = s_alpha[g + 8];
    for (int nt = 0; nt < a.DP / 8; ++nt) {
      float chunk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int k0 = 0; k0 < kBk; k0 += 32) {
        std::uint32_t ar[4] = {0, 0, 0, 0}, br[2] = {0, 0};
        for (int i = 0; i < 16; ++i) {  // A m16k32 e4m3
          const int r = g + 8 * ((i >> 2) & 1), c = 4 * t + (i & 3) + 16 * (i >> 3);
          ar[i / 4] |= std::uint32_t(s_p[r][k0 + c]) << (8 * (i % 4));
        }
        for (int i = 0; i < 8; ++i) {  // B k32n8: channel nt·8 + g
          const int kk = 4 * t + (i & 3) + 16 * (i >> 2), key = j0 + k0 + kk, ch = nt * 8 + g;
          const std::uint32_t x = (key < a.LKV && ch < a.D) ? v[std::size_t(key) * a.D + ch] : 0u;
          br[i / 4] |= x << (8 * (i % 4));
        }
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(chunk[0]), "+f"(chunk[1]), "+f"(chunk[2]), "+f"(chunk[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
      }
      for (int i = 0; i < 4; ++i)
        o[nt][i] = __fadd_rn(__fmul_rn(o[nt][i], i < 2 ? al0 : al1), chunk[i]);
    }
    __syncwarp();
  }
  // 4. Epilogue.
  const float l0 = s_l[g], l1 = s_l[g + 8];
  for (int nt = 0; nt < a.DP / 8; ++nt) {
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i >> 1), ch = nt * 8 + 2 * t + (i & 1), row = r0 + r;
      if (row >= a.LQ || ch >= a.D) continue;
      const float lr = i < 2 ? l0 : l1;
      float x = (lr == 0.0f || lr != lr) ? o[nt][i] : __fdiv_rn(o[nt][i], lr);
      x = __fdiv_rn(x, 448.0f);
      x = __fmul_rn(x, a.vs[(std::size_t(b) * a.HKV + hk) * a.D + ch]);
      a.o[((std::size_t(b) * a.HQ + h) * a.LQ + row) * a.D + ch] = out_bits(x, a.out_bf16);
    }
  }
}

template <class T>
void read_vec(std::FILE* f, std::vector<T>& v, std::size_t n) {
  v.resize(n);
  if (n && std::fread(v.data(), sizeof(T), n, f) != n) {
    std::fprintf(stderr, "operands: truncated\n");
    std::exit(1);
  }
}

using attnsim::probe::to_device;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s operands.bin outputs.bin\n", argv[0]);
    return 2;
  }
  std::FILE* f = std::fopen(argv[1], "rb");
  std::FILE* out = std::fopen(argv[2], "wb");
  if (!f || !out) {
    std::fprintf(stderr, "cannot open files\n");
    return 2;
  }
  int ncases = 0;
  while (true) {
    std::int32_t hdr[10];
    if (std::fread(hdr, 4, 10, f) != 10) break;
    Case c;
    c.B = hdr[0], c.HQ = hdr[1], c.HKV = hdr[2], c.LQ = hdr[3], c.LKV = hdr[4], c.D = hdr[5];
    c.causal = hdr[6], c.out_bf16 = hdr[7];
    if (std::fread(&c.c, 4, 1, f) != 1 || c.D > kMaxD) return 1;
    const std::size_t nq = std::size_t(c.B) * c.HQ * c.LQ, nk = std::size_t(c.B) * c.HKV * c.LKV;
    read_vec(f, c.q, nq * c.D);
    read_vec(f, c.qs, nq);
    read_vec(f, c.k, nk * c.D);
    read_vec(f, c.ks, nk);
    read_vec(f, c.ds, std::size_t(c.B) * c.HQ * ((c.LQ + kBq - 1) / kBq) * c.LKV);
    read_vec(f, c.v, nk * c.D);
    read_vec(f, c.vs, std::size_t(c.B) * c.HKV * c.D);
    Dev d{c.B, c.HQ, c.HKV, c.LQ, c.LKV, c.D, (c.D + 63) / 64 * 64, c.causal, c.out_bf16, c.c,
          to_device(c.q), to_device(c.k), to_device(c.qs), to_device(c.ks), to_device(c.ds),
          to_device(c.vs), to_device(c.v), nullptr};
    std::vector<std::uint16_t> o(nq * c.D, 0);
    d.o = to_device(o);
    int4_attention_kernel<<<dim3((c.LQ + kRows - 1) / kRows, c.HQ, c.B), 32>>>(d);
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
    ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
    ATTNSIM_CUDA_CHECK(cudaMemcpy(o.data(), d.o, o.size() * 2, cudaMemcpyDeviceToHost));
    std::fwrite(o.data(), 2, o.size(), out);
    ++ncases;
  }
  std::fclose(out);
  std::printf("int4_attention: %d cases\n", ncases);
  return 0;
}
