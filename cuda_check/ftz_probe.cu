// Records what mul/fma/add.rn.f32 and their .ftz forms return on this GPU for operands whose exact
// result sits next to FLT_MIN (tests/hw/ftz_cases.hpp), to settle when .ftz flushes a result:
// before rounding, after rounding with an unbounded exponent (x86 MXCSR.FTZ) or after rounding to
// the subnormal grid. Writes per-chunk digests of every output and the full outputs of a sample.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_check/probe_util.cuh"
#include "numerics/digest.hpp"
#include "tests/hw/ftz_cases.hpp"

namespace {

using attnsim::ftzcase::kChunkBits;
using attnsim::ftzcase::kChunks;
using attnsim::ftzcase::kCount;
using attnsim::ftzcase::kOps;

// The recorded sample: the first 4096 cases of each group and every case whose hash has its low
// 9 bits zero (the CPU check regenerates the same set).
__host__ __device__ bool in_sample(std::uint32_t i) {
  using namespace attnsim::ftzcase;
  const std::uint32_t begins[4] = {kMulBegin, kFmaBegin, kAddBegin, kMixBegin};
  for (std::uint32_t g : begins)
    if (i >= g && i < g + 4096) return true;
  return (attnsim::splitmix64(0x5A3D1E0000000000ull ^ i) & 511u) == 0;
}

__device__ __forceinline__ float mul_rn_hw(float a, float b) {
  float r;
  asm volatile("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float mul_rn_ftz_hw(float a, float b) {
  float r;
  asm volatile("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float fma_rn_hw(float a, float b, float c) {
  float r;
  asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
}
__device__ __forceinline__ float fma_rn_ftz_hw(float a, float b, float c) {
  float r;
  asm volatile("fma.rn.ftz.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
}
__device__ __forceinline__ float add_rn_hw(float a, float b) {
  float r;
  asm volatile("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float add_rn_ftz_hw(float a, float b) {
  float r;
  asm volatile("add.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Round first, then flush: the model numerics/special had before this probe (for the log only).
__device__ __forceinline__ float flush_dev(float x) {
  return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x;
}

struct Counters {
  unsigned long long differs_from_round_first[3];  // mul, fma, add: .ftz != flush(.rn(flushed))
  unsigned long long sample_count;
};

__global__ void probe_kernel(std::uint32_t begin, unsigned long long* digests, Counters* cnt,
                             std::uint32_t* sample_index, std::uint32_t* sample_out,
                             std::uint32_t sample_capacity) {
  const std::uint32_t i = begin + blockIdx.x * blockDim.x + threadIdx.x;
  const attnsim::ftzcase::Triple t = attnsim::ftzcase::ftz_case(i);
  const float a = __uint_as_float(t.a), b = __uint_as_float(t.b), c = __uint_as_float(t.c);
  std::uint32_t out[kOps];
  out[0] = __float_as_uint(mul_rn_hw(a, b));
  out[1] = __float_as_uint(mul_rn_ftz_hw(a, b));
  out[2] = __float_as_uint(fma_rn_hw(a, b, c));
  out[3] = __float_as_uint(fma_rn_ftz_hw(a, b, c));
  out[4] = __float_as_uint(add_rn_hw(a, c));
  out[5] = __float_as_uint(add_rn_ftz_hw(a, c));
  const float fa = flush_dev(a), fb = flush_dev(b), fc = flush_dev(c);
  const std::uint32_t rf[3] = {__float_as_uint(flush_dev(mul_rn_hw(fa, fb))),
                               __float_as_uint(flush_dev(fma_rn_hw(fa, fb, fc))),
                               __float_as_uint(flush_dev(add_rn_hw(fa, fc)))};
  for (int k = 0; k < 3; ++k) {
    const bool both_nan = (rf[k] & 0x7FFFFFFFu) > 0x7F800000u &&
                          (out[2 * k + 1] & 0x7FFFFFFFu) > 0x7F800000u;
    if (rf[k] != out[2 * k + 1] && !both_nan) atomicAdd(&cnt->differs_from_round_first[k], 1ull);
  }
  // Per-chunk digests: a warp never straddles a chunk (2^20-aligned, blocks of 256).
  const std::uint32_t chunk = i >> kChunkBits;
  for (int k = 0; k < kOps; ++k) {
    unsigned long long d = attnsim::digest_term(i, out[k]);
    for (int s = 16; s > 0; s >>= 1) d += __shfl_xor_sync(0xFFFFFFFFu, d, s);
    if ((threadIdx.x & 31) == 0) atomicAdd(&digests[std::size_t(k) * kChunks + chunk], d);
  }
  if (in_sample(i)) {
    const unsigned long long s = atomicAdd(&cnt->sample_count, 1ull);
    if (s < sample_capacity) {
      sample_index[s] = i;
      for (int k = 0; k < kOps; ++k) sample_out[s * kOps + k] = out[k];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ftz_probe OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::uint32_t sample_capacity = 0;
  for (std::uint32_t i = 0; i < kCount; ++i) sample_capacity += in_sample(i) ? 1u : 0u;
  unsigned long long* d_digests = nullptr;
  Counters* d_cnt = nullptr;
  std::uint32_t *d_index = nullptr, *d_out = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_digests, sizeof(unsigned long long) * kOps * kChunks));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_digests, 0, sizeof(unsigned long long) * kOps * kChunks));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_cnt, sizeof(Counters)));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_cnt, 0, sizeof(Counters)));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_index, sizeof(std::uint32_t) * sample_capacity));
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_out, sizeof(std::uint32_t) * kOps * sample_capacity));
  const std::uint32_t per_launch = 1u << 22;
  for (std::uint32_t begin = 0; begin < kCount; begin += per_launch) {
    const std::uint32_t n = kCount - begin < per_launch ? kCount - begin : per_launch;
    probe_kernel<<<n / 256, 256>>>(begin, d_digests, d_cnt, d_index, d_out, sample_capacity);
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
  }
  ATTNSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> digests(std::size_t(kOps) * kChunks);
  Counters cnt{};
  ATTNSIM_CUDA_CHECK(cudaMemcpy(digests.data(), d_digests, digests.size() * 8,
                                cudaMemcpyDeviceToHost));
  ATTNSIM_CUDA_CHECK(cudaMemcpy(&cnt, d_cnt, sizeof(cnt), cudaMemcpyDeviceToHost));
  if (cnt.sample_count != sample_capacity) {
    std::fprintf(stderr, "ftz_probe: sample has %llu cases, expected %u\n", cnt.sample_count,
                 sample_capacity);
    return 1;
  }
  std::vector<std::uint32_t> index(sample_capacity), out(std::size_t(kOps) * sample_capacity);
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(index.data(), d_index, index.size() * 4, cudaMemcpyDeviceToHost));
  ATTNSIM_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
  attnsim::probe::write_bin(dir + "/ftz_digests.bin", digests.data(), digests.size() * 8);
  attnsim::probe::write_bin(dir + "/ftz_sample_index.bin", index.data(), index.size() * 4);
  attnsim::probe::write_bin(dir + "/ftz_sample_out.bin", out.data(), out.size() * 4);
  std::printf("ftz_probe: %u cases x %d ops, %u chunks, sample %u\n", kCount, kOps, kChunks,
              sample_capacity);
  const char* names[3] = {"mul", "fma", "add"};
  for (int k = 0; k < 3; ++k)
    std::printf("  %s.rn.ftz != flush(%s.rn(flushed operands)) on %llu cases\n", names[k],
                names[k], cnt.differs_from_round_first[k]);
  return 0;
}
