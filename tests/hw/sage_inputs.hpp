// The inputs of the SageAttention recordings (data/hw/h100/sage/): the integer "lattice" cases of
// cuda_check/sage/record_sage.py, made here bit for bit the same way (every value is an exact
// binary fraction computed in integers, so numpy and C++ agree), and slices of the real-model
// dumps.
#pragma once

#include <cstdint>
#include <string>

#include "experiments/io/dump.hpp"
#include "numerics/digest.hpp"
#include "sim/problem.hpp"

namespace attnsim::hwtest {

struct SageCase {
  std::string name;
  std::string kind;  // normal kbias outlier peaked, or "" for a real-model slice
  std::uint64_t seed = 0;
  int b = 1, hq = 1, hkv = 1, n = 0, d = 0;
  std::string file, group;  // real-model slice: dump, layer group, first `tokens` tokens and
  int tokens = 0, heads_q = 0;  // the first `heads_q` query heads (and the KV heads they read)
  bool causal = false;
};

inline std::uint64_t lattice_base(std::uint64_t seed, std::uint64_t salt) {
  return seed * 0x9E3779B97F4A7C15ull ^ salt;
}

// (sum of four 16-bit uniforms - 2^17) * 2^-15 for element i of tensor `tensor` (1 q, 2 k, 3 v).
inline float lattice_value(std::uint64_t seed, std::uint64_t tensor, std::uint64_t i) {
  const std::uint64_t base = lattice_base(seed, tensor << 40);
  std::int64_t acc = 0;
  for (std::uint64_t r = 0; r < 4; ++r) acc += std::int64_t(splitmix64(base ^ (r << 32) ^ i) >> 48);
  return float(acc - 131072) * 0x1p-15f;
}

// Q, K and V of in.shape (sized here) from lattice tensors q_tensor, q_tensor + 1, q_tensor + 2
// of `seed`, element i at flat index i (record_sdpa.py numbers them 1, 2, 3; cuda_check/lattice.py
// 0, 1, 2).
inline void fill_lattice(AttentionInput& in, std::uint64_t seed, std::uint64_t q_tensor) {
  in.q.resize(in.shape.q_size());
  in.k.resize(in.shape.k_size());
  in.v.resize(in.shape.v_size());
  for (std::size_t i = 0; i < in.q.size(); ++i) in.q[i] = lattice_value(seed, q_tensor, i);
  for (std::size_t i = 0; i < in.k.size(); ++i) in.k[i] = lattice_value(seed, q_tensor + 1, i);
  for (std::size_t i = 0; i < in.v.size(); ++i) in.v[i] = lattice_value(seed, q_tensor + 2, i);
}

inline AttentionInput lattice_input(const SageCase& c) {
  AttentionInput in;
  in.shape = {c.b, c.hq, c.hkv, c.n, c.n, c.d, c.d};
  in.causal = c.causal;
  fill_lattice(in, c.seed, 1);
  const int d = c.d;
  auto channel_hash = [&](std::uint64_t salt, int ch) {
    return splitmix64(lattice_base(c.seed, salt) ^ std::uint64_t(ch));
  };
  if (c.kind == "kbias") {
    for (std::size_t i = 0; i < in.k.size(); ++i)
      in.k[i] += float(std::int64_t(channel_hash(0xB1A5, int(i % d)) >> 61) - 4);
    for (std::size_t i = 0; i < in.v.size(); ++i)
      in.v[i] += float(std::int64_t(channel_hash(0xB1A6, int(i % d)) >> 61) - 4);
  } else if (c.kind == "outlier") {
    for (std::size_t i = 0; i < in.q.size(); ++i)
      if ((channel_hash(0x0717, int(i % d)) >> 59) == 0) in.q[i] *= 16;
    for (std::size_t i = 0; i < in.k.size(); ++i)
      if ((channel_hash(0x0717, int(i % d)) >> 59) == 0) in.k[i] *= 16;
  } else if (c.kind == "peaked") {
    const int g = c.hq / c.hkv;
    for (int b = 0; b < c.b; ++b)
      for (int h = 0; h < c.hq; ++h)
        for (int t = 0; t < c.n; ++t) {
          const int j = int((std::int64_t(t) * 7919) % c.n);
          for (int x = 0; x < d; ++x) {
            float& qv = in.q[((std::size_t(b) * c.hq + h) * c.n + t) * d + x];
            const float kv = in.k[((std::size_t(b) * c.hkv + h / g) * c.n + j) * d + x];
            qv = 4 * kv + qv * 0.25f;
          }
        }
  }
  return in;
}

// The first `tokens` tokens and `heads_q` query heads (with the KV heads they read) of a dump.
inline AttentionInput real_slice(const std::string& root, const SageCase& c) {
  const AttentionInput full = read_attention_dump(root + "/" + c.file, c.group + "/", false);
  const AttentionShape& s = full.shape;
  AttentionInput in;
  const int g = s.group();
  const int hq = c.heads_q ? c.heads_q : s.heads_q;
  const int hkv = (hq + g - 1) / g;
  const int n = c.tokens ? c.tokens : s.len_q;
  in.shape = {s.batch, hq, hkv, n, n, s.head_dim, s.head_dim_v};
  in.causal = c.causal;
  in.sm_scale = 0;  // the entry points use head_dim**-0.5 (not the dump's attribute)
  auto cut = [&](const std::vector<float>& x, int heads, int len, int dim, int keep_heads) {
    std::vector<float> out;
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < keep_heads; ++h)
        for (int t = 0; t < n; ++t)
          for (int e = 0; e < dim; ++e)
            out.push_back(x[((std::size_t(b) * heads + h) * len + t) * dim + e]);
    return out;
  };
  in.q = cut(full.q, s.heads_q, s.len_q, s.head_dim, hq);
  in.k = cut(full.k, s.heads_kv, s.len_kv, s.head_dim, hkv);
  in.v = cut(full.v, s.heads_kv, s.len_kv, s.head_dim_v, hkv);
  return in;
}

}  // namespace attnsim::hwtest
