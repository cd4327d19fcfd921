// Shared by the GPU probes: checked CUDA calls and checked raw-file writes (a probe that cannot
// record must fail loudly, never leave a silently short recording).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace attnsim::probe
