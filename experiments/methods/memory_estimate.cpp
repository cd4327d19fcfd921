// Memory estimates of attention runs from their shapes (see memory_estimate.hpp); the estimates of
// dumps, read from their metadata, are in memory_estimate_dump.cpp (HDF5: not in attnsim_core).
#include "experiments/methods/memory_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"

namespace attnsim {

namespace {

// What every process holds whatever it computes: the executable, libhdf5, the C++ and OpenMP
// runtimes (peak RSS of a 64-token golden, flash, turbo or kivi run: 17-18 MiB).
constexpr double kProcess = 24.0 * (1 << 20);
// The H100 tables of ex2/rcp/lg2.approx (numerics/special.cpp), loaded on a method's first use:
// ex2 2 x 32 MiB, rcp 32 MiB, lg2 64 MiB, each read through an 8 MiB buffer. Peak RSS of a
// 64-token run: sage2 sm90 187 MiB (all three), sage1 123 MiB, splitkv 123 MiB, flash with
// exp=ex2.approx.ftz 91 MiB, amla target=h100 93 MiB.
constexpr double kTables = 176.0 * (1 << 20);

double as_double(int x) { return double(x); }

}  // namespace

double input_bytes(const AttentionShape& s) {
  return 4.0 * (double(s.q_size()) + double(s.k_size()) + double(s.v_size()));
}

double output_bytes(const AttentionShape& s) {
  // O and the log-sum-exp, in FP64.
  return 8.0 * double(s.o_size()) + 8.0 * as_double(s.batch) * s.heads_q * s.len_q;
}

double golden_memory_bytes(const AttentionShape& s, int threads) {
  // Per thread (sim/golden/golden.cpp): one KV head in FP64, a score block of chunk_rows × len_kv
  // and the chunk's Q and O rows.
  const double kv = as_double(s.len_kv);
  const double chunk = std::clamp((1 << 22) / std::max(s.len_kv, 1), 16, 256);
  const double per_thread = 8.0 * kv * (s.head_dim + s.head_dim_v) + 8.0 * chunk * kv +
                            8.0 * chunk * (s.head_dim + s.head_dim_v);
  return double(std::max(threads, 1)) * per_thread + output_bytes(s);
}

double method_memory_bytes(const MethodConfig& method, const AttentionShape& s, int threads) {
  const double in = input_bytes(s), out = output_bytes(s);
  const double t = double(std::max(threads, 1));
  if (method.spec->name == "golden") return golden_memory_bytes(s, threads) + out;
  // The pipeline's tiles (the preset's, with the stage overrides), from the shape alone.
  double bq = 0, bk = 0;
  if (method.is_pipeline()) {
    AttentionInput shape_only;
    shape_only.shape = s;
    try {
      const Pipeline p = method.pipeline(shape_only);
      bq = p.tile.block_q;
      bk = p.tile.block_kv + 64.0;
    } catch (const UsageError&) {
      bq = bk = 0;  // the run itself reports what cannot be combined
    }
  }
  if (bq > 0 && bk > 0) {
    // The attention pipeline (sim/pipeline): the prepared operands (decoded values, encodings,
    // scales: about three copies of the input), and per thread a tile workspace of about 36 bytes
    // per score of a bq × bk tile (FP64 and FP32 scores and P, P as decoded and as encodings)
    // plus the transposed V tile and the row states. Measured: 27 bytes per score at bq = bk =
    // 4096 with acc=fp32.
    // The workspace grows on a thread's first tile, so only threads that get a tile (batch ×
    // heads × query blocks of them) hold one; every thread holds its bq row states.
    const double dv = s.head_dim_v;
    const double tiles = as_double(s.batch) * s.heads_q * std::ceil(s.len_q / bq);
    const double workspace = 36.0 * bq * bk + 16.0 * dv * bk;
    return 3.0 * in + std::min(t, tiles) * workspace + t * 16.0 * bq * (dv + 8) + out;
  }
  // SageAttention (sim/sage) and any other kernel with fixed tiles: quantized and smoothed
  // copies of the inputs and FP64 intermediates of O; fitted to the peak RSS of sage1 and sage2
  // on three shapes (at most 3.1 × input + 1.9 × output + tables), with a margin.
  return 6.0 * in + 3.0 * out;
}

bool loads_special_tables(const MethodConfig& m) {
  const std::string& name = m.spec->name;
  if (name == "golden") return false;
  if (name == "sage1" || name == "sage2") return true;  // ex2.approx.ftz, rcp (Triton's division)
  auto value = [&](const char* key) {
    const auto it = m.values.find(key);
    return it == m.values.end() ? std::string() : it->second;
  };
  if (name == "amla") return value("target") == "h100";                      // ex2.approx.ftz
  if (name == "lean" || name == "splitkv") return value("exp") == "approx";  // ex2, lg2
  // The pipeline presets (flash, turbo, kivi, ...): a stage that names an approximate function
  // (exp=ex2.approx, norm=rcp.approx.ftz) or a Triton quantizer (div.full: rcp).
  const std::string c = m.canonical();
  return c.find("approx") != std::string::npos || c.find("triton") != std::string::npos;
}

double fixed_memory_bytes(const MethodConfig& method) {
  return kProcess + (loads_special_tables(method) ? kTables : 0.0);
}

double fixed_memory_bytes(const std::vector<MethodConfig>& methods) {
  bool tables = false;
  for (const auto& m : methods) tables = tables || loads_special_tables(m);
  return kProcess + (tables ? kTables : 0.0);
}

double point_memory_bytes(const MethodConfig& method, const AttentionShape& s, int threads) {
  // The golden reference stays while the method runs; the golden's working set is freed before.
  const double in = input_bytes(s), out = output_bytes(s);
  // After the method: its O in FP64 and the metrics' per-element ULP distances and row errors
  // (experiments/sweep/measure.cpp), 8 bytes each, and `attnsim run`'s copy of O in its storage
  // format (at most 4 bytes: FP32), written while the metrics run.
  const double peak = std::max({golden_memory_bytes(s, threads),
                                method_memory_bytes(method, s, threads) + 8.0 * double(s.o_size()),
                                28.0 * double(s.o_size())});
  return in + out + peak + fixed_memory_bytes(method);
}

}  // namespace attnsim
