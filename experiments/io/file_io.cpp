// Raw little-endian file input and atomic (temp file + rename) output.
#include "experiments/io/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "experiments/cli/error.hpp"

namespace attnsim {

static_assert(std::endian::native == std::endian::little,
              "raw files are little-endian; a big-endian host needs byte swaps here");

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
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

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) throw UsageError("cannot write '" + path_ + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(temp_.c_str());
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
}

void write_file_atomic(const std::string& path, const void* data, std::size_t bytes) {
  AtomicFile f(path);
  f.write(data, bytes);
  f.commit();
}

}  // namespace attnsim
