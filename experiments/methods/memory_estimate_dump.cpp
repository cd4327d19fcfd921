// Memory estimates of dumps from their metadata and the checks of runs on them (see
// memory_estimate.hpp): the HDF5 half, in attnsim_experiments.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/memory_estimate.hpp"

namespace attnsim {

std::optional<AttentionShape> dump_shape(const std::string& path, const std::string& prefix) {
  try {
    H5Reader r(path);
    std::vector<std::uint64_t> d[3];
    const char* names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      if (!r.exists(prefix + names[i])) return std::nullopt;
      d[i] = r.dataset_info(prefix + names[i]).dims;
      if (d[i].size() != 4) return std::nullopt;
      for (auto x : d[i])
        if (x == 0 || x > 0x7fffffffull) return std::nullopt;
    }
    AttentionShape s;
    s.batch = int(d[0][0]);
    s.heads_q = int(d[0][1]);
    s.len_q = int(d[0][2]);
    s.head_dim = int(d[0][3]);
    s.heads_kv = int(d[1][1]);
    s.len_kv = int(d[1][2]);
    s.head_dim_v = int(d[2][3]);
    if (!s.valid()) return std::nullopt;
    return s;
  } catch (const UsageError&) {
    return std::nullopt;
  }
}

double dump_elements(const std::string& path, const std::string& prefix) {
  try {
    H5Reader r(path);
    double n = 0;
    for (const char* name : {"q", "k", "v"}) {
      if (!r.exists(prefix + name)) continue;
      double e = 1;
      for (auto x : r.dataset_info(prefix + name).dims) e *= double(x);
      n += e;
    }
    return n;
  } catch (const UsageError&) {
    return 0;
  }
}

double dump_read_bytes(const std::string& path, const std::string& prefix) {
  return 16.0 * dump_elements(path, prefix);
}

void check_point_memory(const MethodConfig& method, const std::string& dump,
                        const std::string& prefix, const std::string& spec, int threads,
                        const std::string& what) {
  double need = 0;
  if (dump.empty()) {
    need = point_memory_bytes(method, synthetic_shape(spec), threads);
  } else {
    need = dump_read_bytes(dump, prefix);
    if (const auto s = dump_shape(dump, prefix))
      need = std::max(need, point_memory_bytes(method, *s, threads));
  }
  check_memory(need, what);
}

void check_points_memory(const MethodConfig& method, const std::string& dump,
                         const std::vector<std::string>& prefixes, const std::string& spec,
                         int threads, const std::string& verb) {
  for (const std::string& prefix : prefixes) {
    const std::string name = dump.empty() ? "synthetic:" + spec : dump_input_name(dump, prefix);
    check_point_memory(method, dump, prefix, spec, threads,
                       verb + " of " + method.short_name() + " on " + name);
  }
}

}  // namespace attnsim
