// Models of the GPU's approximate special functions (see special.hpp).
#include "numerics/special.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#ifndef ATTNSIM_DATA_DIR
#error "ATTNSIM_DATA_DIR must name the repository's data/ folder"
#endif

namespace attnsim {

namespace {
std::uint32_t fbits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float ffrom(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
}  // namespace

RcpApproxFtz::RcpApproxFtz(const std::string& delta_path) : t_(std::size_t{1} << 23) {
  std::ifstream in(delta_path, std::ios::binary);
  std::vector<unsigned char> packed(std::size_t{1} << 21);
  if (!in || !in.read(reinterpret_cast<char*>(packed.data()), std::streamsize(packed.size()))) {
    throw std::runtime_error("cannot read the rcp.approx table '" + delta_path + "'");
  }
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    // The correctly rounded 1/1.m (IEEE division on the host), corrected by the recorded delta.
    const std::uint32_t rn = fbits(1.0f / ffrom(0x3F800000u | m));
    const unsigned code = (packed[m / 4] >> (2 * (m % 4))) & 3u;
    if (code == 3) throw std::runtime_error("corrupt rcp.approx table '" + delta_path + "'");
    t_[m] = code == 0 ? rn : (code == 1 ? rn + 1 : rn - 1);
  }
}

const RcpApproxFtz& RcpApproxFtz::h100() {
  static const RcpApproxFtz table(std::string(ATTNSIM_DATA_DIR) + "/hw/h100/rcp_approx_ftz_delta.bin");
  return table;
}

std::uint32_t RcpApproxFtz::bits(std::uint32_t x) const {
  const std::uint32_t sign = x & 0x80000000u, e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0xFF) return m ? 0x7FFFFFFFu : sign;  // NaN -> canonical NaN; Inf -> signed zero
  if (e == 0) return sign | 0x7F800000u;         // zero or flushed subnormal -> Inf
  const std::uint32_t tm = t_[m];
  const int re = (int((tm >> 23) & 0xFF) - 127) - (int(e) - 127);
  if (re < -126) return sign;  // subnormal result flushed
  return sign | (std::uint32_t(re + 127) << 23) | (tm & 0x7FFFFF);
}

float RcpApproxFtz::operator()(float x) const { return ffrom(bits(fbits(x))); }

float fmul_ftz(float a, float b) {
  auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
  return flush(flush(a) * flush(b));
}

float div_approx_ftz(float a, float b, const RcpApproxFtz& rcp) { return fmul_ftz(a, rcp(b)); }

}  // namespace attnsim
