// Run-time selection of the fast kernels' instruction set (see isa.hpp).
#include "numerics/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attnsim {

namespace {

// The kernel grants a process the AMX tile state only on request (Linux arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA = 18).
bool amx_permitted() {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

Isa detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  Isa best = Isa::kScalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
  if (best == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    best = Isa::kAvx512;
  if (best == Isa::kAvx512 && __builtin_cpu_supports("amx-int8") && amx_permitted())
    best = Isa::kAmx;
  return best;
#else
  return Isa::kScalar;
#endif
}

Isa from_env(Isa detected) {
  const char* e = std::getenv("ATTNSIM_ISA");
  if (!e || !*e) return detected;
  Isa want;
  if (!parse_isa(e, &want)) return detected;  // an unknown name caps nothing (`attnsim info` says)
  return int(want) < int(detected) ? want : detected;
}

std::atomic<int>& level() {
  static std::atomic<int> l{int(from_env(detected_isa()))};
  return l;
}

}  // namespace

Isa detected_isa() {
  static const Isa d = detect();
  return d;
}

Isa active_isa() { return Isa(level().load(std::memory_order_relaxed)); }

void set_isa(Isa isa) {
  if (int(isa) > int(detected_isa()))
    throw std::invalid_argument(std::string("--isa ") + isa_name(isa) +
                                ": this CPU supports at most " + isa_name(detected_isa()));
  level().store(int(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

bool parse_isa(const std::string& name, Isa* out) {
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (name == isa_name(i)) {
      *out = i;
      return true;
    }
  return false;
}

bool has_isa_feature(const char* f) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const Isa a = active_isa();
  if (std::strcmp(f, "amx-int8") == 0) return a >= Isa::kAmx;
  if (a < Isa::kAvx512) return false;
  if (std::strcmp(f, "avx512fp16") == 0) return __builtin_cpu_supports("avx512fp16");
  if (std::strcmp(f, "avx512bf16") == 0) return __builtin_cpu_supports("avx512bf16");
  if (std::strcmp(f, "avx512vnni") == 0) return __builtin_cpu_supports("avx512vnni");
#endif
  (void)f;
  return false;
}

}  // namespace attnsim
