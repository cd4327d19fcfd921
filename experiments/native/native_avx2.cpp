// Whether this build has the AVX2 anchor (experiments/CMakeLists.txt: x86-64 builds link the
// library attnsim_native_avx2, which defines native_attention_avx2); elsewhere a definition that
// is never called.
#include <stdexcept>

#include "experiments/native/native_attention.hpp"

namespace attnsim {

bool native_attention_avx2_available() { return ATTNSIM_NATIVE_AVX2 != 0; }

#if !ATTNSIM_NATIVE_AVX2
void native_attention_avx2(const float*, const float*, const float*, float*, int, int, int, int,
                           int, int, int, bool, double) {
  throw std::logic_error("native_attention_avx2: not built for this CPU architecture");
}
#endif

}  // namespace attnsim
