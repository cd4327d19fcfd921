// Thin RAII layer over the HDF5 C API: atomic writers of compressed datasets and attributes,
// checked readers that turn every HDF5 failure into a one-line UsageError.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/io/file_io.hpp"

namespace attnsim {

// Makes a crash of libhdf5 inside an H5Reader call (SIGSEGV, SIGBUS, SIGFPE on corrupt metadata,
// which libhdf5 1.10 does not always turn into an error) end the process like a bad input: temp
// files removed, "attnsim: error: cannot read 'FILE': ..." on stderr, exit 2. Crashes elsewhere
// keep their default action. For the executable's main(); tests and the fuzz target leave their
// own handlers in place.
void install_hdf5_crash_handlers();

// Creates `path` atomically: everything goes to a temp file that commit() closes and renames.
class H5Writer {
 public:
  explicit H5Writer(const std::string& path);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  // Datasets are chunked, shuffle + gzip(4) compressed and carry HDF5's Fletcher-32 checksum
  // (readable by h5py, xarray, pandas; a changed byte is a read error, see H5Reader). Empty
  // datasets are stored contiguous (no data). Intermediate groups in `name` ("layer_00/q") are
  // created as needed.
  void write_f32(const std::string& name, const std::vector<std::uint64_t>& dims,
                 const float* data);
  void write_f64(const std::string& name, const std::vector<std::uint64_t>& dims,
                 const double* data);
  void write_i64(const std::string& name, const std::vector<std::uint64_t>& dims,
                 const std::int64_t* data);
  void write_u16(const std::string& name, const std::vector<std::uint64_t>& dims,
                 const std::uint16_t* data);
  void write_u8(const std::string& name, const std::vector<std::uint64_t>& dims,
                const std::uint8_t* data);
  // IEEE binary16 from its bit patterns, as an HDF5 16-bit float type (h5py reads numpy float16).
  void write_f16(const std::string& name, const std::vector<std::uint64_t>& dims,
                 const std::uint16_t* bits);
  // Fixed-length null-padded UTF-8 strings, as wide as the longest (h5py reads numpy bytes;
  // `.asstr()` gives str). Variable-length strings cannot carry the checksum filter.
  void write_strings(const std::string& name, const std::vector<std::string>& values);

  // Attributes on an object ("/" for the file, or a dataset/group name).
  void attr_string(const std::string& object, const std::string& key, const std::string& value);
  void attr_f64(const std::string& object, const std::string& key, double value);
  void attr_i64(const std::string& object, const std::string& key, std::int64_t value);

  void commit();

 private:
  void ensure_parent_groups(const std::string& name);
  std::unique_ptr<AtomicFile> out_;
  std::int64_t file_ = -1;
};

// A dataset read into float32 (float16, bfloat16 [uint16 + attribute dtype="bfloat16"], float32 and
// float64 sources; float64 is rounded to nearest float32). A dtype="bfloat16" attribute on anything
// but uint16 is an error.
struct H5Array {
  std::vector<std::uint64_t> dims;
  std::vector<float> data;
  std::string dtype;  // source dtype: float16 bfloat16 float32 float64
};

// What a dataset holds, for generic walkers (`attnsim compare`, `attnsim gate`).
struct H5DatasetInfo {
  std::string name;  // full path without the leading '/'
  std::vector<std::uint64_t> dims;
  char kind = '?';         // 'f' float, 'i' signed integer, 'u' unsigned, 's' string
  std::size_t size = 0;    // bytes per element (strings: 0)
  std::string dtype_attr;  // the `dtype` attribute if any ("bfloat16", ...)
};

// Every failure is one UsageError line naming the file (and dataset): not an HDF5 file, truncated,
// a chunk that does not decompress (with HDF5's innermost message), and a Fletcher-32 mismatch
// ("checksum mismatch in dataset 'k' of 'f.h5' (the file is corrupt)"). HDF5's own error stack is
// never printed, on any thread.
class H5Reader {
 public:
  explicit H5Reader(const std::string& path);
  ~H5Reader();
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  bool exists(const std::string& name) const;
  H5Array read_array(const std::string& name) const;
  std::vector<double> read_f64(const std::string& name,
                               std::vector<std::uint64_t>* dims = nullptr) const;
  std::vector<std::int64_t> read_i64(const std::string& name) const;
  std::vector<std::string> read_strings(const std::string& name) const;
  bool has_attr(const std::string& object, const std::string& key) const;
  std::string attr_string(const std::string& object, const std::string& key) const;
  double attr_f64(const std::string& object, const std::string& key) const;
  // Every dataset in the file, depth first, sorted by path.
  std::vector<H5DatasetInfo> datasets() const;
  H5DatasetInfo dataset_info(const std::string& name) const;
  // Numeric dataset as doubles, decoding bfloat16 (uint16 + dtype attribute) and float16 exactly.
  std::vector<double> read_numeric(const std::string& name) const;
  // Names of the members of a group ("/" for the root), sorted.
  std::vector<std::string> members(const std::string& group) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::int64_t file_ = -1;
};

}  // namespace attnsim
