// The parts of attnsim._core, each binding one area (module.cpp puts them together).
#pragma once

#include <nanobind/nanobind.h>

namespace attnsim::py {

void bind_attention(nanobind::module_& m);  // attention.cpp
void bind_numerics(nanobind::module_& m);   // numerics.cpp

}  // namespace attnsim::py
