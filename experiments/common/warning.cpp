// Warnings on stderr, once per message (see warning.hpp).
#include "experiments/common/warning.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "experiments/common/error.hpp"

namespace attnsim {

namespace {
std::mutex g_mutex;
std::set<std::string> g_seen;
}  // namespace

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_seen.insert(message).second) return;
  std::fprintf(stderr, "attnsim: warning: %s\n", one_line(message).c_str());
  std::fflush(stderr);
}

int warning_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return int(g_seen.size());
}

}  // namespace attnsim
