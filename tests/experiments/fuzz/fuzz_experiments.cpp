// libFuzzer target for attnsim's untrusted-input parsers: the HDF5 dump reader, method
// configuration strings, --grid axes, synthetic specs, gate rules (TOML) and checkpoint records.
// Every input must end in a result or a UsageError: anything else (crash, sanitizer report, other
// exception, hang) is a bug. Built by tests/experiments/CMakeLists.txt when clang++ has libFuzzer.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "experiments/common/error.hpp"
#include "experiments/io/dump.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/sweep/compare.hpp"
#include "experiments/sweep/sweep_engine.hpp"
#include "experiments/sweep/sweep_metrics.hpp"

namespace {

std::string scratch(const char* what) {
  static const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return dir + "/attnsim_fuzz_" + std::to_string(getpid()) + "_" + what;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
}

void fuzz_dump(const std::uint8_t* data, std::size_t size, bool allow_nonfinite) {
  const std::string p = scratch("dump.h5");
  write_file(p, data, size);
  try {
    for (const auto& prefix : attnsim::dump_prefixes(p))
      attnsim::read_attention_dump(p, prefix, allow_nonfinite);
  } catch (const attnsim::UsageError&) {
  }
  std::remove(p.c_str());
}

void fuzz_text(const std::string& text) {
  using namespace attnsim;
  try {
    for (const auto& m : split_method_list(text)) parse_method(m).canonical();
  } catch (const UsageError&) {
  }
  try {
    const auto axis = parse_grid_axis(text);
    expand_grid({parse_method("golden"), parse_method("flash")}, {axis});
  } catch (const UsageError&) {
  }
  try {
    const AttentionShape s = synthetic_shape(text);
    synthetic_seed(text);
    // Generate only small inputs: the fuzzer's memory limit is not what is being tested.
    if (double(s.q_size()) + double(s.k_size()) + double(s.v_size()) < 1e5) make_synthetic(text);
  } catch (const UsageError&) {
  }
  PointRow row;
  if (parse_row(text, &row)) serialize_row(row);
}

void fuzz_rules(const std::uint8_t* data, std::size_t size) {
  const std::string p = scratch("rules.toml");
  write_file(p, data, size);
  try {
    attnsim::read_gate_rules(p);
  } catch (const attnsim::UsageError&) {
  }
  std::remove(p.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the parser; HDF5 files start with 0x89, which picks the dump reader.
  const std::uint8_t mode = data[0];
  if (mode == 0x89 || mode % 4 == 0) {
    fuzz_dump(mode == 0x89 ? data : data + 1, mode == 0x89 ? size : size - 1, mode & 0x10);
  } else if (mode % 4 == 1 || mode % 4 == 2) {
    fuzz_text(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    fuzz_rules(data + 1, size - 1);
  }
  return 0;
}
