// The memory limit of the computing commands (see memory_limit.hpp).
#include "experiments/common/memory_limit.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <utility>

#include "experiments/common/error.hpp"

namespace attnsim {

namespace {
std::uint64_t g_limit = 0;  // 0: the machine's memory
}  // namespace

std::uint64_t parse_memory_size(const std::string& text) {
  const std::string bad = "memory limit '" + text +
                          "' (--max-memory or ATTNSIM_MAX_MEMORY) is not a size (examples: 512M, "
                          "8G, 1.5GiB, or a number of bytes)";
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0 || i > 24) throw UsageError(bad);
  char* end = nullptr;
  const std::string number = text.substr(0, i);
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) throw UsageError(bad);
  std::string unit;
  for (std::size_t j = i; j < text.size(); ++j)
    unit += char(std::toupper(static_cast<unsigned char>(text[j])));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  for (const auto& [u, s] : {std::pair<const char*, double>{"K", 0x1p10}, {"M", 0x1p20},
                             {"G", 0x1p30}, {"T", 0x1p40}}) {
    const std::string b(u);
    if (unit == b || unit == b + "B" || unit == b + "IB") scale = s;
  }
  if (scale == 0) throw UsageError(bad);
  const double bytes = std::floor(v * scale);
  if (bytes < 1) throw UsageError("memory limit '" + text + "' must be at least one byte");
  if (bytes > 0x1p60) throw UsageError("memory limit '" + text + "' is beyond 2^60 bytes");
  return std::uint64_t(bytes);
}

std::uint64_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t bytes =
      pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : (1ull << 34);
  // A container's own limit (cgroup v2, then v1) when it is below the machine's.
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    unsigned long long v = 0;
    if (in >> v && v > 0 && v < bytes) bytes = v;
  }
  return bytes;
}

void set_memory_limit(std::uint64_t bytes) { g_limit = bytes; }

std::uint64_t memory_limit() { return g_limit ? g_limit : machine_memory_bytes(); }

std::string format_bytes(double bytes) {
  char buf[64];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  } else {
    const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double v = bytes / 1024;
    while (v >= 1024 && u < 5) {
      v /= 1024;
      ++u;
    }
    if (v >= 1024) {
      std::snprintf(buf, sizeof buf, "%.3g bytes", bytes);
    } else {
      std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v,
                    units[u]);
    }
  }
  return buf;
}

void check_memory(double bytes, const std::string& what) {
  const std::uint64_t limit = memory_limit();
  if (!(bytes <= double(limit))) {
    throw UsageError(what + " needs about " + format_bytes(bytes) +
                     " of memory (estimate), more than the limit of " +
                     format_bytes(double(limit)) +
                     (g_limit ? " (--max-memory)" : " (this machine's memory; --max-memory sets it)"));
  }
}

}  // namespace attnsim
