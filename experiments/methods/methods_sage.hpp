// The SageAttention methods' option strings as sim/sage options (for tools and tests that need
// more than MethodOutput, e.g. the LSE).
#pragma once

#include "experiments/methods/methods.hpp"
#include "sim/sage/sage.hpp"

namespace attnsim {

// The SageOptions of a parsed `sage1` or `sage2` method (std::invalid_argument for another).
SageOptions sage_options_of(const MethodConfig& m);

}  // namespace attnsim
