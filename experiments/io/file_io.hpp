// Raw little-endian file input and atomic (temp file + rename) output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// Whole file as bytes; UsageError if unreadable.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// Raw arrays of fixed-width elements; UsageError if the size is not a multiple of the width.
std::vector<float> read_f32_file(const std::string& path);
std::vector<double> read_f64_file(const std::string& path);
std::vector<std::uint16_t> read_u16_file(const std::string& path);

// An output that appears under its final name only when commit() succeeds: bytes go to a temp
// file in the same directory, which commit() fsyncs and renames over `path`. If the object is
// destroyed without commit() (error, exception, signal-free early exit) the temp file is removed
// and `path` is untouched: never a half-written output.
class AtomicFile {
 public:
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
  bool committed_ = false;
};

// Convenience: write a whole buffer atomically.
void write_file_atomic(const std::string& path, const void* data, std::size_t bytes);

}  // namespace attnsim
