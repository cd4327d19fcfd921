// The outlier transforms SageAttention2 compares smoothing against (paper §3.2, Table 4): a
// SmoothQuant-style per-channel migration between Q and K, and a random Hadamard rotation of the
// head dimension. Both leave Q·Kᵀ unchanged in exact arithmetic.
#pragma once

#include <cstdint>
#include <vector>

namespace attnsim {

// SmoothQuant (Xiao et al. 2023, Eq. 4) with alpha: per channel c,
// s_c = max|Q_c|^alpha / max|K_c|^(1 − alpha) over the tokens given; Q_c / s_c and K_c · s_c.
// A channel with a zero amax on either side keeps s_c = 1. Computed in FP64, one rounding per
// element to FP32. q: [len_q, d], k: [len_kv, d], both changed in place.
void smoothquant_migrate(float* q, int len_q, float* k, int len_kv, int d, double alpha);

// A random Hadamard rotation x -> H · diag(signs) · x / sqrt(d) of each row of [rows, d]
// (d a power of two): signs ±1 drawn from `seed` (splitmix64, bit 63 of the c-th draw), the
// Walsh-Hadamard transform by the fast butterfly in FP64, one rounding per element to FP32. The
// same seed gives the same rotation for Q and K, so Q·Kᵀ is kept.
void hadamard_rotate(float* x, int rows, int d, std::uint64_t seed);

// The same rotation as an explicit matrix product with H[i][j] = (−1)^popcount(i & j): a second
// formulation to test the butterfly against.
void hadamard_rotate_ref(float* x, int rows, int d, std::uint64_t seed);

// The signs hadamard_rotate uses (+1 or −1 per channel).
std::vector<int> hadamard_signs(int d, std::uint64_t seed);

}  // namespace attnsim
