// The progress display of long commands (see progress.hpp).
#include "experiments/common/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "sim/progress.hpp"

namespace attnsim {

bool progress_wanted(bool quiet) { return !quiet && ::isatty(2) && std::getenv("CI") == nullptr; }

WorkSince::WorkSince() { restart(); }

void WorkSince::restart() {
  done0_ = work_progress().done.load(std::memory_order_relaxed);
  planned0_ = work_progress().planned.load(std::memory_order_relaxed);
}

std::int64_t WorkSince::done() const {
  return work_progress().done.load(std::memory_order_relaxed) - done0_;
}

std::int64_t WorkSince::planned() const {
  return work_progress().planned.load(std::memory_order_relaxed) - planned0_;
}

std::string WorkSince::text() const {
  const std::int64_t p = planned();
  if (p <= 0) return "";
  return std::to_string(std::min(done(), p)) + "/" + std::to_string(p);
}

ProgressLine::ProgressLine(bool enabled, std::string what, std::function<std::string()> status,
                           std::chrono::milliseconds period)
    : enabled_(enabled),
      what_(std::move(what)),
      status_(std::move(status)),
      period_(period),
      t0_(std::chrono::steady_clock::now()) {
  if (!enabled_) return;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      draw_locked();
      cv_.wait_for(lock, period_, [this] { return stopping_; });
    }
  });
}

ProgressLine::~ProgressLine() { stop(); }

double ProgressLine::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void ProgressLine::draw_locked() {
  char t[32];
  std::snprintf(t, sizeof t, "  %.1fs", elapsed_seconds());
  std::string line = what_ + ": " + status_() + t;
  // Pad over the previous line's tail, so a shorter status leaves nothing of the longer one.
  const std::size_t width = line.size();
  if (width < last_width_) line += std::string(last_width_ - width, ' ');
  last_width_ = width;
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
}

void ProgressLine::redraw() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!stopping_) draw_locked();
}

void ProgressLine::stop() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  draw_locked();
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace attnsim
