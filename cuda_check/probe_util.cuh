// Shared by the GPU probes: checked CUDA calls and checked raw-file writes (a probe that cannot
// record must fail loudly, never leave a silently short recording).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define ATTNSIM_CUDA_CHECK(call)                                                       \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "probe: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

namespace attnsim::probe {

inline void write_bin(const std::string& path, const void* data, std::size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (bytes && std::fwrite(data, 1, bytes, f) != bytes) || std::fclose(f) != 0) {
    std::fprintf(stderr, "probe: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// A device copy of a host vector (one element allocated for an empty one, so the pointer is valid).
template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(1, v.size()) * sizeof(T)));
  if (!v.empty())
    ATTNSIM_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// Shared-memory staging of our kernels (cuda_check/amla, cuda_check/lean): 16 bytes global ->
// shared by cp.async.cg; src_bytes 0 writes zeros (rows past the keys).
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
// Four 8x8 b16 matrices from shared memory into mma.sync fragments (plain and transposed).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

}  // namespace attnsim::probe
