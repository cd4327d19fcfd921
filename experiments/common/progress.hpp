// A one-line progress display on stderr for long computations (`run`, `sweep`, `attribute`):
// redrawn a few times a second from its own thread while the work runs, only when stderr is a
// terminal, CI is unset and the command was not given --quiet; silent otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace attnsim {

// Whether a command shows progress: not --quiet, stderr a terminal, and no CI variable (CI logs
// are files, where a redrawn line is noise).
bool progress_wanted(bool quiet);

// Counts what the simulators report through sim/progress.hpp (planned and finished units of work,
// e.g. golden attention's row blocks) from the moment it is made: "12/64" for the work started
// since, or "" when none was reported.
class WorkSince {
 public:
  WorkSince();
  // Finished and planned units since construction (or the last restart()).
  std::int64_t done() const;
  std::int64_t planned() const;
  // "done/planned" ("" when nothing was planned).
  std::string text() const;
  void restart();

 private:
  // Atomic: the drawing thread reads them while the command restarts the count.
  std::atomic<std::int64_t> done0_{0}, planned0_{0};
};

// The display: `status()` is called on the drawing thread (it must be thread-safe; it reads
// atomics or takes its own lock) and its text is drawn after the command's name with the elapsed
// time, at most every `period`. Nothing is drawn when disabled. stop() (or the destructor) ends
// the line with a newline, so what the command prints next starts on a line of its own.
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::string what, std::function<std::string()> status,
               std::chrono::milliseconds period = std::chrono::milliseconds(250));
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  // Draws now (a phase changed), from the caller's thread.
  void redraw();
  void stop();
  bool enabled() const { return enabled_; }
  double elapsed_seconds() const;

 private:
  void draw_locked();
  bool enabled_;
  std::string what_;
  std::function<std::string()> status_;
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, stopped_ = false;
  std::size_t last_width_ = 0;
  std::thread thread_;
};

}  // namespace attnsim
