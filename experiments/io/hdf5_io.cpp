// Thin RAII layer over the HDF5 C API (see hdf5_io.hpp).
#include "experiments/io/hdf5_io.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "formats/float16.hpp"

namespace attnsim {

namespace {

// HDF5 prints its own multi-line error stacks by default; attnsim reports one line instead. The
// Debian library is built thread-safe, and there the automatic printing is a per-thread setting:
// every thread that touches a file (sweeps read dumps on OpenMP workers) turns it off first.
void silence_hdf5() {
  thread_local bool done = false;
  if (done) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  done = true;
}
struct SilenceHdf5 {
  SilenceHdf5() { silence_hdf5(); }
};
const SilenceHdf5 g_silence;

// The messages of this thread's HDF5 error stack, innermost (where the failure was detected)
// first. Must run right after the failing call: the next HDF5 call clears the stack.
std::vector<std::string> hdf5_errors() {
  std::vector<std::string> out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        std::string m = e->desc ? e->desc : "";
        if (m.empty() && e->func_name) m = e->func_name;
        std::replace(m.begin(), m.end(), '\n', ' ');
        auto* v = static_cast<std::vector<std::string>*>(data);
        if (!m.empty()) v->push_back(m + (e->func_name ? std::string(" @") + e->func_name : ""));
        return 0;
      },
      &out);
  return out;
}

// One line for a failed HDF5 call: `what`, and the innermost HDF5 message as the reason.
[[noreturn]] void fail_hdf5(const std::string& what) {
  const std::vector<std::string> errors = hdf5_errors();
  if (errors.empty()) throw UsageError(what);
  throw UsageError(what + " [HDF5: " + errors[0].substr(0, errors[0].find(" @")) + "]");
}

// Closes an HDF5 handle of any kind on scope exit.
struct Handle {
  hid_t id;
  explicit Handle(hid_t h) : id(h) {}
  ~Handle() {
    if (id < 0) return;
    switch (H5Iget_type(id)) {
      case H5I_DATASET:
        H5Dclose(id);
        break;
      case H5I_DATASPACE:
        H5Sclose(id);
        break;
      case H5I_DATATYPE:
        H5Tclose(id);
        break;
      case H5I_ATTR:
        H5Aclose(id);
        break;
      case H5I_GROUP:
        H5Gclose(id);
        break;
      case H5I_GENPROP_LST:
        H5Pclose(id);
        break;
      default:
        break;
    }
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id; }
};

hid_t check(hid_t h, const std::string& what) {
  if (h < 0) fail_hdf5(what);
  return h;
}
void check_status(herr_t s, const std::string& what) {
  if (s < 0) fail_hdf5(what);
}

// Refuses a numeric type whose layout fields do not fit its size. A corrupt file can carry an
// integer or float type with a zero precision or a bit field past its bytes; libhdf5's conversion
// to a native type then reads out of bounds and the process dies by SIGBUS (found by
// tests/experiments/cli/bad_inputs_test.py --long on byte-flipped dumps).
void check_type_layout(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_ENUM) {
    Handle base(H5Tget_super(type));
    if (base < 0) throw UsageError(what + " has a corrupt datatype (the file is corrupt)");
    check_type_layout(base, what);
    return;
  }
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return;
  const std::size_t bits = 8 * H5Tget_size(type), precision = H5Tget_precision(type);
  const int offset = H5Tget_offset(type);
  bool ok = bits >= 8 && bits <= 128 && precision >= 1 && offset >= 0 &&
            precision + std::size_t(offset) <= bits;
  if (ok && cls == H5T_FLOAT) {
    std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    ok = H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos < bits &&
         esize >= 1 && epos + esize <= bits && mpos + msize <= bits;
  }
  if (!ok) throw UsageError(what + " has a corrupt datatype (the file is corrupt)");
}

// Reads all of dataset `ds` (named `name` in `file`) as `mem_type`. A Fletcher-32 mismatch (a
// chunk whose bytes changed after attnsim wrote it) is named as such; any other failure (a chunk
// that does not decompress, data past the end of a truncated file, a failed type conversion) is
// `what` with HDF5's innermost message.
void read_dataset(hid_t ds, hid_t mem_type, void* buf, const std::string& name,
                  const std::string& file, const std::string& what) {
  {
    Handle type(check(H5Dget_type(ds), what));
    check_type_layout(type, "dataset '" + name + "' in '" + file + "'");
  }
  if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) return;
  const std::vector<std::string> errors = hdf5_errors();
  for (std::string e : errors) {
    // The filter's own message: "data error detected by Fletcher32 checksum".
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
    if (e.find("fletcher32") != std::string::npos) {
      throw UsageError("checksum mismatch in dataset '" + name + "' of '" + file +
                       "' (the file is corrupt)");
    }
  }
  if (errors.empty()) throw UsageError(what);
  throw UsageError(what + " [HDF5: " + errors[0].substr(0, errors[0].find(" @")) + "]");
}

// "float32", "uint16", "int64", "string", ... for messages.
std::string type_name(hid_t type) {
  const std::size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING:
      return "string";
    default:
      return "a non-numeric HDF5 type";
  }
}

// Chunked layout (about 1 MiB chunks), shuffle + gzip and the Fletcher-32 checksum for every
// dataset that holds data. Empty and rank-0 datasets stay contiguous: HDF5 cannot chunk them,
// and they have no data to checksum.
hid_t make_create_plist(const std::vector<std::uint64_t>& dims, std::size_t elem_bytes) {
  hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
  // No modification times in the file: the same data gives the same bytes.
  H5Pset_obj_track_times(plist, 0);
  std::uint64_t total = 1;
  for (auto d : dims) total *= d;
  if (dims.empty() || total == 0) return plist;
  // Chunks of about 1 MiB, whole trailing dimensions first (rows of a [b, h, t, d] tensor).
  std::vector<hsize_t> chunk(dims.begin(), dims.end());
  std::uint64_t bytes = total * elem_bytes;
  for (std::size_t i = 0; i < chunk.size() && bytes > (1u << 20); ++i) {
    while (chunk[i] > 1 && bytes > (1u << 20)) {
      bytes /= chunk[i];
      chunk[i] = (chunk[i] + 1) / 2;
      bytes *= chunk[i];
    }
  }
  check_status(H5Pset_chunk(plist, int(chunk.size()), chunk.data()), "cannot set HDF5 chunks");
  check_status(H5Pset_shuffle(plist), "cannot set the HDF5 shuffle filter");
  check_status(H5Pset_deflate(plist, 4), "cannot set the HDF5 gzip filter");
  // Last in the pipeline, so the checksum covers the bytes on disk: a flipped bit in a chunk is a
  // read error (HDF5 verifies Fletcher-32 on every read) instead of a silently different value.
  check_status(H5Pset_fletcher32(plist), "cannot set the HDF5 Fletcher-32 filter");
  return plist;
}

// ---- crashes of libhdf5 on corrupt files -------------------------------------------------------
//
// libhdf5 1.10 (Debian 12) can crash on corrupt metadata before it returns an error: a division by
// zero on a chunk dimension of 0 while opening a dataset (SIGFPE), an out-of-bounds copy on a bad
// storage message while reading one (SIGSEGV) (found by tests/experiments/cli/bad_inputs_test.py
// on byte-flipped files). While a thread is inside libhdf5 for an H5Reader (InHdf5 below), these
// signals end the process as a bad input does: temp files removed, one line naming the file, exit
// 2 (install_hdf5_crash_handlers, called by the executable's main()). Anywhere else they stay
// crashes.

thread_local int t_hdf5_depth = 0;
thread_local char t_hdf5_file[4096];  // the file being read, as one line

void write_stderr(const char* s) {
  for (std::size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= std::size_t(w);
  }
}

extern "C" void on_hdf5_crash(int sig) {
  if (t_hdf5_depth == 0) {
    // Not in libhdf5: a crash of attnsim itself, which must stay one (default action, core).
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  remove_registered_temp_files();
  write_stderr("attnsim: error: cannot read '");
  write_stderr(t_hdf5_file);
  write_stderr("': the HDF5 library crashed on its metadata (");
  write_stderr(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGFPE");
  write_stderr("; the file is corrupt)\n");
  ::_exit(2);
}

// Marks this thread as inside libhdf5 on behalf of the reader of `file`, for on_hdf5_crash.
class InHdf5 {
 public:
  explicit InHdf5(const std::string& file) {
    if (t_hdf5_depth++ > 0) return;
    const std::string line = one_line(file);
    const std::size_t n = std::min(line.size(), sizeof t_hdf5_file - 1);
    std::memcpy(t_hdf5_file, line.data(), n);
    t_hdf5_file[n] = '\0';
  }
  ~InHdf5() { --t_hdf5_depth; }
  InHdf5(const InHdf5&) = delete;
  InHdf5& operator=(const InHdf5&) = delete;
};

}  // namespace

void install_hdf5_crash_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    // On an alternate stack: corrupt metadata can also recurse until the stack overflows.
    static char stack[1 << 16];
    stack_t ss{};
    ss.ss_sp = stack;
    ss.ss_size = sizeof stack;
    ::sigaltstack(&ss, nullptr);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_hdf5_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE}) ::sigaction(sig, &sa, nullptr);
  });
}

H5Writer::H5Writer(const std::string& path) {
  silence_hdf5();
  out_ = std::make_unique<AtomicFile>(path);
  file_ = H5Fcreate(out_->temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw UsageError("cannot create HDF5 file '" + path + "'");
}

H5Writer::~H5Writer() {
  if (file_ >= 0) H5Fclose(file_);
}

void H5Writer::ensure_parent_groups(const std::string& name) {
  std::size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos) {
    const std::string g = name.substr(0, pos);
    if (g.empty() || g == "/") continue;
    if (H5Lexists(file_, g.c_str(), H5P_DEFAULT) <= 0) {
      Handle grp(check(H5Gcreate2(file_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       "cannot create group '" + g + "' in '" + out_->path() + "'"));
    }
  }
}

static void write_any(hid_t file, const std::string& file_name, const std::string& name,
                      const std::vector<std::uint64_t>& dims, hid_t file_type, hid_t mem_type,
                      std::size_t elem, const void* data) {
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  Handle space(check(H5Screate_simple(int(hd.size()), hd.data(), nullptr),
                     "bad dataspace for '" + name + "'"));
  Handle plist(make_create_plist(dims, elem));
  Handle ds(check(H5Dcreate2(file, name.c_str(), file_type, space, H5P_DEFAULT, plist, H5P_DEFAULT),
                  "cannot create dataset '" + name + "' in '" + file_name + "'"));
  std::uint64_t total = 1;
  for (auto d : dims) total *= d;
  if (total == 0) return;
  check_status(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
               "cannot write dataset '" + name + "' in '" + file_name + "'");
}

void H5Writer::write_f32(const std::string& name, const std::vector<std::uint64_t>& dims,
                         const float* d) {
  ensure_parent_groups(name);
  write_any(file_, out_->path(), name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d);
}
void H5Writer::write_f64(const std::string& name, const std::vector<std::uint64_t>& dims,
                         const double* d) {
  ensure_parent_groups(name);
  write_any(file_, out_->path(), name, dims, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 8, d);
}
void H5Writer::write_i64(const std::string& name, const std::vector<std::uint64_t>& dims,
                         const std::int64_t* d) {
  ensure_parent_groups(name);
  write_any(file_, out_->path(), name, dims, H5T_STD_I64LE, H5T_NATIVE_INT64, 8, d);
}
void H5Writer::write_u16(const std::string& name, const std::vector<std::uint64_t>& dims,
                         const std::uint16_t* d) {
  ensure_parent_groups(name);
  write_any(file_, out_->path(), name, dims, H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, d);
}
void H5Writer::write_u8(const std::string& name, const std::vector<std::uint64_t>& dims,
                        const std::uint8_t* d) {
  ensure_parent_groups(name);
  write_any(file_, out_->path(), name, dims, H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, d);
}

void H5Writer::write_f16(const std::string& name, const std::vector<std::uint64_t>& dims,
                         const std::uint16_t* bits) {
  ensure_parent_groups(name);
  // binary16: sign bit 15, exponent bits 10-14 (bias 15), mantissa bits 0-9.
  Handle type(H5Tcopy(H5T_IEEE_F32LE));
  check_status(H5Tset_fields(type, 15, 10, 5, 0, 10), "cannot build the float16 type");
  check_status(H5Tset_size(type, 2), "cannot build the float16 type");
  check_status(H5Tset_ebias(type, 15), "cannot build the float16 type");
  write_any(file_, out_->path(), name, dims, type, type, 2, bits);
}

void H5Writer::write_strings(const std::string& name, const std::vector<std::string>& values) {
  ensure_parent_groups(name);
  // Fixed-length, null-padded UTF-8 (as wide as the longest value): HDF5 refuses filters on
  // variable-length strings, and these columns get the checksum like every other dataset.
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  Handle type(H5Tcopy(H5T_C_S1));
  check_status(H5Tset_size(type, width),
               "cannot build a string type of width " + std::to_string(width));
  check_status(H5Tset_strpad(type, H5T_STR_NULLPAD), "cannot build the string type");
  check_status(H5Tset_cset(type, H5T_CSET_UTF8), "cannot build the string type");
  std::vector<char> buf(values.size() * width, '\0');
  for (std::size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), buf.begin() + std::ptrdiff_t(i * width));
  write_any(file_, out_->path(), name, {values.size()}, type, type, width, buf.data());
}

static hid_t open_object(hid_t file, const std::string& object, const std::string& file_name) {
  return check(H5Oopen(file, object.c_str(), H5P_DEFAULT),
               "no object '" + object + "' in '" + file_name + "'");
}

void H5Writer::attr_string(const std::string& object, const std::string& key,
                           const std::string& value) {
  Handle obj(open_object(file_, object, out_->path()));
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "' in '" + out_->path() + "'"));
  const char* p = value.c_str();
  check_status(H5Awrite(attr, type, &p),
               "cannot write attribute '" + key + "' in '" + out_->path() + "'");
}

void H5Writer::attr_f64(const std::string& object, const std::string& key, double value) {
  Handle obj(open_object(file_, object, out_->path()));
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "' in '" + out_->path() + "'"));
  check_status(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value),
               "cannot write attribute '" + key + "' in '" + out_->path() + "'");
}

void H5Writer::attr_i64(const std::string& object, const std::string& key, std::int64_t value) {
  Handle obj(open_object(file_, object, out_->path()));
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "' in '" + out_->path() + "'"));
  check_status(H5Awrite(attr, H5T_NATIVE_INT64, &value),
               "cannot write attribute '" + key + "' in '" + out_->path() + "'");
}

void H5Writer::commit() {
  if (file_ >= 0) {
    const herr_t s = H5Fclose(file_);
    file_ = -1;
    check_status(s, "cannot finish HDF5 file '" + out_->path() + "'");
  }
  out_->commit();
}

H5Reader::H5Reader(const std::string& path) : path_(path) {
  const InHdf5 in_hdf5(path);
  silence_hdf5();
  // Before HDF5 opens it: a FIFO would block H5Fis_hdf5 forever.
  check_input_file(path);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw UsageError("'" + path + "' is not a readable HDF5 file");
  }
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail_hdf5("cannot open HDF5 file '" + path + "' (truncated or corrupt?)");
}

H5Reader::~H5Reader() {
  const InHdf5 in_hdf5(path_);
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::exists(const std::string& name) const {
  const InHdf5 in_hdf5(path_);
  // H5Lexists fails (rather than returning 0) when an intermediate group is missing.
  std::size_t pos = 0;
  while ((pos = name.find('/', pos + 1)) != std::string::npos) {
    if (H5Lexists(file_, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
}

static std::vector<std::uint64_t> dataset_dims(hid_t ds, const std::string& where) {
  Handle space(check(H5Dget_space(ds), "cannot read the shape of " + where));
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw UsageError("cannot read the shape of " + where);
  std::vector<hsize_t> d(std::size_t(rank), 0);
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return {d.begin(), d.end()};
}

static std::size_t count_of(const std::vector<std::uint64_t>& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= std::size_t(d);
  return n;
}

bool H5Reader::has_attr(const std::string& object, const std::string& key) const {
  const InHdf5 in_hdf5(path_);
  if (object != "/" && !exists(object)) return false;
  hid_t obj = H5Oopen(file_, object.c_str(), H5P_DEFAULT);
  if (obj < 0) return false;
  const bool r = H5Aexists(obj, key.c_str()) > 0;
  H5Oclose(obj);
  return r;
}

std::string H5Reader::attr_string(const std::string& object, const std::string& key) const {
  const InHdf5 in_hdf5(path_);
  Handle obj(open_object(file_, object, path_));
  Handle attr(check(H5Aopen(obj, key.c_str(), H5P_DEFAULT),
                    "no attribute '" + key + "' on '" + object + "' in '" + path_ + "'"));
  Handle type(H5Aget_type(attr));
  if (H5Tget_class(type) != H5T_STRING) {
    throw UsageError("attribute '" + key + "' on '" + object + "' in '" + path_ +
                     "' is not a string");
  }
  if (H5Tis_variable_str(type) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(type));  // HDF5 does not convert between ASCII and UTF-8
    char* p = nullptr;
    check_status(H5Aread(attr, mt, &p), "cannot read attribute '" + key + "' in '" + path_ + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(type);
  std::string s(n, '\0');
  check_status(H5Aread(attr, type, s.data()),
               "cannot read attribute '" + key + "' in '" + path_ + "'");
  s.resize(std::strlen(s.c_str()));
  return s;
}

double H5Reader::attr_f64(const std::string& object, const std::string& key) const {
  const InHdf5 in_hdf5(path_);
  Handle obj(open_object(file_, object, path_));
  Handle attr(check(H5Aopen(obj, key.c_str(), H5P_DEFAULT),
                    "no attribute '" + key + "' on '" + object + "' in '" + path_ + "'"));
  Handle type(H5Aget_type(attr));
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER && cls != H5T_ENUM) {
    throw UsageError("attribute '" + key + "' on '" + object + "' in '" + path_ +
                     "' is not a number");
  }
  check_type_layout(type, "attribute '" + key + "' on '" + object + "' in '" + path_ + "'");
  // One value: H5Aread writes every element, and an array attribute would overrun `v`.
  Handle space(check(H5Aget_space(attr), "cannot read attribute '" + key + "' in '" + path_ + "'"));
  if (H5Sget_simple_extent_npoints(space) != 1) {
    throw UsageError("attribute '" + key + "' on '" + object + "' in '" + path_ +
                     "' is not a single number");
  }
  double v = 0;
  // h5py stores Python bools as an enum of int8; the conversion to double handles it.
  if (cls == H5T_ENUM) {
    std::int8_t b = 0;
    check_status(H5Aread(attr, H5T_NATIVE_INT8, &b),
                 "cannot read attribute '" + key + "' in '" + path_ + "'");
    return b;
  }
  check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, &v),
               "cannot read attribute '" + key + "' in '" + path_ + "'");
  return v;
}

H5Array H5Reader::read_array(const std::string& name) const {
  const InHdf5 in_hdf5(path_);
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  H5Array out;
  out.dims = dataset_dims(ds, where);
  const std::size_t n = count_of(out.dims);
  Handle type(H5Dget_type(ds));
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  out.data.resize(n);
  const std::string failed = "cannot read " + where + " (truncated or corrupt?)";
  std::string dtype_attr;
  if (has_attr(name, "dtype")) {
    try {
      dtype_attr = attr_string(name, "dtype");
    } catch (const UsageError&) {  // a dtype attribute that is not a string says nothing here
    }
  }
  if (dtype_attr == "bfloat16") {
    if (cls != H5T_INTEGER || size != 2 || H5Tget_sign(type) != H5T_SGN_NONE) {
      throw UsageError(where + " has the attribute dtype = \"bfloat16\" but holds " +
                       type_name(type) + " (bfloat16 is stored as uint16 bits)");
    }
    std::vector<std::uint16_t> bits(n);
    read_dataset(ds, H5T_NATIVE_UINT16, bits.data(), name, path_, failed);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = decode_f32<bf16>(bits[i]);
    out.dtype = "bfloat16";
    return out;
  }
  if (cls != H5T_FLOAT || (size != 2 && size != 4 && size != 8)) {
    throw UsageError(where +
                     " has an unsupported dtype (float16, bfloat16 [uint16 + dtype attribute], "
                     "float32 or float64 expected)");
  }
  if (size == 2) {
    // h5py's float16 is an IEEE half; read the raw bits and decode exactly.
    std::vector<std::uint16_t> bits(n);
    read_dataset(ds, type, bits.data(), name, path_, failed);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = decode_f32<fp16>(bits[i]);
    out.dtype = "float16";
  } else if (size == 4) {
    read_dataset(ds, H5T_NATIVE_FLOAT, out.data.data(), name, path_, failed);
    out.dtype = "float32";
  } else {
    std::vector<double> tmp(n);
    read_dataset(ds, H5T_NATIVE_DOUBLE, tmp.data(), name, path_, failed);
    for (std::size_t i = 0; i < n; ++i) out.data[i] = float(tmp[i]);
    out.dtype = "float64";
  }
  return out;
}

std::vector<double> H5Reader::read_f64(const std::string& name,
                                       std::vector<std::uint64_t>* dims) const {
  const InHdf5 in_hdf5(path_);
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  const auto d = dataset_dims(ds, where);
  if (dims) *dims = d;
  std::vector<double> out(count_of(d));
  if (!out.empty()) {
    read_dataset(ds, H5T_NATIVE_DOUBLE, out.data(), name, path_,
                 "cannot read " + where + " as numbers");
  }
  return out;
}

std::vector<std::int64_t> H5Reader::read_i64(const std::string& name) const {
  const InHdf5 in_hdf5(path_);
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  std::vector<std::int64_t> out(count_of(dataset_dims(ds, where)));
  if (!out.empty()) {
    read_dataset(ds, H5T_NATIVE_INT64, out.data(), name, path_,
                 "cannot read " + where + " as integers");
  }
  return out;
}

std::vector<std::string> H5Reader::read_strings(const std::string& name) const {
  const InHdf5 in_hdf5(path_);
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  const std::size_t n = count_of(dataset_dims(ds, where));
  Handle type(H5Dget_type(ds));
  if (H5Tget_class(type) != H5T_STRING) throw UsageError(where + " is not a string dataset");
  std::vector<std::string> out;
  if (H5Tis_variable_str(type) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(type));
    std::vector<char*> ptrs(n, nullptr);
    if (n > 0) read_dataset(ds, mt, ptrs.data(), name, path_, "cannot read " + where);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n > 0) {
      Handle space(H5Dget_space(ds));
      H5Dvlen_reclaim(mt, space, H5P_DEFAULT, ptrs.data());
    }
  } else {
    // The width comes from the file: a corrupt one can be gigabytes per string.
    const std::size_t w = H5Tget_size(type);
    check_memory(double(n) * double(w), "reading the strings of " + where);
    std::vector<char> buf(n * w + 1, '\0');
    if (n > 0) read_dataset(ds, type, buf.data(), name, path_, "cannot read " + where);
    for (std::size_t i = 0; i < n; ++i)
      out.emplace_back(std::string(buf.data() + i * w, strnlen(buf.data() + i * w, w)));
  }
  return out;
}

H5DatasetInfo H5Reader::dataset_info(const std::string& name) const {
  const InHdf5 in_hdf5(path_);
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  H5DatasetInfo info;
  info.name = name;
  info.dims = dataset_dims(ds, where);
  Handle type(H5Dget_type(ds));
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      info.kind = 'f';
      break;
    case H5T_INTEGER:
      info.kind = H5Tget_sign(type) == H5T_SGN_NONE ? 'u' : 'i';
      break;
    case H5T_STRING:
      info.kind = 's';
      break;
    default:
      info.kind = '?';
      break;
  }
  info.size = info.kind == 's' ? 0 : H5Tget_size(type);
  if (has_attr(name, "dtype")) {
    try {
      info.dtype_attr = attr_string(name, "dtype");
    } catch (const UsageError&) {
    }
  }
  return info;
}

std::vector<H5DatasetInfo> H5Reader::datasets() const {
  const InHdf5 in_hdf5(path_);
  std::vector<H5DatasetInfo> out;
  std::vector<std::string> stack{""};
  // Each group once, by its address in the file: a link back to a group above it (corrupt
  // metadata, or a file made so) would otherwise make this walk endless.
  std::vector<haddr_t> seen;
  H5O_info_t root;
  if (H5Oget_info2(file_, &root, H5O_INFO_BASIC) >= 0) seen.push_back(root.addr);
  while (!stack.empty()) {
    const std::string g = stack.back();
    stack.pop_back();
    for (const auto& m : members(g.empty() ? "/" : g)) {
      const std::string name = g.empty() ? m : g + "/" + m;
      hid_t obj = H5Oopen(file_, name.c_str(), H5P_DEFAULT);
      if (obj < 0) continue;  // dangling link
      const H5I_type_t t = H5Iget_type(obj);
      H5O_info_t info;
      const bool known = H5Oget_info2(obj, &info, H5O_INFO_BASIC) >= 0;
      H5Oclose(obj);
      if (t == H5I_GROUP) {
        if (!known || std::find(seen.begin(), seen.end(), info.addr) != seen.end()) continue;
        seen.push_back(info.addr);
        stack.push_back(name);
      }
      if (t == H5I_DATASET) out.push_back(dataset_info(name));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const H5DatasetInfo& a, const H5DatasetInfo& b) { return a.name < b.name; });
  return out;
}

std::vector<double> H5Reader::read_numeric(const std::string& name) const {
  const H5DatasetInfo info = dataset_info(name);
  if (info.kind == 's' || info.kind == '?') {
    throw UsageError("dataset '" + name + "' in '" + path_ + "' is not numeric");
  }
  // read_array decodes float16 and bfloat16 exactly, and refuses a bfloat16 attribute on a
  // dataset that is not uint16.
  if ((info.kind == 'f' && info.size == 2) || info.dtype_attr == "bfloat16") {
    const H5Array a = read_array(name);
    return {a.data.begin(), a.data.end()};
  }
  return read_f64(name);
}

std::vector<std::string> H5Reader::members(const std::string& group) const {
  const InHdf5 in_hdf5(path_);
  std::vector<std::string> names;
  Handle g(check(H5Gopen2(file_, group.c_str(), H5P_DEFAULT),
                 "no group '" + group + "' in '" + path_ + "'"));
  H5G_info_t info;
  check_status(H5Gget_info(g, &info), "cannot list group '" + group + "' in '" + path_ + "'");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) continue;
    std::string s(std::size_t(len) + 1, '\0');
    H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT);
    s.resize(std::size_t(len));
    names.push_back(s);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace attnsim
