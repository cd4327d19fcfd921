// FlashAttention-2 forward as the pipeline's default (see flash.hpp and sim/flash/README.md).
#include "sim/flash/flash.hpp"

namespace attnsim {

Pipeline flash_pipeline(Encoding storage, Encoding out) {
  Pipeline p;
  const Policy cast = storage == Encoding::kE4m3fn || storage == Encoding::kE5m2 ? kCudaSatfinite
                                                                                   : kCudaRn;
  for (OperandSpec* s : {&p.q, &p.k, &p.v}) {
    s->enc = storage;
    s->cast = cast;
  }
  p.p.enc = storage;  // FA2 convert_type<Element>(scores) before the second GEMM
  p.p.cast = cast;
  p.out.enc = out;
  return canonical(p);
}

}  // namespace attnsim
