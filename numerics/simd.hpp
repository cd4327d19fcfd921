// What the vector kernels of numerics/ share: whether x86 kernels are compiled
// (ATTNSIM_X86_KERNELS) or AArch64 ones (ATTNSIM_NEON_KERNELS, both from numerics/isa.hpp), the
// GCC target attribute that compiles one function for AVX-512 while the rest of the program stays
// at the build's baseline, and the intrinsics header. Kernels are chosen at run time by
// numerics/isa.hpp, never by compile flags, and every function carrying the attribute lives in a
// .cpp in an anonymous namespace: an inline function of a shared header compiled for AVX-512 could
// otherwise be the copy the linker keeps for scalar callers.
#pragma once

#include "numerics/isa.hpp"

#if ATTNSIM_X86_KERNELS
#include <immintrin.h>
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_epi32, GCC PR 105593, fixed in
// GCC 13); the kernel TUs that include this header silence that one warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// AVX-512 F/BW/DQ/VL/CD (Isa::kAvx512's baseline: Skylake-SP and later), with the AVX2-era
// extensions every such CPU has. Kernels that need AVX512-FP16/BF16/VNNI ask has_isa_feature.
#define ATTNSIM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")))
// AVX2 + FMA + F16C (Isa::kAvx2: Haswell, Zen 1 and later).
#define ATTNSIM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")))
#endif

// AArch64 Advanced SIMD is part of the base architecture, so the NEON kernels (the *_neon.cpp
// files) need no target attribute; Isa::kNeon selects them at run time all the same, so that
// --isa scalar runs the references there too.
#if ATTNSIM_NEON_KERNELS
#include <arm_neon.h>
#endif
