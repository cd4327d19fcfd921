// The CPU instruction sets the fast stage kernels may use, detected once at run time and
// overridable (ATTNSIM_ISA=scalar|avx2|avx512|amx, or the command line's --isa): every fast kernel
// sits behind the signature of its `_ref` reference and gives the same bits, so the choice changes
// the speed, never a result (tests run both).
#pragma once

#include <string>

namespace attnsim {

// Ordered: each level includes the ones before it.
//  kScalar  the references only
//  kAvx2    AVX2 + FMA + F16C
//  kAvx512  AVX-512 F/BW/DQ/VL (+ VNNI, BF16, FP16 where the CPU has them: has_isa_feature)
//  kAmx     AMX-INT8 tiles (after the kernel grants the tile state)
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

// The level the fast kernels use: the best this CPU supports, capped by ATTNSIM_ISA (read once)
// or by set_isa.
Isa active_isa();
// What this CPU supports (ignores any cap).
Isa detected_isa();
// Caps the level (e.g. --isa scalar forces the references). A level above the CPU's is refused
// with std::invalid_argument.
void set_isa(Isa isa);
const char* isa_name(Isa isa);
// "scalar", "avx2", "avx512", "amx" -> the level; false when the name is none of them.
bool parse_isa(const std::string& name, Isa* out);

// Single features within a level, for kernels that need them (and are available only when the
// active level includes their level): "avx512fp16", "avx512bf16", "avx512vnni", "amx-int8".
bool has_isa_feature(const char* feature);
// Whether this CPU has the feature, whatever the cap (for building the dispatch tables).
bool cpu_has_feature(const char* feature);

}  // namespace attnsim
