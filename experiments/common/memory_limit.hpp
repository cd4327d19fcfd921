// The memory limit every computing command checks its estimate against before allocating:
// `--max-memory SIZE` (or ATTNSIM_MAX_MEMORY), by default the memory of the machine. No CLI11
// here (the option itself is in option_checks.hpp): the Python module links this too.
#pragma once

#include <cstdint>
#include <string>

namespace attnsim {

// "8G", "512M", "1.5GiB", "64k", "1000000" (bytes); K, M, G, T are powers of 1024. UsageError on
// anything else, on zero and on sizes beyond 2^60 bytes.
std::uint64_t parse_memory_size(const std::string& text);
// The machine's physical memory (sysconf), or the cgroup's memory.max when that is smaller.
std::uint64_t machine_memory_bytes();
// The limit checks use: set_memory_limit's value, else machine_memory_bytes(). 0 resets.
void set_memory_limit(std::uint64_t bytes);
std::uint64_t memory_limit();
// "512 MiB", "12.3 GiB"
std::string format_bytes(double bytes);
// UsageError naming `what`, the estimate and the limit when `bytes` exceeds the limit.
void check_memory(double bytes, const std::string& what);

}  // namespace attnsim
