// Raw little-endian file input, output-path checks, and atomic (temp file + rename) output whose
// temp files are removed on every error path and on SIGINT/SIGTERM/SIGHUP.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// Refuses, with a one-line UsageError, an input attnsim cannot read as a file: missing, not
// readable, a directory, or not a regular file (a FIFO would block the read forever, /dev/zero
// never ends, /dev/null reads as empty). Returns its size in bytes. Every reader calls it first.
std::uint64_t check_input_file(const std::string& path);

// Whole file as bytes; UsageError if unreadable (check_input_file) or larger than the memory
// limit allows (experiments/common/memory_limit.hpp).
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// Raw arrays of fixed-width elements; UsageError if the file is empty or its size is not a
// multiple of the width.
std::vector<float> read_f32_file(const std::string& path);
std::vector<double> read_f64_file(const std::string& path);
std::vector<std::uint16_t> read_u16_file(const std::string& path);

// Refuses, with a one-line UsageError, an output path attnsim must not write: a directory (or a
// name ending in '/'), an existing file that is not a regular file (a FIFO, a device node, a
// socket: the rename would replace it), a file that is one of `inputs` (same device and inode,
// so hard links and symbolic links count), and a path whose directory is missing or not
// writable. Commands call it for every output before reading or computing anything; an empty
// path (no output requested) passes.
void check_output_path(const std::string& path, const std::vector<std::string>& inputs = {});

// An output that appears under its final name only when commit() succeeds: bytes go to a temp
// file in the same directory, which commit() fsyncs and renames over `path`. If the object is
// destroyed without commit() (error, exception) the temp file is removed and `path` is untouched:
// never a half-written output. While it exists the temp name is registered with the signal
// handlers of install_cleanup_handlers(), which remove it on SIGINT, SIGTERM and SIGHUP.
class AtomicFile {
 public:
  // check_output_path(path) first (the inputs are the caller's to check).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& path() const { return path_; }
  void write(const void* data, std::size_t bytes);
  // For writers (HDF5) that open temp_path() themselves and close it before commit().
  void commit();

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  int slot_ = -1;  // registry slot of temp_ (install_cleanup_handlers)
  bool committed_ = false;
};

// Convenience: write a whole buffer atomically.
void write_file_atomic(const std::string& path, const void* data, std::size_t bytes);

// Installs handlers for SIGINT, SIGTERM and SIGHUP that unlink every registered temp file and then
// re-raise the signal with its default action (so the exit status still says which signal).
// The registry is a fixed array of C strings: the handler only calls unlink, signal and raise.
void install_cleanup_handlers();
// Registers a file the signal handlers remove (a sweep checkpoint before its first point); the
// slot (-1 if the registry is full) is released by unregister_cleanup_path.
int register_cleanup_path(const std::string& path);
void unregister_cleanup_path(int slot);
// Holds SIGINT, SIGTERM and SIGHUP back on this thread while it lives (delivered when it ends): for
// creating a file and registering it as one step, so that no signal finds it unregistered.
class CleanupSignalsHeld {
 public:
  CleanupSignalsHeld();
  ~CleanupSignalsHeld();
  CleanupSignalsHeld(const CleanupSignalsHeld&) = delete;
  CleanupSignalsHeld& operator=(const CleanupSignalsHeld&) = delete;

 private:
  sigset_t old_;
};

// Unlinks every registered temp file now (std::terminate and MPI abort paths, where destructors
// do not run). Async-signal-safe.
void remove_registered_temp_files();

}  // namespace attnsim
