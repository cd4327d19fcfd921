// The techniques' hooks into the pipeline's vocabulary (see hooks.hpp).
#include "sim/hooks.hpp"

#include "sim/amla/amla.hpp"
#include "sim/turbo/sas.hpp"

namespace attnsim {

const HookRegistry& technique_hooks() {
  static const HookRegistry r = [] {
    HookRegistry h;
    h.exp.push_back(sas_hook_spec());
    for (RescaleHookSpec& s : amla_hook_specs()) h.rescale.push_back(std::move(s));
    return h;
  }();
  return r;
}

}  // namespace attnsim
