// Warnings: a result is computed, but something about the input or the options is likely not
// what the user meant (a KIVI run on a non-causal dump is FP16 attention; a split-KV merge that
// never ran). One line `attnsim: warning: ...` on stderr, once per distinct message per process.
#pragma once

#include <string>

namespace attnsim {

// Thread-safe; the same message twice prints once.
void warn(const std::string& message);
// How many distinct warnings this process printed (tests).
int warning_count();

}  // namespace attnsim
