// The parts of attnsim._core, each binding one area (module.cpp puts them together).
#pragma once

#include <nanobind/nanobind.h>

namespace attnsim::py {

void bind_attention(nanobind::module_& m);  // attention.cpp
void bind_numerics(nanobind::module_& m);   // numerics.cpp
void bind_model_math(nanobind::module_& m); // model_math.cpp

}  // namespace attnsim::py
