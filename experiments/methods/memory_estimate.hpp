// Memory estimates of attention runs, checked against the limit
// (experiments/common/memory_limit.hpp) before anything large is allocated. They are upper
// estimates calibrated on peak RSS (issue 10): a run uses less, never much more.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// Peak bytes of one method on one input on `threads` threads, beyond the input itself: its
// working buffers (a pipeline's per-thread tile workspace grows with bq × bk whatever the input
// length) and its output.
double method_memory_bytes(const MethodConfig& method, const AttentionShape& s, int threads);
// What a process holds besides the data: the executable and its libraries, plus, for a method
// that uses them, the lazily loaded H100 tables of ex2/rcp/lg2.approx (numerics/special, about
// 176 MiB); for a list of methods, the tables once if any of them loads them.
double fixed_memory_bytes(const MethodConfig& method);
double fixed_memory_bytes(const std::vector<MethodConfig>& methods);
// Whether a method reads those tables (sage, amla target=h100, lean/splitkv exp=approx, and any
// pipeline stage naming an approx function or a Triton quantizer).
bool loads_special_tables(const MethodConfig& method);

// Peak bytes of a measured point as `attnsim run` computes it: the input, the FP64 golden
// reference and its working set, the method, the metrics' per-element ULP distances, and
// fixed_memory_bytes(method).
double point_memory_bytes(const MethodConfig& method, const AttentionShape& s, int threads);

// Bytes of the q, k, v tensors of `s` as float32, and of the golden reference in FP64.
double input_bytes(const AttentionShape& s);
double output_bytes(const AttentionShape& s);
// Working set of golden_attention (sim/golden) on `threads` threads.
double golden_memory_bytes(const AttentionShape& s, int threads);

// The shape of a dump's prefix from its metadata alone (no data read); nullopt when the datasets
// are missing or do not form an attention problem (the reader then says why).
std::optional<AttentionShape> dump_shape(const std::string& path, const std::string& prefix);
// Elements of q, k and v together as stored (whatever their rank), 0 if unreadable.
double dump_elements(const std::string& path, const std::string& prefix);
// Peak bytes of read_attention_dump: per stored element the value as stored (up to 8 bytes), its
// float32 copy and the input's.
double dump_read_bytes(const std::string& path, const std::string& prefix);

// Checks (check_memory) one measured point of `method` on a dump's prefix (`spec` empty) or on a
// synthetic spec, before anything is read or generated; `what` names it in the error.
void check_point_memory(const MethodConfig& method, const std::string& dump,
                        const std::string& prefix, const std::string& spec, int threads,
                        const std::string& what);

// The same for each prefix of a dump (or the synthetic spec when `dump` is empty), named
// "<verb> of <method> on <input>" in the error: run and attribute compute the groups one after the
// other, so the largest one decides.
void check_points_memory(const MethodConfig& method, const std::string& dump,
                         const std::vector<std::string>& prefixes, const std::string& spec,
                         int threads, const std::string& verb);

}  // namespace attnsim
