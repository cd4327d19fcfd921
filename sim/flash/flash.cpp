// FlashAttention-2 forward reference kernel (see flash.hpp and sim/flash/README.md).
#include "sim/flash/flash.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#include "formats/float16.hpp"
#include "formats/float8.hpp"

namespace attnsim {

std::string storage_name(Storage s) {
  switch (s) {
    case Storage::kFp32: return "fp32";
    case Storage::kBf16: return "bf16";
    case Storage::kFp16: return "fp16";
    case Storage::kE4m3fn: return "e4m3fn";
    case Storage::kE5m2: return "e5m2";
  }
  return "?";
}

std::string describe(const FlashConfig& c) {
  return "flash2 bq=" + std::to_string(c.block_q) + " bk=" + std::to_string(c.block_kv) + " q=" +
         storage_name(c.q) + " k=" + storage_name(c.k) + " v=" + storage_name(c.v) + " p=" +
         storage_name(c.p) + " out=" + storage_name(c.out) + " acc=" + (c.acc == Accum::kFp32 ? "fp32" : "fp64") +
         " exp=" + (c.exp == ExpKind::kExp2 ? "exp2" : "exp") + " fma=" + (c.fma ? "on" : "off");
}

float round_to_storage(float x, Storage s) {
  // Conversions as the kernels do them: cvt.rn.{bf16,f16}.f32 (IEEE, proven on the H100) and
  // cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (proven on the H100; data/hw/README.md).
  constexpr Policy kIeeeCuda{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  switch (s) {
    case Storage::kFp32: return x;
    case Storage::kBf16: return decode_f32<bf16>(encode<bf16>(x, kIeeeCuda));
    case Storage::kFp16: return decode_f32<fp16>(encode<fp16>(x, kIeeeCuda));
    case Storage::kE4m3fn: return decode_f32<e4m3fn>(encode<e4m3fn>(x, kCudaSatfinite));
    case Storage::kE5m2: return decode_f32<e5m2>(encode<e5m2>(x, kCudaSatfinite));
  }
  return x;
}

namespace {

std::vector<float> stored(const std::vector<float>& x, Storage s) {
  if (s == Storage::kFp32) return x;
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = round_to_storage(x[i], s);
  return out;
}

// The inner-product stage: sum over k of a[k] * b[k] in natural k order, each product rounded
// to T and then added (no fused multiply-add), starting from 0.
template <class T>
T dot(const float* a, const float* b, int n) {
  T acc = T(0);
  for (int c = 0; c < n; ++c) acc = acc + T(a[c]) * T(b[c]);
  return acc;
}

template <class T>
T fused(T a, T b, T c, bool use_fma) {
  return use_fma ? std::fma(a, b, c) : a * b + c;
}

template <class T>
T exp2_t(T x) { return std::exp2(x); }
template <class T>
T exp_t(T x) { return std::exp(x); }

template <class T>
void run(const AttentionInput& in, const FlashConfig& cfg, FlashResult& res) {
  const AttentionShape& s = in.shape;
  const std::vector<float> q = stored(in.q, cfg.q);
  const std::vector<float> k = stored(in.k, cfg.k);
  const std::vector<float> v = stored(in.v, cfg.v);
  const T kInf = std::numeric_limits<T>::infinity();
  const T scale = T(in.scale());
  // FA2 passes softmax_scale_log2 = softmax_scale * M_LOG2E, rounded once to the kernel's type.
  const T scale_log2 = T(in.scale() * 1.4426950408889634074);
  const int bq = cfg.block_q, bk = cfg.block_kv;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  const int d = s.head_dim, dv = s.head_dim_v;
  const int offset = s.len_kv - s.len_q;  // bottom-right causal alignment
#pragma omp parallel
  {
    std::vector<T> m(bq, T(0)), l(bq, T(0)), acc(std::size_t(bq) * std::size_t(dv), T(0));
    std::vector<T> sc(std::size_t(bq) * std::size_t(bk), T(0));
    std::vector<float> p(std::size_t(bq) * std::size_t(bk), 0.0f);
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      const int qb = int(item % q_blocks);
      const int h = int((item / q_blocks) % s.heads_q);
      const int b = int(item / q_blocks / s.heads_q);
      const std::size_t kv = std::size_t(b) * s.heads_kv + std::size_t(h / s.group());
      const int i0 = qb * bq;
      const int rows = std::min(bq, s.len_q - i0);
      const std::size_t row0 = (std::size_t(b) * s.heads_q + h) * s.len_q + std::size_t(i0);
      for (int i = 0; i < rows; ++i) {
        m[i] = -kInf;
        l[i] = T(0);
        for (int c = 0; c < dv; ++c) acc[std::size_t(i) * dv + c] = T(0);
      }
      // KV blocks in increasing order; with a causal mask the blocks entirely to the right of
      // the last row's diagonal are skipped (FA2 n_block_max).
      int kv_end = s.len_kv;
      if (in.causal) kv_end = std::max(0, std::min(s.len_kv, i0 + rows + offset));
      for (int j0 = 0; j0 < kv_end; j0 += bk) {
        const int cols = std::min(bk, kv_end - j0);
        // S = Q Kᵀ for this tile, masked entries -inf.
        for (int i = 0; i < rows; ++i) {
          const float* qi = q.data() + (row0 + std::size_t(i)) * d;
          for (int j = 0; j < cols; ++j) {
            const bool vis = !in.causal || j0 + j <= i0 + i + offset;
            sc[std::size_t(i) * bk + j] =
                vis ? dot<T>(qi, k.data() + (kv * s.len_kv + std::size_t(j0 + j)) * d, d) : -kInf;
          }
        }
        // Online softmax (FA2 softmax.h softmax_rescale_o): new row max, rescale of the running
        // sum and output, P = exp2(S * scale_log2 - max_scaled), row sum of the FP32 P.
        for (int i = 0; i < rows; ++i) {
          T* si = sc.data() + std::size_t(i) * bk;
          T m_new = m[i];
          for (int j = 0; j < cols; ++j) m_new = si[j] > m_new ? si[j] : m_new;
          // A row with every key so far masked keeps max 0 for the arithmetic (FA2: Check_inf).
          const T m_use = m_new == -kInf ? T(0) : m_new;
          T alpha;
          if (cfg.exp == ExpKind::kExp2) {
            alpha = exp2_t<T>((m[i] - m_use) * scale_log2);
          } else {
            alpha = exp_t<T>((m[i] - m_use) * scale);
          }
          m[i] = m_new;
          const T max_scaled = m_use * scale_log2;
          T rowsum = T(0);
          for (int j = 0; j < cols; ++j) {
            T pij;
            if (si[j] == -kInf) {
              pij = T(0);
            } else if (cfg.exp == ExpKind::kExp2) {
              pij = exp2_t<T>(fused<T>(si[j], scale_log2, -max_scaled, cfg.fma));
            } else {
              pij = exp_t<T>((si[j] - m_use) * scale);
            }
            rowsum = rowsum + pij;
            p[std::size_t(i) * bk + j] = round_to_storage(float(pij), cfg.p);
          }
          l[i] = l[i] * alpha + rowsum;
          T* ai = acc.data() + std::size_t(i) * dv;
          for (int c = 0; c < dv; ++c) ai[c] = ai[c] * alpha;
        }
        // O += P V with P as stored (the second GEMM's operand format), natural j order.
        for (int i = 0; i < rows; ++i) {
          T* ai = acc.data() + std::size_t(i) * dv;
          const float* pi = p.data() + std::size_t(i) * bk;
          for (int j = 0; j < cols; ++j) {
            const T pij = T(pi[j]);
            const float* vj = v.data() + (kv * s.len_kv + std::size_t(j0 + j)) * dv;
            for (int c = 0; c < dv; ++c) ai[c] = ai[c] + pij * T(vj[c]);
          }
        }
      }
      // Epilogue (FA2 normalize_softmax_lse): O *= 1/l, LSE = max * scale + log(l); a row with
      // l == 0 keeps O = 0 and gets LSE = +inf.
      for (int i = 0; i < rows; ++i) {
        const T inv = (l[i] == T(0) || l[i] != l[i]) ? T(1) : T(1) / l[i];
        const T* ai = acc.data() + std::size_t(i) * dv;
        float* oi = res.o.data() + (row0 + std::size_t(i)) * dv;
        for (int c = 0; c < dv; ++c) oi[c] = round_to_storage(float(ai[c] * inv), cfg.out);
        res.lse[row0 + std::size_t(i)] =
            (l[i] == T(0) || l[i] != l[i]) ? std::numeric_limits<float>::infinity()
                                           : float(m[i] * scale + std::log(l[i]));
      }
    }
  }
}

}  // namespace

FlashResult flash_attention(const AttentionInput& in, const FlashConfig& cfg) {
  FlashResult r;
  r.o.assign(in.shape.o_size(), 0.0f);
  r.lse.assign(std::size_t(in.shape.batch) * in.shape.heads_q * in.shape.len_q, 0.0f);
  if (cfg.acc == Accum::kFp32) {
    run<float>(in, cfg, r);
  } else {
    run<double>(in, cfg, r);
  }
  return r;
}

std::vector<float> flash_attention_ref(const AttentionInput& in, const FlashConfig& cfg) {
  return flash_attention(in, cfg).o;
}

}  // namespace attnsim
