// Models of the GPU's approximate special functions (see special.hpp).
#include "numerics/special.hpp"

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "formats/float32.hpp"

#ifndef ATTNSIM_DATA_DIR
#error "ATTNSIM_DATA_DIR must name the repository's data/ folder"
#endif

namespace attnsim {

namespace {
// The 2^23 two-bit codes of a table file (entry i in bits 2·(i%4) of byte i/4).
std::vector<unsigned char> read_2bit_codes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> packed(std::size_t{1} << 21);
  if (!in || !in.read(reinterpret_cast<char*>(packed.data()), std::streamsize(packed.size()))) {
    throw std::runtime_error("cannot read the special-function table '" + path + "'");
  }
  std::vector<unsigned char> codes(std::size_t{1} << 23);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = (packed[i / 4] >> (2 * (i % 4))) & 3u;
  return codes;
}
}  // namespace

RcpApproxFtz::RcpApproxFtz(const std::string& delta_path) : t_(std::size_t{1} << 23) {
  const std::vector<unsigned char> codes = read_2bit_codes(delta_path);
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    // The correctly rounded 1/1.m (IEEE division on the host), corrected by the recorded delta.
    const std::uint32_t rn = f32_bits(1.0f / f32_from_bits(0x3F800000u | m));
    const unsigned code = codes[m];
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

float RcpApproxFtz::operator()(float x) const { return f32_from_bits(bits(f32_bits(x))); }

namespace {
std::vector<std::uint32_t> load_steps(const std::string& path, int direction) {
  const std::vector<unsigned char> steps = read_2bit_codes(path);
  std::vector<std::uint32_t> t(std::size_t{1} << 23);
  std::uint32_t v = 0x3F800000u;  // ex2(0) = 1
  for (std::uint32_t f = 0; f < (1u << 23); ++f) {
    const std::uint32_t step = steps[f];
    v = direction > 0 ? v + step : v - step;
    t[f] = v;
  }
  return t;
}
}  // namespace

Ex2ApproxFtz::Ex2ApproxFtz(const std::string& pos_steps_path, const std::string& neg_steps_path)
    : pos_(load_steps(pos_steps_path, +1)), neg_(load_steps(neg_steps_path, -1)) {}

const Ex2ApproxFtz& Ex2ApproxFtz::h100() {
  static const Ex2ApproxFtz table(std::string(ATTNSIM_DATA_DIR) + "/hw/h100/ex2_approx_ftz_pos_steps.bin",
                                  std::string(ATTNSIM_DATA_DIR) + "/hw/h100/ex2_approx_ftz_neg_steps.bin");
  return table;
}

std::uint32_t Ex2ApproxFtz::bits(std::uint32_t x) const {
  const bool neg = (x >> 31) != 0;
  const std::uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  if (e == 0xFF && m != 0) return 0x7FFFFFFFu;  // NaN
  if (e >= 127 + 7) return neg ? 0u : 0x7F800000u;  // |x| >= 128 (and Inf)
  // K = trunc(|x| * 2^23): |x| = (2^23 + m) * 2^(e - 150) for normal x; subnormals flush to 0.
  std::uint64_t K = 0;
  if (e != 0) {
    const std::uint64_t sig = (std::uint64_t{1} << 23) | m;
    const int sh = int(e) - 127;  // |x| * 2^23 = sig * 2^sh
    K = sh >= 0 ? (sig << sh) : (-sh >= 64 ? 0 : (sig >> -sh));
  }
  const std::int64_t a = std::int64_t(K >> 23);
  const std::uint32_t t = (neg ? neg_ : pos_)[K & 0x7FFFFF];
  const std::int64_t re = std::int64_t((t >> 23) & 0xFF) - 127 + (neg ? -a : a);
  if (re < -126) return 0u;  // flushed
  if (re > 127) return 0x7F800000u;
  return (std::uint32_t(re + 127) << 23) | (t & 0x7FFFFF);
}

float Ex2ApproxFtz::operator()(float x) const { return f32_from_bits(bits(f32_bits(x))); }

float fmul_ftz(float a, float b) {
  auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
  return flush(flush(a) * flush(b));
}

float div_approx_ftz(float a, float b, const RcpApproxFtz& rcp) { return fmul_ftz(a, rcp(b)); }

}  // namespace attnsim
