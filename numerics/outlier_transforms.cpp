#include "numerics/outlier_transforms.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

#include "numerics/digest.hpp"

namespace attnsim {

void smoothquant_migrate(float* q, int len_q, float* k, int len_kv, int d, double alpha) {
  for (int c = 0; c < d; ++c) {
    double aq = 0, ak = 0;
    for (int t = 0; t < len_q; ++t) aq = std::max(aq, std::fabs(double(q[std::size_t(t) * d + c])));
    for (int t = 0; t < len_kv; ++t)
      ak = std::max(ak, std::fabs(double(k[std::size_t(t) * d + c])));
    if (aq == 0 || ak == 0) continue;
    const double s = std::pow(aq, alpha) / std::pow(ak, 1.0 - alpha);
    for (int t = 0; t < len_q; ++t) {
      float& x = q[std::size_t(t) * d + c];
      x = float(double(x) / s);
    }
    for (int t = 0; t < len_kv; ++t) {
      float& x = k[std::size_t(t) * d + c];
      x = float(double(x) * s);
    }
  }
}

std::vector<int> hadamard_signs(int d, std::uint64_t seed) {
  std::vector<int> s(std::size_t(std::max(d, 0)));
  for (int c = 0; c < d; ++c)
    s[std::size_t(c)] = (splitmix64(seed * 0x9E3779B97F4A7C15ull + std::uint64_t(c)) >> 63) ? -1 : 1;
  return s;
}

namespace {

void check_pow2(int d) {
  if (d <= 0 || !std::has_single_bit(unsigned(d)))
    throw std::invalid_argument("a Hadamard rotation needs a power-of-two head_dim, got " +
                                std::to_string(d));
}

}  // namespace

void hadamard_rotate(float* x, int rows, int d, std::uint64_t seed) {
  check_pow2(d);
  const std::vector<int> sg = hadamard_signs(d, seed);
  const double norm = 1.0 / std::sqrt(double(d));
  std::vector<double> w(static_cast<std::size_t>(d));
  for (int r = 0; r < rows; ++r) {
    float* row = x + std::size_t(r) * d;
    for (int c = 0; c < d; ++c) w[std::size_t(c)] = double(row[c]) * sg[std::size_t(c)];
    // In-place butterflies: after the stage of width h, w holds the transforms of blocks of 2h.
    for (int h = 1; h < d; h *= 2)
      for (int i = 0; i < d; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const double a = w[std::size_t(j)], b = w[std::size_t(j + h)];
          w[std::size_t(j)] = a + b;
          w[std::size_t(j + h)] = a - b;
        }
    // + 0.0 turns a −0 (a butterfly of signed zeros) into +0, as the summed matrix product gives.
    for (int c = 0; c < d; ++c) row[c] = float(w[std::size_t(c)] * norm + 0.0);
  }
}

void hadamard_rotate_ref(float* x, int rows, int d, std::uint64_t seed) {
  check_pow2(d);
  const std::vector<int> sg = hadamard_signs(d, seed);
  std::vector<double> in(static_cast<std::size_t>(d));
  for (int r = 0; r < rows; ++r) {
    float* row = x + std::size_t(r) * d;
    for (int c = 0; c < d; ++c) in[std::size_t(c)] = double(row[c]);
    for (int i = 0; i < d; ++i) {
      double acc = 0;
      for (int j = 0; j < d; ++j) {
        const int h = (std::popcount(unsigned(i & j)) & 1) ? -1 : 1;
        acc += double(h * sg[std::size_t(j)]) * in[std::size_t(j)];
      }
      row[i] = float(acc * (1.0 / std::sqrt(double(d))));
    }
  }
}

}  // namespace attnsim
