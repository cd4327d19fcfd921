// Probe: derives table models of rcp.approx.ftz.f32, ex2.approx.ftz.f32 and lg2.approx.ftz.f32
// (MUFU.RCP/EX2/LG2) from the H100 and checks each over all 2^32 inputs; checks
// div.approx.ftz.f32 = a * rcp.approx.ftz(b) on random pairs.
//
// Hypothesis under test: rcp.approx.ftz(s * 2^e * 1.m) = s * 2^-e * T[m] for normal inputs, with
// T[m] = rcp.approx.ftz(1.m) for the 2^23 mantissas m; ±0 and subnormals (flushed) give ±Inf,
// ±Inf give ±0, results below 2^-126 flush to ±0, NaN gives a NaN.
//
// lg2.approx.ftz.f32 (MUFU.LG2), hypothesis under test: for a positive normal x = 2^e * 1.m the
// unit forms the fixed-point sum e + L(m), L(m) with 36 fraction bits, and converts it to FP32 by
// truncating the magnitude; a negative sum is negated by bitwise complement (ones' complement, so
// its magnitude is |e| - L(m) - 2^-36 before truncation). T0[m] = lg2(1.m) is then L(m) truncated
// to FP32 (x = 1 exactly gives 0), and T1[m] = lg2(0.5 * 1.m) is recorded as the second table
// because e = -1 is the only exponent whose result keeps bits of L(m) below T0's last bit.
//
// Usage: special_probe OUTDIR. Writes OUTDIR/rcp_table.bin (2^23 uint32 results for x in [1, 2)),
// OUTDIR/{ex2,lg2,lg2_half}_table.bin, OUTDIR/lg2_mismatches.bin and OUTDIR/special_summary.txt.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_check/probe_util.cuh"

__device__ __forceinline__ float rcp_hw(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float ex2_hw(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float lg2_hw(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float div_hw(float a, float b) {
  float r;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__global__ void table_kernel(std::uint32_t* t) {
  const std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m < (1u << 23)) t[m] = __float_as_uint(rcp_hw(__uint_as_float(0x3F800000u | m)));
}

// ex2 table: T[f] = ex2.approx.ftz(f * 2^-23) for f in [0, 2^23); lg2 table: L[m] = lg2(1.m).
// t[f] = ex2(+f * 2^-23), t[2^23 + f] = ex2(-f * 2^-23).
__global__ void ex2_table_kernel(std::uint32_t* t) {
  const std::uint32_t f = blockIdx.x * blockDim.x + threadIdx.x;
  if (f < (1u << 23)) {
    t[f] = __float_as_uint(ex2_hw(float(f) * 0x1p-23f));
    t[(1u << 23) + f] = __float_as_uint(ex2_hw(-float(f) * 0x1p-23f));
  }
}
__global__ void lg2_table_kernel(std::uint32_t* t) {
  const std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m < (1u << 23)) t[m] = __float_as_uint(lg2_hw(__uint_as_float(0x3F800000u | m)));
}

// ex2 hypothesis (sign-magnitude fixed point): K = trunc(|x| * 2^23), a = K >> 23,
// f = K mod 2^23; result = 2^a * T+[f] for x >= 0 and 2^-a * T-[f] for x < 0, flushed below
// 2^-126, Inf above.
__device__ __forceinline__ std::uint32_t ex2_model(const std::uint32_t* t, std::uint32_t xb) {
  const float x = __uint_as_float(xb);
  if (x != x) return 0x7FFFFFFFu;
  if (x >= 128.0f) return 0x7F800000u;
  if (x <= -128.0f) return 0u;
  const bool neg = x < 0.0f;
  const long long K = (long long)trunc(fabs(double(x)) * 8388608.0);
  const long long a = K >> 23;
  const std::uint32_t f = std::uint32_t(K & 0x7FFFFF);
  const std::uint32_t tf = t[(neg ? (1u << 23) : 0u) + f];
  const long long e = (long long)((tf >> 23) & 0xFF) - 127 + (neg ? -a : a);
  if (e < -126) return 0u;
  if (e > 127) return 0x7F800000u;
  return (std::uint32_t(e + 127) << 23) | (tf & 0x7FFFFF);
}

// The candidate model, computed from the table.
__device__ __forceinline__ std::uint32_t rcp_model(const std::uint32_t* t, std::uint32_t x) {
  const std::uint32_t sign = x & 0x80000000u, e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0xFF) return m ? 0x7FFFFFFFu : sign;  // NaN -> canonical; Inf -> 0
  if (e == 0) return sign | 0x7F800000u;         // zero or flushed subnormal -> Inf
  const std::uint32_t tm = t[m];                 // result for 1.m, exponent field 126 or 127
  const int te = int((tm >> 23) & 0xFF) - 127;   // -1, or 0 when m == 0
  const int re = te - (int(e) - 127);            // result exponent
  if (re < -126) return sign;                    // subnormal result flushed to zero
  if (re > 127) return sign | 0x7F800000u;
  return sign | (std::uint32_t(re + 127) << 23) | (tm & 0x7FFFFF);
}

struct Counters2 {
  unsigned long long ex2_mismatches, ex2_recorded, lg2_rn_mismatches, lg2_rz_mismatches,
      lg2_recorded;
  std::uint32_t ex2_in[16], ex2_hw_r[16], ex2_model_r[16], lg2_in[16], lg2_hw_r[16], lg2_rn[16];
};

// lg2 hypotheses for normal x = 2^e * 1.m: fl(e + L[m]) with FP32 RN or RZ addition.
__global__ void check2_kernel(const std::uint32_t* te, const std::uint32_t* tl, std::uint32_t chunk,
                              Counters2* c) {
  const std::uint32_t base = chunk << 24;
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < (1u << 24);
       k += gridDim.x * blockDim.x) {
    const std::uint32_t x = base + k;
    const std::uint32_t h = __float_as_uint(ex2_hw(__uint_as_float(x)));
    const std::uint32_t m = ex2_model(te, x);
    if (h != m) {
      atomicAdd(&c->ex2_mismatches, 1ull);
      const unsigned long long s = atomicAdd(&c->ex2_recorded, 1ull);
      if (s < 16) {
        c->ex2_in[s] = x;
        c->ex2_hw_r[s] = h;
        c->ex2_model_r[s] = m;
      }
    }
    const std::uint32_t e = (x >> 23) & 0xFF;
    if ((x >> 31) == 0 && e > 0 && e < 255) {
      const float l = __uint_as_float(tl[x & 0x7FFFFF]);
      const float ef = float(int(e) - 127);
      const std::uint32_t rn = __float_as_uint(__fadd_rn(ef, l)),
                          rz = __float_as_uint(__fadd_rz(ef, l));
      const std::uint32_t hl = __float_as_uint(lg2_hw(__uint_as_float(x)));
      if (hl != rn) {
        atomicAdd(&c->lg2_rn_mismatches, 1ull);
        const unsigned long long s = atomicAdd(&c->lg2_recorded, 1ull);
        if (s < 16) {
          c->lg2_in[s] = x;
          c->lg2_hw_r[s] = hl;
          c->lg2_rn[s] = rn;
        }
      }
      if (hl != rz) atomicAdd(&c->lg2_rz_mismatches, 1ull);
    }
  }
}

// The second lg2 table, e = -1: T1[m] = lg2(0.5 * 1.m) (T0 is lg2_table_kernel's).
__global__ void lg2_half_table_kernel(std::uint32_t* t) {
  const std::uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m < (1u << 23)) t[m] = __float_as_uint(lg2_hw(__uint_as_float(0x3F000000u | m)));
}

// The lg2 hypothesis (see the top of the file), from the two recorded tables.
__device__ __forceinline__ std::uint32_t lg2_model(const std::uint32_t* t0, const std::uint32_t* t1,
                                                   std::uint32_t x) {
  const std::uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0) return 0xFF800000u;                       // ±0 and flushed subnormals -> -Inf
  if (x >> 31) return 0x7FFFFFFFu;                      // negative (and -Inf, negative NaN) -> NaN
  if (e == 0xFF) return m ? 0x7FFFFFFFu : 0x7F800000u;  // NaN -> canonical NaN; +Inf -> +Inf
  if (e == 127) return t0[m];
  if (e == 126) return t1[m];
  // L(m) in units of 2^-36 from T0 (every entry is a multiple of 2^-36).
  const std::uint32_t lb = t0[m];
  const int le = int((lb >> 23) & 0xFF);
  const unsigned long long lsig = lb ? ((lb & 0x7FFFFFull) | 0x800000ull) : 0ull;
  const unsigned long long li = le >= 114 ? (lsig << (le - 114)) : (lsig >> (114 - le));
  const int ue = int(e) - 127;
  const bool neg = ue < 0;
  const unsigned long long mag =
      neg ? ((unsigned long long)(-ue) << 36) - li - 1ull : ((unsigned long long)ue << 36) + li;
  const int nb = 64 - __clzll((long long)mag);  // mag >= 1 here
  const unsigned long long sig = nb > 24 ? (mag >> (nb - 24)) : (mag << (24 - nb));
  const std::uint32_t be = std::uint32_t(nb - 1 - 36 + 127);
  return (neg ? 0x80000000u : 0u) | (be << 23) | std::uint32_t(sig & 0x7FFFFFull);
}

struct Counters3 {
  unsigned long long mismatches, recorded, by_class[5];
  std::uint32_t in[4096], hw[4096], model[4096];
};

// Mismatch class: 0 e >= 1, 1 e = 0, 2 e = -1, 3 e <= -2, 4 zero/subnormal/negative/Inf/NaN.
__global__ void check3_kernel(const std::uint32_t* t0, const std::uint32_t* t1, std::uint32_t chunk,
                              Counters3* c) {
  const std::uint32_t base = chunk << 24;
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < (1u << 24);
       k += gridDim.x * blockDim.x) {
    const std::uint32_t x = base + k;
    const std::uint32_t h = __float_as_uint(lg2_hw(__uint_as_float(x)));
    const std::uint32_t md = lg2_model(t0, t1, x);
    if (h != md) {
      atomicAdd(&c->mismatches, 1ull);
      const std::uint32_t e = (x >> 23) & 0xFF;
      const int cls = ((x >> 31) || e == 0 || e == 255)
                          ? 4
                          : (e > 127 ? 0 : (e == 127 ? 1 : (e == 126 ? 2 : 3)));
      atomicAdd(&c->by_class[cls], 1ull);
      const unsigned long long s = atomicAdd(&c->recorded, 1ull);
      if (s < 4096) {
        c->in[s] = x;
        c->hw[s] = h;
        c->model[s] = md;
      }
    }
  }
}

struct Counters {
  unsigned long long mismatches, nan_results, recorded;
  std::uint32_t first_in[32], first_hw[32], first_model[32];
  unsigned long long div_checked, div_mismatches;
  std::uint32_t div_a[8], div_b[8], div_hw_r[8], div_model_r[8];
};

__global__ void check_kernel(const std::uint32_t* t, std::uint32_t chunk, Counters* c) {
  const std::uint32_t base = chunk << 24;
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < (1u << 24);
       k += gridDim.x * blockDim.x) {
    const std::uint32_t x = base + k;
    const std::uint32_t h = __float_as_uint(rcp_hw(__uint_as_float(x)));
    const std::uint32_t m = rcp_model(t, x);
    const bool hnan = (h & 0x7FFFFFFFu) > 0x7F800000u;
    if (hnan) atomicAdd(&c->nan_results, 1ull);
    if (h != m) {
      atomicAdd(&c->mismatches, 1ull);
      const unsigned long long s = atomicAdd(&c->recorded, 1ull);
      if (s < 32) {
        c->first_in[s] = x;
        c->first_hw[s] = h;
        c->first_model[s] = m;
      }
    }
  }
}

__device__ __forceinline__ std::uint32_t mix32(std::uint32_t z) {
  z ^= z >> 16;
  z *= 0x7feb352dU;
  z ^= z >> 15;
  z *= 0x846ca68bU;
  z ^= z >> 16;
  return z;
}

// div.approx.ftz.f32 against a * rcp.approx.ftz(b) (FMUL.FTZ, round to nearest).
__global__ void div_kernel(std::uint32_t seed, Counters* c) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint32_t ab = mix32(i * 2u + seed), bb = mix32(i * 2u + 1u + seed * 7919u);
  // Keep exponents moderate so both paths stay finite and normal most of the time.
  const float a = __uint_as_float((ab & 0x807FFFFFu) | ((96u + (ab >> 27)) << 23));
  const float b = __uint_as_float((bb & 0x807FFFFFu) | ((96u + (bb >> 27)) << 23));
  const float hw = div_hw(a, b);
  const float model = __fmul_rn(a, rcp_hw(b));
  atomicAdd(&c->div_checked, 1ull);
  if (__float_as_uint(hw) != __float_as_uint(model)) {
    const unsigned long long s = atomicAdd(&c->div_mismatches, 1ull);
    if (s < 8) {
      c->div_a[s] = __float_as_uint(a);
      c->div_b[s] = __float_as_uint(b);
      c->div_hw_r[s] = __float_as_uint(hw);
      c->div_model_r[s] = __float_as_uint(model);
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: special_probe OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::uint32_t* d_t = nullptr;
  Counters* d_c = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_t, sizeof(std::uint32_t) << 23));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_c, sizeof(Counters)));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_c, 0, sizeof(Counters)));
  table_kernel<<<(1u << 23) / 256, 256>>>(d_t);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  for (std::uint32_t chunk = 0; chunk < 256; ++chunk) check_kernel<<<1024, 256>>>(d_t, chunk, d_c);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  for (std::uint32_t s = 0; s < 64; ++s) div_kernel<<<(1u << 22) / 256, 256>>>(s, d_c);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::uint32_t *d_te = nullptr, *d_tl = nullptr;
  Counters2* d_c2 = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_te, sizeof(std::uint32_t) << 24));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_tl, sizeof(std::uint32_t) << 23));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_c2, sizeof(Counters2)));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_c2, 0, sizeof(Counters2)));
  ex2_table_kernel<<<(1u << 23) / 256, 256>>>(d_te);
  lg2_table_kernel<<<(1u << 23) / 256, 256>>>(d_tl);
  for (std::uint32_t chunk = 0; chunk < 256; ++chunk)
    check2_kernel<<<1024, 256>>>(d_te, d_tl, chunk, d_c2);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  Counters2 c2{};
  ATTNSIM_CUDA_CHECK(cudaMemcpy(&c2, d_c2, sizeof(Counters2), cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> te(1u << 24), tl(1u << 23);
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(te.data(), d_te, sizeof(std::uint32_t) << 24, cudaMemcpyDeviceToHost));
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(tl.data(), d_tl, sizeof(std::uint32_t) << 23, cudaMemcpyDeviceToHost));
  attnsim::probe::write_bin(dir + "/ex2_table.bin", te.data(), te.size() * 4);
  attnsim::probe::write_bin(dir + "/lg2_table.bin", tl.data(), tl.size() * 4);
  std::printf("ex2.approx.ftz.f32 fixed-point table model over all 2^32 inputs: %llu mismatches\n",
              c2.ex2_mismatches);
  for (unsigned k = 0; k < c2.ex2_recorded && k < 16; ++k)
    std::printf("  input 0x%08x: hw 0x%08x model 0x%08x\n", c2.ex2_in[k], c2.ex2_hw_r[k],
                c2.ex2_model_r[k]);
  std::printf(
      "lg2.approx.ftz.f32 = e + L[m] over positive normals: %llu mismatches with FADD.RN, %llu "
      "with RZ\n",
      c2.lg2_rn_mismatches, c2.lg2_rz_mismatches);
  for (unsigned k = 0; k < c2.lg2_recorded && k < 16; ++k)
    std::printf("  input 0x%08x: hw 0x%08x rn-model 0x%08x\n", c2.lg2_in[k], c2.lg2_hw_r[k],
                c2.lg2_rn[k]);

  // lg2.approx.ftz: record T1 (T0 is recorded above), check the fixed-point model over all 2^32
  // inputs, keep the first 4096 mismatches (input, hw, model) in lg2_mismatches.bin.
  std::uint32_t* d_t1 = nullptr;
  Counters3* d_c3 = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_t1, sizeof(std::uint32_t) << 23));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_c3, sizeof(Counters3)));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_c3, 0, sizeof(Counters3)));
  lg2_half_table_kernel<<<(1u << 23) / 256, 256>>>(d_t1);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  for (std::uint32_t chunk = 0; chunk < 256; ++chunk)
    check3_kernel<<<1024, 256>>>(d_tl, d_t1, chunk, d_c3);
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  Counters3 c3{};
  ATTNSIM_CUDA_CHECK(cudaMemcpy(&c3, d_c3, sizeof(Counters3), cudaMemcpyDeviceToHost));
  std::vector<std::uint32_t> t1(1u << 23);
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(t1.data(), d_t1, sizeof(std::uint32_t) << 23, cudaMemcpyDeviceToHost));
  attnsim::probe::write_bin(dir + "/lg2_half_table.bin", t1.data(), t1.size() * 4);
  const unsigned long long nrec = c3.recorded < 4096 ? c3.recorded : 4096;
  std::vector<std::uint32_t> mm(3 * nrec);
  for (unsigned long long k = 0; k < nrec; ++k) {
    mm[3 * k] = c3.in[k];
    mm[3 * k + 1] = c3.hw[k];
    mm[3 * k + 2] = c3.model[k];
  }
  attnsim::probe::write_bin(dir + "/lg2_mismatches.bin", mm.data(), mm.size() * 4);
  std::printf(
      "lg2.approx.ftz.f32 fixed-point model (e + L, 36 fraction bits, ones' complement for e < 0, "
      "magnitude truncated; tables T0 = lg2(1.m), T1 = lg2(0.5*1.m)) "
      "over all 2^32 inputs: %llu mismatches "
      "(e>=1: %llu, e=0: %llu, e=-1: %llu, e<=-2: %llu, special: %llu)\n",
      c3.mismatches, c3.by_class[0], c3.by_class[1], c3.by_class[2], c3.by_class[3],
      c3.by_class[4]);
  for (unsigned k = 0; k < nrec && k < 16; ++k)
    std::printf("  input 0x%08x: hw 0x%08x model 0x%08x\n", c3.in[k], c3.hw[k], c3.model[k]);
  std::vector<std::uint32_t> t(1u << 23);
  Counters c{};
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(t.data(), d_t, sizeof(std::uint32_t) << 23, cudaMemcpyDeviceToHost));
  ATTNSIM_CUDA_CHECK(cudaMemcpy(&c, d_c, sizeof(Counters), cudaMemcpyDeviceToHost));
  attnsim::probe::write_bin(dir + "/rcp_table.bin", t.data(), t.size() * 4);
  FILE* s = std::fopen((dir + "/special_summary.txt").c_str(), "w");
  if (!s) return 1;
  for (FILE* o : {stdout, s}) {
    std::fprintf(
        o,
        "rcp.approx.ftz.f32 table model over all 2^32 inputs: %llu mismatches, %llu NaN results\n",
        c.mismatches, c.nan_results);
    for (unsigned k = 0; k < c.recorded && k < 32; ++k) {
      std::fprintf(o, "  input 0x%08x: hw 0x%08x model 0x%08x\n", c.first_in[k], c.first_hw[k],
                   c.first_model[k]);
    }
    std::fprintf(o,
                 "div.approx.ftz.f32 vs a * rcp.approx.ftz(b): %llu of %llu random pairs differ\n",
                 c.div_mismatches, c.div_checked);
    for (unsigned k = 0; k < c.div_mismatches && k < 8; ++k) {
      std::fprintf(o, "  a 0x%08x b 0x%08x: hw 0x%08x model 0x%08x\n", c.div_a[k], c.div_b[k],
                   c.div_hw_r[k], c.div_model_r[k]);
    }
  }
  std::fclose(s);
  return 0;
}
