// Run-time selection of the fast kernels' instruction set (see isa.hpp).
#include "numerics/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>  // getauxval(AT_HWCAP), HWCAP_ASIMD
#endif

namespace attnsim {

namespace {

bool x86_level(Isa isa) { return isa == Isa::kAvx2 || isa == Isa::kAvx512 || isa == Isa::kAmx; }

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

// The CPU's features from CPUID (Intel SDM vol. 2A, CPUID leaf 07H), each only where the OS saves
// the registers it needs (XCR0: SSE/AVX state bits 1-2, AVX-512 state bits 5-7). CPUID directly
// rather than __builtin_cpu_supports, whose feature names differ between compilers.
struct CpuFeatures {
  bool avx2 = false, fma = false, avx512 = false, vnni = false, bf16 = false, fp16 = false,
       amx_int8 = false;
  bool neon = false;  // AArch64 Advanced SIMD (with its FP64 lanes and FMLA)
};

CpuFeatures read_cpu() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1u;
  f.fma = (c >> 12) & 1u;
  // The rest of Isa::kAvx2's target set (numerics/simd.hpp ATTNSIM_TARGET_AVX2): F16C (leaf 1 ECX
  // bit 29), POPCNT (bit 23), and below BMI1/BMI2 (leaf 7 EBX bits 3, 8) and LZCNT (0x80000001
  // ECX bit 5): every AVX2 CPU of record has them, but a virtual machine may mask one.
  const bool f16c_popcnt = ((c >> 29) & 1u) && ((c >> 23) & 1u);
  unsigned ea = 0, eb = 0, ec = 0, ed = 0;
  const bool lzcnt = __get_cpuid(0x80000001u, &ea, &eb, &ec, &ed) && ((ec >> 5) & 1u);
  if (!osxsave) return f;
  unsigned xlo = 0, xhi = 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool os_avx = (xlo & 0x6u) == 0x6u, os_avx512 = os_avx && (xlo & 0xe0u) == 0xe0u;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = os_avx && ((b >> 5) & 1u) && ((b >> 3) & 1u) && ((b >> 8) & 1u) && f16c_popcnt && lzcnt;
  // AVX512F (bit 16), DQ (17), BW (30), VL (31).
  f.avx512 = os_avx512 && ((b >> 16) & 1u) && ((b >> 17) & 1u) && ((b >> 30) & 1u) &&
             ((b >> 31) & 1u);
  f.vnni = f.avx512 && ((c >> 11) & 1u);
  f.fp16 = f.avx512 && ((d >> 23) & 1u);
  f.amx_int8 = ((d >> 24) & 1u) && ((d >> 25) & 1u);  // AMX-TILE and AMX-INT8
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.bf16 = f.avx512 && ((a1 >> 5) & 1u);
#elif defined(__aarch64__) && defined(__ARM_NEON)
  // Advanced SIMD is part of the AArch64 base architecture (the compiler assumes it everywhere);
  // Linux reports it as HWCAP_ASIMD too, and the level follows what the kernel reports.
#if defined(__linux__) && defined(HWCAP_ASIMD)
  f.neon = (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#else
  f.neon = true;
#endif
#endif
  return f;
}

const CpuFeatures& cpu() {
  static const CpuFeatures f = read_cpu();
  return f;
}

Isa detect() {
  const CpuFeatures& f = cpu();
  Isa best = Isa::kScalar;
  if (f.neon) return Isa::kNeon;
  if (f.avx2 && f.fma) best = Isa::kAvx2;
  if (best == Isa::kAvx2 && f.avx512) best = Isa::kAvx512;
  if (best == Isa::kAvx512 && f.amx_int8 && amx_permitted()) best = Isa::kAmx;
  return best;
}

Isa from_env(Isa detected) {
  const char* e = std::getenv("ATTNSIM_ISA");
  if (!e || !*e) return detected;
  Isa want;
  // An unknown name, or a level this CPU does not run (above its best, or the other
  // architecture's), caps nothing (`attnsim info` says which level is active).
  if (!parse_isa(e, &want) || !isa_supported(want)) return detected;
  return want;
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

bool isa_supported(Isa isa) {
  const Isa best = detected_isa();
  if (isa == Isa::kScalar || isa == best) return true;
  // On the best level's ladder and below it (kNeon's ladder has no other level).
  return x86_level(isa) && x86_level(best) && int(isa) < int(best);
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

std::string isa_env_rejected() {
  const char* e = std::getenv("ATTNSIM_ISA");
  if (!e || !*e) return "";
  Isa want;
  const std::string used = std::string(" (the fast kernels use ") + isa_name(detected_isa()) + ")";
  if (!parse_isa(e, &want))
    return std::string("ATTNSIM_ISA=") + e +
           ": not an instruction set (scalar, neon, avx2, avx512, amx)" + used;
  if (!isa_supported(want))
    return std::string("ATTNSIM_ISA=") + e + ": this CPU does not run it (it runs " +
           [] {
             std::string r;
             for (Isa i : supported_isas()) r += std::string(r.empty() ? "" : ", ") + isa_name(i);
             return r;
           }() +
           ")" + used;
  return "";
}

void set_isa(Isa isa) {
  if (!isa_supported(isa)) {
#if defined(__aarch64__)
    const bool other_arch = x86_level(isa);
#else
    const bool other_arch = isa == Isa::kNeon;
#endif
    std::string what = std::string("--isa ") + isa_name(isa) + ": ";
    if (other_arch)
      what += isa == Isa::kNeon ? "an AArch64 (Arm) instruction set; " : "an x86-64 instruction set; ";
    throw std::invalid_argument(what + "this CPU supports at most " + isa_name(detected_isa()));
  }
  level().store(int(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kNeon: return "neon";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

bool parse_isa(const std::string& name, Isa* out) {
  for (Isa i : {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (name == isa_name(i)) {
      *out = i;
      return true;
    }
  return false;
}

bool cpu_has_feature(const char* f) {
  if (std::strcmp(f, "amx-int8") == 0) return detected_isa() >= Isa::kAmx;
  if (std::strcmp(f, "avx512fp16") == 0) return cpu().fp16;
  if (std::strcmp(f, "avx512bf16") == 0) return cpu().bf16;
  if (std::strcmp(f, "avx512vnni") == 0) return cpu().vnni;
  return false;
}

bool has_isa_feature(const char* f) {
  const Isa a = active_isa();
  if (std::strcmp(f, "amx-int8") == 0) return a >= Isa::kAmx;
  if (a < Isa::kAvx512) return false;
  return cpu_has_feature(f);
}

}  // namespace attnsim
