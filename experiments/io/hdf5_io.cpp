// Thin RAII layer over the HDF5 C API (see hdf5_io.hpp).
#include "experiments/io/hdf5_io.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstring>

#include "experiments/cli/error.hpp"
#include "formats/float16.hpp"

namespace attnsim {

namespace {

// HDF5 prints its own multi-line error stacks by default; attnsim reports one line instead.
struct SilenceHdf5 {
  SilenceHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
const SilenceHdf5 g_silence;

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
  if (h < 0) throw UsageError(what);
  return h;
}
void check_status(herr_t s, const std::string& what) {
  if (s < 0) throw UsageError(what);
}

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
  H5Pset_chunk(plist, int(chunk.size()), chunk.data());
  H5Pset_shuffle(plist);
  H5Pset_deflate(plist, 4);
  return plist;
}

}  // namespace

H5Writer::H5Writer(const std::string& path) {
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
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle ds(
      check(H5Dcreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
            "cannot create dataset '" + name + "'"));
  if (n > 0)
    check_status(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
                 "cannot write dataset '" + name + "'");
}

static hid_t open_object(hid_t file, const std::string& object) {
  return check(H5Oopen(file, object.c_str(), H5P_DEFAULT), "no object '" + object + "'");
}

void H5Writer::attr_string(const std::string& object, const std::string& key,
                           const std::string& value) {
  hid_t obj = open_object(file_, object);
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "'"));
  const char* p = value.c_str();
  H5Awrite(attr, type, &p);
  H5Oclose(obj);
}

void H5Writer::attr_f64(const std::string& object, const std::string& key, double value) {
  hid_t obj = open_object(file_, object);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "'"));
  H5Awrite(attr, H5T_NATIVE_DOUBLE, &value);
  H5Oclose(obj);
}

void H5Writer::attr_i64(const std::string& object, const std::string& key, std::int64_t value) {
  hid_t obj = open_object(file_, object);
  Handle space(H5Screate(H5S_SCALAR));
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  Handle attr(check(H5Acreate2(obj, key.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute '" + key + "'"));
  H5Awrite(attr, H5T_NATIVE_INT64, &value);
  H5Oclose(obj);
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
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw UsageError("'" + path + "' is not a readable HDF5 file");
  }
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) throw UsageError("cannot open HDF5 file '" + path + "' (truncated or corrupt?)");
}

H5Reader::~H5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::exists(const std::string& name) const {
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
  if (object != "/" && !exists(object)) return false;
  hid_t obj = H5Oopen(file_, object.c_str(), H5P_DEFAULT);
  if (obj < 0) return false;
  const bool r = H5Aexists(obj, key.c_str()) > 0;
  H5Oclose(obj);
  return r;
}

std::string H5Reader::attr_string(const std::string& object, const std::string& key) const {
  hid_t obj = open_object(file_, object);
  Handle attr(check(H5Aopen(obj, key.c_str(), H5P_DEFAULT),
                    "no attribute '" + key + "' on '" + object + "'"));
  H5Oclose(obj);
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
    check_status(H5Aread(attr, mt, &p), "cannot read attribute '" + key + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(type);
  std::string s(n, '\0');
  check_status(H5Aread(attr, type, s.data()), "cannot read attribute '" + key + "'");
  s.resize(std::strlen(s.c_str()));
  return s;
}

double H5Reader::attr_f64(const std::string& object, const std::string& key) const {
  hid_t obj = open_object(file_, object);
  Handle attr(check(H5Aopen(obj, key.c_str(), H5P_DEFAULT),
                    "no attribute '" + key + "' on '" + object + "'"));
  H5Oclose(obj);
  Handle type(H5Aget_type(attr));
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER && cls != H5T_ENUM) {
    throw UsageError("attribute '" + key + "' on '" + object + "' in '" + path_ +
                     "' is not a number");
  }
  double v = 0;
  // h5py stores Python bools as an enum of int8; the conversion to double handles it.
  if (cls == H5T_ENUM) {
    std::int8_t b = 0;
    check_status(H5Aread(attr, H5T_NATIVE_INT8, &b), "cannot read attribute '" + key + "'");
    return b;
  }
  check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), "cannot read attribute '" + key + "'");
  return v;
}

H5Array H5Reader::read_array(const std::string& name) const {
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
  if (cls == H5T_INTEGER && size == 2 && has_attr(name, "dtype") &&
      attr_string(name, "dtype") == "bfloat16") {
    std::vector<std::uint16_t> bits(n);
    check_status(H5Dread(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()),
                 "cannot read " + where + " (truncated or corrupt?)");
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
    check_status(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()),
                 "cannot read " + where + " (truncated or corrupt?)");
    for (std::size_t i = 0; i < n; ++i) out.data[i] = decode_f32<fp16>(bits[i]);
    out.dtype = "float16";
  } else if (size == 4) {
    check_status(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data()),
                 "cannot read " + where + " (truncated or corrupt?)");
    out.dtype = "float32";
  } else {
    std::vector<double> tmp(n);
    check_status(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp.data()),
                 "cannot read " + where + " (truncated or corrupt?)");
    for (std::size_t i = 0; i < n; ++i) out.data[i] = float(tmp[i]);
    out.dtype = "float64";
  }
  return out;
}

std::vector<double> H5Reader::read_f64(const std::string& name,
                                       std::vector<std::uint64_t>* dims) const {
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  const auto d = dataset_dims(ds, where);
  if (dims) *dims = d;
  std::vector<double> out(count_of(d));
  if (!out.empty()) {
    check_status(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                 "cannot read " + where + " as numbers");
  }
  return out;
}

std::vector<std::int64_t> H5Reader::read_i64(const std::string& name) const {
  const std::string where = "dataset '" + name + "' in '" + path_ + "'";
  if (!exists(name)) throw UsageError("missing " + where);
  Handle ds(check(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), "cannot open " + where));
  std::vector<std::int64_t> out(count_of(dataset_dims(ds, where)));
  if (!out.empty()) {
    check_status(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                 "cannot read " + where + " as integers");
  }
  return out;
}

std::vector<std::string> H5Reader::read_strings(const std::string& name) const {
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
    if (n > 0)
      check_status(H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
                   "cannot read " + where);
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n > 0) {
      Handle space(H5Dget_space(ds));
      H5Dvlen_reclaim(mt, space, H5P_DEFAULT, ptrs.data());
    }
  } else {
    const std::size_t w = H5Tget_size(type);
    std::vector<char> buf(n * w + 1, '\0');
    if (n > 0)
      check_status(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()),
                   "cannot read " + where);
    for (std::size_t i = 0; i < n; ++i)
      out.emplace_back(std::string(buf.data() + i * w, strnlen(buf.data() + i * w, w)));
  }
  return out;
}

H5DatasetInfo H5Reader::dataset_info(const std::string& name) const {
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
  std::vector<H5DatasetInfo> out;
  std::vector<std::string> stack{""};
  while (!stack.empty()) {
    const std::string g = stack.back();
    stack.pop_back();
    for (const auto& m : members(g.empty() ? "/" : g)) {
      const std::string name = g.empty() ? m : g + "/" + m;
      hid_t obj = H5Oopen(file_, name.c_str(), H5P_DEFAULT);
      if (obj < 0) continue;  // dangling link
      const H5I_type_t t = H5Iget_type(obj);
      H5Oclose(obj);
      if (t == H5I_GROUP) stack.push_back(name);
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
  if ((info.kind == 'f' && info.size == 2) ||
      (info.kind == 'u' && info.size == 2 && info.dtype_attr == "bfloat16")) {
    const H5Array a = read_array(name);
    return {a.data.begin(), a.data.end()};
  }
  return read_f64(name);
}

std::vector<std::string> H5Reader::members(const std::string& group) const {
  std::vector<std::string> names;
  Handle g(check(H5Gopen2(file_, group.c_str(), H5P_DEFAULT),
                 "no group '" + group + "' in '" + path_ + "'"));
  H5G_info_t info;
  check_status(H5Gget_info(g, &info), "cannot list group '" + group + "'");
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
