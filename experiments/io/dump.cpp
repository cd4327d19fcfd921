// Attention tensor dumps in HDF5.
#include "experiments/io/dump.hpp"
#include "experiments/io/varlen.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "experiments/common/error.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/io/input_checks.hpp"

namespace attnsim {

std::vector<std::string> dump_prefixes(const std::string& path) {
  H5Reader r(path);
  // Every group that holds a dataset `q`, at any depth ("blocks/3/q" too), the root first, then
  // in path order: nothing in the file is skipped silently.
  std::vector<std::string> out;
  for (const H5DatasetInfo& d : r.datasets()) {
    if (d.name == "q") {
      out.insert(out.begin(), "");
    } else if (d.name.size() > 2 && d.name.compare(d.name.size() - 2, 2, "/q") == 0) {
      out.push_back(d.name.substr(0, d.name.size() - 1));
    }
  }
  if (out.empty()) throw UsageError("'" + path + "' has no dataset 'q' (nor groups with one)");
  return out;
}

std::vector<LaunchSeq> dump_varlen(const std::string& path, const std::string& prefix) {
  H5Reader r(path);
  const std::string where = "'" + path + "'" + (prefix.empty() ? "" : " group " + prefix);
  const bool hq = r.exists(prefix + "cu_seqlens_q"), hk = r.exists(prefix + "cu_seqlens_k");
  if (!hq && !hk) return {};
  if (hq != hk) throw UsageError(where + " has one of cu_seqlens_q and cu_seqlens_k: a varlen dump needs both");
  std::vector<std::uint64_t> dims[3];
  for (int t = 0; t < 3; ++t) dims[t] = r.dataset_info(prefix + "qkv"[t]).dims;
  const AttentionShape s = attention_shape_of(dims, where);
  if (s.batch != 1)
    throw UsageError(where + ": a varlen dump packs its sequences along the tokens of batch 1, "
                     "got batch " + std::to_string(s.batch));
  return varlen_sequences(r.read_i64(prefix + "cu_seqlens_q"), r.read_i64(prefix + "cu_seqlens_k"),
                          s.len_q, s.len_kv, where);
}

AttentionInput read_attention_dump(const std::string& path, const std::string& prefix,
                                   bool allow_nonfinite, DumpInfo* info) {
  H5Reader r(path);
  const std::string where = "'" + path + "'" + (prefix.empty() ? "" : " group " + prefix);
  // The shapes first, from the metadata: a dump that is not an attention problem is refused before
  // its data is read.
  std::vector<std::uint64_t> dims[3];
  for (int t = 0; t < 3; ++t) dims[t] = r.dataset_info(prefix + "qkv"[t]).dims;
  AttentionInput in;
  in.shape = attention_shape_of(dims, where);
  const H5Array q = r.read_array(prefix + "q");
  const H5Array k = r.read_array(prefix + "k");
  const H5Array v = r.read_array(prefix + "v");
  if (!allow_nonfinite) {
    check_finite(q.data.data(), q.data.size(), q.dims, "q in " + where);
    check_finite(k.data.data(), k.data.size(), k.dims, "k in " + where);
    check_finite(v.data.data(), v.data.size(), v.dims, "v in " + where);
  }
  in.q = q.data;
  in.k = k.data;
  in.v = v.data;
  // One dtype for all three; a mixed dump counts as float32 (its values are used as they are).
  in.dtype = q.dtype == k.dtype && k.dtype == v.dtype ? q.dtype : "float32";
  const std::string group = prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1);
  // causal is a flag and sm_scale a softmax scale: a NaN or Inf scale would make every output
  // NaN, measured as if it were the method's error.
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "causal")) {
      const double c = r.attr_f64(obj, "causal");
      if (c != 0.0 && c != 1.0) {
        throw UsageError("attribute causal = " + format_number(c) + " in " + where +
                         " must be 0 or 1");
      }
      in.causal = c != 0.0;
      break;
    }
  }
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "sm_scale")) {
      in.sm_scale = r.attr_f64(obj, "sm_scale");
      if (!std::isfinite(in.sm_scale) || in.sm_scale <= 0) {
        throw UsageError("attribute sm_scale = " + format_number(in.sm_scale) + " in " + where +
                         " must be a finite number > 0");
      }
      break;
    }
  }
  // The same attributes on a dataset (f["q"].attrs["causal"] = 1, the likeliest slip when writing
  // a dump by hand) are not where attnsim reads them: one that disagrees with what the run uses
  // would silently run another problem, so it is refused; one that agrees is harmless.
  for (const char* t : {"q", "k", "v"}) {
    const std::string ds = prefix + t;
    if (r.has_attr(ds, "causal") && (r.attr_f64(ds, "causal") != 0.0) != in.causal) {
      throw UsageError("attribute causal = " + format_number(r.attr_f64(ds, "causal")) +
                       " on dataset '" + ds + "' of '" + path +
                       "' is not read (attnsim reads causal from the layer group or the file "
                       "root, e.g. f.attrs['causal'] = 1), and this run would be " +
                       (in.causal ? "causal" : "non-causal") +
                       ": move it to the group or the root, or remove it");
    }
    if (r.has_attr(ds, "sm_scale") && r.attr_f64(ds, "sm_scale") != in.scale()) {
      throw UsageError("attribute sm_scale = " + format_number(r.attr_f64(ds, "sm_scale")) +
                       " on dataset '" + ds + "' of '" + path +
                       "' is not read (attnsim reads sm_scale from the layer group or the file "
                       "root, e.g. f.attrs['sm_scale'] = 0.125), and this run would use " +
                       format_number(in.scale()) +
                       ": move it to the group or the root, or "
                       "remove it");
    }
  }
  if (info) {
    info->path = path;
    info->prefix = prefix;
    info->dtype = q.dtype;
    info->source = r.has_attr("/", "source") ? r.attr_string("/", "source") : "";
  }
  return in;
}

void check_attention_dumps(const std::string& path, const std::vector<std::string>& prefixes,
                           bool allow_nonfinite) {
  for (const std::string& prefix : prefixes) read_attention_dump(path, prefix, allow_nonfinite);
}

void write_attention_dump(const std::string& path, const AttentionInput& in,
                          const std::string& source) {
  const AttentionShape& s = in.shape;
  H5Writer w(path);
  auto u = [](int x) { return std::uint64_t(x); };
  w.write_f32("q", {u(s.batch), u(s.heads_q), u(s.len_q), u(s.head_dim)}, in.q.data());
  w.write_f32("k", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim)}, in.k.data());
  w.write_f32("v", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim_v)}, in.v.data());
  w.attr_i64("/", "causal", in.causal ? 1 : 0);
  if (in.sm_scale != 0.0) w.attr_f64("/", "sm_scale", in.sm_scale);
  w.attr_string("/", "source", source);
  w.attr_i64("/", "rope_applied", 0);
  w.commit();
}

std::vector<std::string> select_dump_prefixes(const std::string& path, const std::string& group) {
  std::vector<std::string> prefixes = dump_prefixes(path);
  if (group.empty()) return prefixes;
  const std::string want = group + "/";
  for (const auto& p : prefixes)
    if (p == want) return {want};
  throw UsageError("'" + path + "' has no group '" + group + "' with q, k, v");
}

DumpSelection select_dump_input(const std::string& text) {
  std::error_code ec;
  const auto colon = text.rfind(':');
  if (!std::filesystem::exists(text, ec) && colon != std::string::npos && colon > 0 &&
      colon + 1 < text.size() && std::filesystem::exists(text.substr(0, colon), ec)) {
    const std::string file = text.substr(0, colon);
    return {file, select_dump_prefixes(file, text.substr(colon + 1))};
  }
  return {text, dump_prefixes(text)};
}

std::string dump_input_name(const std::string& path, const std::string& prefix) {
  return path + (prefix.empty() ? "" : ":" + prefix.substr(0, prefix.size() - 1));
}

bool dump_causal(const std::string& path, const std::string& prefix) {
  try {
    H5Reader r(path);
    const std::string group = prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1);
    for (const std::string& obj : {group, std::string("/")})
      if (r.has_attr(obj, "causal")) return r.attr_f64(obj, "causal") != 0.0;
  } catch (const UsageError&) {
  }
  return false;
}


}  // namespace attnsim
