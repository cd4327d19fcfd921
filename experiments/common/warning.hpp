// Warnings: a result is computed, but something about the input or the options is likely not
// what the user meant (a KIVI run on a non-causal dump is FP16 attention; a split-KV merge that
// never ran). One line `attnsim: warning: ...` on stderr, once per distinct message per process.
#pragma once

#include <string>
#include <vector>

namespace attnsim {

// Thread-safe; the same message twice prints once.
void warn(const std::string& message);
// A note: what a method computes that no hardware recording verifies (`attnsim: note: ...`),
// likewise once per message.
void note(const std::string& message);
// How many distinct warnings this process printed (tests).
int warning_count();

// The Python package queues warnings and notes instead of printing them, and hands them to
// Python's `warnings` module after each call (filterable, testable): kind "warning" or "note".
struct QueuedMessage {
  std::string kind, text;
};
void queue_messages(bool on);
std::vector<QueuedMessage> take_messages();

// While one lives, warnings and notes are dropped (not counted as printed either): for runs made
// on the caller's behalf rather than the user's, such as `verify`'s search over candidate methods.
class MuteMessages {
 public:
  MuteMessages();
  ~MuteMessages();
  MuteMessages(const MuteMessages&) = delete;
  MuteMessages& operator=(const MuteMessages&) = delete;
};

}  // namespace attnsim
