// Warnings on stderr, once per message (see warning.hpp).
#include "experiments/common/warning.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "experiments/common/error.hpp"

namespace attnsim {

namespace {
std::mutex g_mutex;
std::set<std::string> g_seen;  // "kind\ttext"
bool g_queue = false;
std::vector<QueuedMessage> g_queued;

int g_muted = 0;  // live MuteMessages (under g_mutex)

void emit(const char* kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_muted > 0) return;
  if (!g_seen.insert(std::string(kind) + "\t" + message).second) return;
  if (g_queue) {
    g_queued.push_back({kind, one_line(message)});
    return;
  }
  std::fprintf(stderr, "attnsim: %s: %s\n", kind, one_line(message).c_str());
  std::fflush(stderr);
}
}  // namespace

void warn(const std::string& message) { emit("warning", message); }

MuteMessages::MuteMessages() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_muted;
}

MuteMessages::~MuteMessages() {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_muted;
}

void note(const std::string& message) { emit("note", message); }

void queue_messages(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_queue = on;
}

std::vector<QueuedMessage> take_messages() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<QueuedMessage> out;
  out.swap(g_queued);
  return out;
}

int warning_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  int n = 0;
  for (const std::string& m : g_seen) n += m.rfind("warning\t", 0) == 0;
  return n;
}

}  // namespace attnsim
