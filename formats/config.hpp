// Host/device portability for every formats/ header: ATTNSIM_HD, bit_cast, count-leading-zeros.
#pragma once

#include <cstdint>

// Every formats/ function is constexpr and callable from CUDA device code, so that the probes in
// cuda_check/ run the very same encoder as the CPU simulator (STYLE.md 1, 6; CUTLASS
// cute/config.hpp).
#if defined(__CUDACC__)
#define ATTNSIM_HD __host__ __device__ __forceinline__
#else
#define ATTNSIM_HD inline
#endif

namespace attnsim {

// std::bit_cast is not usable in nvcc device code on every toolkit; the builtin is (g++ >= 11,
// clang >= 9, nvcc >= 11.x) and is constexpr.
template <class To, class From>
ATTNSIM_HD constexpr To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  return __builtin_bit_cast(To, from);
}

// Number of leading zero bits of a non-zero 64-bit value (64 for zero). A plain loop would do,
// but the builtin keeps conversions in the hundreds of millions per second per core.
ATTNSIM_HD constexpr int countl_zero64(std::uint64_t x) { return x == 0 ? 64 : __builtin_clzll(x); }

}  // namespace attnsim
