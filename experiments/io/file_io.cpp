// Raw little-endian file input, output-path checks and atomic (temp file + rename) output.
#include "experiments/io/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"

namespace attnsim {

static_assert(std::endian::native == std::endian::little,
              "raw files are little-endian; a big-endian host needs byte swaps here");

namespace {

const char* file_kind(mode_t m);

}  // namespace

std::uint64_t check_input_file(const std::string& path) {
  const std::string head = "cannot read '" + path + "': ";
  if (path.empty()) throw UsageError("an input file name is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw UsageError(head + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw UsageError(head + "it is a directory");
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(head + "it is " + file_kind(st.st_mode) +
                     "; attnsim reads regular files only");
  }
  if (::access(path.c_str(), R_OK) != 0) throw UsageError(head + std::strerror(errno));
  return std::uint64_t(st.st_size);
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  // The size before the read: a file larger than the memory limit is refused, not allocated.
  check_memory(double(check_input_file(path)), "reading '" + path + "'");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read '" + path + "': " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw UsageError("cannot read '" + path + "': not a regular file");
  in.seekg(0, std::ios::beg);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw UsageError("cannot read '" + path + "': short read");
  }
  return bytes;
}

template <class T>
static std::vector<T> read_typed(const std::string& path, const char* what) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  // An empty file has no values to convert: a wrong path or a failed upstream step, not an
  // input.
  if (bytes.empty()) throw UsageError("'" + path + "' is empty (no " + what + " values)");
  if (bytes.size() % sizeof(T) != 0) {
    throw UsageError("'" + path + "' has " + std::to_string(bytes.size()) +
                     " bytes, not a whole number of " + what + " values (" +
                     std::to_string(sizeof(T)) + " bytes each)");
  }
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> read_f32_file(const std::string& path) {
  return read_typed<float>(path, "float32");
}
std::vector<double> read_f64_file(const std::string& path) {
  return read_typed<double>(path, "float64");
}
std::vector<std::uint16_t> read_u16_file(const std::string& path) {
  return read_typed<std::uint16_t>(path, "u16");
}

namespace {

// ---- the temp-file registry of the signal handlers ---------------------------------------------
//
// A fixed array of C strings, so that the handler touches no allocator and no lock: a slot is
// claimed with a compare-exchange (0 free -> 1 being filled), filled, then published (2 live);
// the handler unlinks the live slots. Lock-free atomics are async-signal-safe.
constexpr int kTempSlots = 64;
constexpr std::size_t kTempPathMax = 4096;
struct TempSlot {
  std::atomic<int> state{0};
  char path[kTempPathMax];
};
static_assert(std::atomic<int>::is_always_lock_free);
TempSlot g_temp_slots[kTempSlots];

int register_temp(const std::string& path) {
  if (path.size() >= kTempPathMax) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (g_temp_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
      g_temp_slots[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_temp_slots[slot].state.store(0);
}

extern "C" void remove_temps_and_reraise(int sig) {
  remove_registered_temp_files();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

int register_cleanup_path(const std::string& path) { return register_temp(path); }
void unregister_cleanup_path(int slot) { unregister_temp(slot); }

void remove_registered_temp_files() {
  for (auto& slot : g_temp_slots) {
    if (slot.state.load() == 2) ::unlink(slot.path);
  }
}

CleanupSignalsHeld::CleanupSignalsHeld() {
  sigset_t held;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
  ::pthread_sigmask(SIG_BLOCK, &held, &old_);
}

CleanupSignalsHeld::~CleanupSignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

void install_cleanup_handlers() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    // A signal the caller ignores (nohup, a background job's SIGINT) stays ignored.
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

void check_output_path(const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty()) return;
  const std::string head = "cannot write '" + path + "': ";
  if (path.back() == '/') throw UsageError(head + "it names a directory (give a file name)");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw UsageError(head + "it is a directory (give a file name)");
    if (!S_ISREG(st.st_mode)) {
      throw UsageError(head + "it exists and is " + file_kind(st.st_mode) +
                       "; attnsim writes a temp file and renames it over the output, which would "
                       "replace it");
    }
    for (const auto& in : inputs) {
      struct stat si;
      if (in.empty() || ::stat(in.c_str(), &si) != 0) continue;
      if (si.st_dev == st.st_dev && si.st_ino == st.st_ino) {
        throw UsageError(head + "it is also an input of this command ('" + in +
                         "'); choose another output file");
      }
    }
  } else if (errno != ENOENT) {
    throw UsageError(head + std::strerror(errno));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  struct stat sd;
  if (::stat(dir.c_str(), &sd) != 0) {
    throw UsageError(head + "directory '" + dir + "' does not exist");
  }
  if (!S_ISDIR(sd.st_mode)) throw UsageError(head + "'" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw UsageError(head + "directory '" + dir + "' is not writable");
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  check_output_path(path_);
  // O_EXCL: never write through a name someone else holds (a stale temp, a link planted there).
  const std::string base = path_ + ".tmp." + std::to_string(::getpid());
  // Created and registered with SIGINT/SIGTERM/SIGHUP held back: a signal in between would leave
  // the temp file behind.
  const CleanupSignalsHeld held;
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_ = attempt == 0 ? base : base + "." + std::to_string(attempt);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) throw UsageError("cannot write '" + path_ + "': " + std::strerror(errno));
  slot_ = register_temp(temp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(temp_.c_str());
  unregister_temp(slot_);  // after the removal: a signal in between finds the name gone
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw UsageError("cannot write '" + path_ + "': " + std::strerror(errno));
    }
    p += n;
    bytes -= std::size_t(n);
  }
}

void AtomicFile::commit() {
  if (fd_ >= 0) {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      throw UsageError("cannot write '" + path_ + "': " + std::strerror(errno));
    }
    fd_ = -1;
  }
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    throw UsageError("cannot move output into place at '" + path_ + "': " + std::strerror(errno));
  }
  committed_ = true;
  unregister_temp(slot_);
  slot_ = -1;
}

void write_file_atomic(const std::string& path, const void* data, std::size_t bytes) {
  AtomicFile f(path);
  f.write(data, bytes);
  f.commit();
}

}  // namespace attnsim
