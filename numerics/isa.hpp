// The CPU instruction sets the fast stage kernels may use, detected once at run time and
// overridable (ATTNSIM_ISA=scalar|neon|avx2|avx512|amx, or the command line's --isa): every fast
// kernel sits behind the signature of its `_ref` reference and gives the same bits, so the choice
// changes the speed, never a result (tests run both).
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

// Which architecture's kernels this build compiles: x86-64's (AVX2, AVX-512, AMX) or AArch64's
// (NEON). Every kernel file compiles to nothing on the other architecture and every dispatcher
// tests the same macro before it calls one (numerics/simd.hpp includes the intrinsics).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATTNSIM_NO_X86_KERNELS)
#define ATTNSIM_X86_KERNELS 1
#else
#define ATTNSIM_X86_KERNELS 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(ATTNSIM_NO_NEON_KERNELS)
#define ATTNSIM_NEON_KERNELS 1
#else
#define ATTNSIM_NEON_KERNELS 0
#endif

namespace attnsim {

// Two ladders that share kScalar, each level including the ones before it on its ladder:
//  kScalar  the references only (every CPU)
//  kNeon    AArch64 Advanced SIMD (every AArch64 CPU; Arm builds only)
//  kAvx2    AVX2 + FMA + F16C, with BMI1/2, LZCNT, POPCNT (x86-64; every AVX2 CPU of record)
//  kAvx512  AVX-512 F/BW/DQ/VL (+ VNNI, BF16, FP16 where the CPU has them: has_isa_feature)
//  kAmx     AMX-INT8 tiles (after the kernel grants the tile state)
// A CPU runs scalar and the levels of its own ladder up to the best it has: never an x86 level on
// Arm nor neon on x86-64. kNeon sits below kAvx2 so that the x86 kernels' tests `active_isa() >=
// Isa::kAvx2` (kAvx512, kAmx) are false on Arm; a NEON kernel is chosen by `== Isa::kNeon`.
enum class Isa { kScalar = 0, kNeon = 1, kAvx2 = 2, kAvx512 = 3, kAmx = 4 };

// The level the fast kernels use: the best this CPU supports, capped by ATTNSIM_ISA (read once)
// or by set_isa.
Isa active_isa();
// What this CPU supports (ignores any cap): the top of its ladder.
Isa detected_isa();
// Whether this CPU runs a level (scalar, and its ladder's levels up to detected_isa()).
bool isa_supported(Isa isa);
// The levels this CPU runs, scalar first (x86-64 with AVX-512: scalar, avx2, avx512; AArch64:
// scalar, neon).
std::vector<Isa> supported_isas();
// When ATTNSIM_ISA is set but could not be applied (not a level's name, or a level this CPU does
// not run), the one-line reason, naming the level used instead; else "". The command line refuses
// such a value and the Python package warns: the cap is never ignored silently.
std::string isa_env_rejected();
// Caps the level (e.g. --isa scalar forces the references). A level this CPU does not run (above
// its best, or of the other architecture) is refused with std::invalid_argument.
void set_isa(Isa isa);
const char* isa_name(Isa isa);
// "scalar", "neon", "avx2", "avx512", "amx" -> the level; false when the name is none of them.
bool parse_isa(const std::string& name, Isa* out);

// Single features within a level, for kernels that need them (and are available only when the
// active level includes their level): "avx512fp16", "avx512bf16", "avx512vnni", "amx-int8".
bool has_isa_feature(const char* feature);
// Whether this CPU has the feature, whatever the cap (for building the dispatch tables).
bool cpu_has_feature(const char* feature);

// One set of kernels K per level (scalar, neon, avx2, avx512, amx), built once per process: the
// array kernels' table (numerics/dispatch.hpp) and the attention stages' (sim/pipeline/stages/
// kernels.hpp). `at` builds a level; `find` returns a built level or null; `active` the level in
// use (active_isa), the scalar set when that level was not built.
template <class K>
struct LevelTables {
  static constexpr std::size_t kLevels = std::size_t(Isa::kAmx) + 1;
  std::array<K, kLevels> set;
  std::array<bool, kLevels> built{};

  K& at(Isa i) {
    built[std::size_t(i)] = true;
    return set[std::size_t(i)];
  }
  const K* find(Isa i) const {
    const int n = int(i);
    return n < 0 || n >= int(kLevels) || !built[std::size_t(n)] ? nullptr : &set[std::size_t(n)];
  }
  const K& active() const {
    const K* k = find(active_isa());
    return k ? *k : set[std::size_t(Isa::kScalar)];
  }
};

// The names of a set's own kernels (attnsim info): those of the (name, differs from the set
// below) entries that differ.
inline std::vector<const char*> own_kernel_names(
    std::initializer_list<std::pair<const char*, bool>> entries) {
  std::vector<const char*> out;
  for (const auto& [name, own] : entries)
    if (own) out.push_back(name);
  return out;
}

}  // namespace attnsim
