// FlashAttention-2 forward reference kernel (see flash.hpp and sim/flash/README.md).
#include "sim/flash/flash.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace attnsim {

std::string describe(const FlashConfig& c) {
  auto dot = [&](DotChoice d) {
    if (d == DotChoice::kFp32) return std::string("fp32");
    if (d == DotChoice::kFp64) return std::string("fp64");
    return std::string(c.acc == Accum::kFp32 ? "fp32" : "fp64");
  };
  return "flash2 bq=" + std::to_string(c.block_q) + " bk=" + std::to_string(c.block_kv) +
         " q=" + storage_name(c.q) + " k=" + storage_name(c.k) + " v=" + storage_name(c.v) +
         " p=" + storage_name(c.p) + " out=" + storage_name(c.out) +
         " fp8=" + policy_name(c.conversion.fp8) + " half=" + policy_name(c.conversion.half) +
         " acc=" + (c.acc == Accum::kFp32 ? "fp32" : "fp64") + " qk=" + dot(c.qk_dot) +
         " pv=" + dot(c.pv_dot) + " exp=" + (c.exp == ExpKind::kExp2 ? "exp2" : "exp") +
         " fma=" + (c.fma ? "on" : "off") +
         " kv=" + (c.kv_order == KvOrder::kDescending ? "desc" : "asc") +
         " rowsum=" + (c.row_sum == RowSum::kQuad ? "quad" : "single");
}

namespace {

InnerProduct resolve(DotChoice d, Accum acc) {
  if (d == DotChoice::kFp32) return InnerProduct::kFp32;
  if (d == DotChoice::kFp64) return InnerProduct::kFp64;
  return acc == Accum::kFp32 ? InnerProduct::kFp32 : InnerProduct::kFp64;
}

std::vector<float> stored(const std::vector<float>& x, Storage s, const StoragePolicy& p) {
  if (s == Storage::kFp32) return x;
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = round_to_storage(x[i], s, p);
  return out;
}

template <class T>
void run(const AttentionInput& in, const FlashConfig& cfg, FlashResult& res) {
  const AttentionShape& s = in.shape;
  // Q, K, V as the kernel's operands: rounded to their storage formats once, up front.
  const std::vector<float> q = stored(in.q, cfg.q, cfg.conversion);
  const std::vector<float> k = stored(in.k, cfg.k, cfg.conversion);
  const std::vector<float> v = stored(in.v, cfg.v, cfg.conversion);
  const InnerProduct qk = resolve(cfg.qk_dot, cfg.acc), pv = resolve(cfg.pv_dot, cfg.acc);
  const T kInf = std::numeric_limits<T>::infinity();
  // FA2's host code (flash_api.cpp set_params_fprop) takes softmax_scale as a float and sets
  // scale_softmax_log2 = softmax_scale * M_LOG2E (a double product stored to float). The FP32
  // model reproduces both roundings; the FP64 model keeps the double scale.
  const double sm = std::is_same_v<T, float> ? double(float(in.scale())) : in.scale();
  const T sm_t = T(sm);
  ExpModel<T> e;
  e.kind = cfg.exp;
  e.scale = cfg.exp == ExpKind::kExp2 ? T(sm * 1.44269504088896340736) : sm_t;
  e.fma = cfg.fma;
  const int bq = cfg.block_q, bk = cfg.block_kv;
  const int d = s.head_dim, dv = s.head_dim_v;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  const int offset = s.len_kv - s.len_q;  // bottom-right causal alignment
  const int lanes = cfg.row_sum == RowSum::kQuad ? 4 : 1;
  // Work items are whole (batch, head, Q block) tiles, as CUDA thread blocks are: every output
  // element is computed by one item in a fixed order, so the thread count changes nothing.
#pragma omp parallel
  {
    std::vector<SoftmaxState<T>> st(std::size_t(bq), SoftmaxState<T>(dv, lanes));
    std::vector<T> sc(std::size_t(bq) * std::size_t(bk));
    std::vector<float> p(std::size_t(bq) * std::size_t(bk));
    std::vector<float> vt(std::size_t(dv) * std::size_t(bk));  // V tile transposed: row c = V[:, c]
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      const int qb = int(item % q_blocks);
      const int h = int((item / q_blocks) % s.heads_q);
      const int b = int(item / q_blocks / s.heads_q);
      const std::size_t kv = std::size_t(b) * s.heads_kv + std::size_t(h / s.group());
      const int i0 = qb * bq;
      const int rows = std::min(bq, s.len_q - i0);
      const std::size_t row0 = (std::size_t(b) * s.heads_q + h) * s.len_q + std::size_t(i0);
      for (int i = 0; i < rows; ++i) st[i].reset();
      // FA2 n_block_max: cdiv(seqlen_k, kBlockN), and with a causal mask
      // cdiv((m_block + 1) * kBlockM + seqlen_k - seqlen_q, kBlockN): blocks wholly right of the
      // tile's last diagonal are skipped. A tile that sees no key runs no block (FA2 writes O = 0,
      // LSE = inf and returns early).
      int n_blocks = (s.len_kv + bk - 1) / bk;
      if (in.causal) {
        const int limit = (qb + 1) * bq + offset;
        n_blocks = std::min(n_blocks, limit <= 0 ? 0 : (limit + bk - 1) / bk);
      }
      for (int step = 0; step < n_blocks; ++step) {
        const int nb = cfg.kv_order == KvOrder::kDescending ? n_blocks - 1 - step : step;
        const int j0 = nb * bk;
        const int cols = std::min(bk, s.len_kv - j0);
        // 1. S = Q Kᵀ for the tile (acc_s cleared, then the first GEMM); masked entries -inf
        //    (FA2 apply_mask_causal / apply_mask for keys past seqlen_k).
        for (int i = 0; i < rows; ++i) {
          const float* qi = q.data() + (row0 + std::size_t(i)) * d;
          for (int j = 0; j < cols; ++j) {
            const bool vis = in.visible(i0 + i, j0 + j);
            sc[std::size_t(i) * bk + j] =
                vis ? T(dot_ref(qk, 0.0, qi, k.data() + (kv * s.len_kv + std::size_t(j0 + j)) * d,
                                d))
                    : -kInf;
          }
        }
        // 2. Online softmax (FA2 softmax_rescale_o): m_new = max(m, rowmax S); l and O scaled by
        //    alpha = exp2((m_old - m_new)·scale_log2); p = exp2(s·scale_log2 - m_new·scale_log2);
        //    each p added to its quad lane's partial sum before P is converted (FA2 reduce_sum
        //    runs on the FP32 scores, convert_type afterwards).
        for (int i = 0; i < rows; ++i) {
          const T* si = sc.data() + std::size_t(i) * bk;
          T block_max = -kInf;
          for (int j = 0; j < cols; ++j) block_max = si[j] > block_max ? si[j] : block_max;
          const T m_use = st[i].rescale(block_max, e);
          for (int j = 0; j < cols; ++j) {
            const T pij = e.prob(si[j], m_use);
            st[i].add_to_sum(j, pij);
            p[std::size_t(i) * bk + j] = round_to_storage(float(pij), cfg.p, cfg.conversion);
          }
        }
        // 3. O = O·alpha + P V: the second GEMM with C = the rescaled accumulator
        //    (FA2 gemm_rs(acc_o, tOrP, tOrVt)), P as stored, keys in natural order.
        for (int j = 0; j < cols; ++j) {
          const float* vj = v.data() + (kv * s.len_kv + std::size_t(j0 + j)) * dv;
          for (int c = 0; c < dv; ++c) vt[std::size_t(c) * bk + j] = vj[c];
        }
        for (int i = 0; i < rows; ++i) {
          T* oi = st[i].o.data();
          const float* pi = p.data() + std::size_t(i) * bk;
          for (int c = 0; c < dv; ++c)
            oi[c] = T(dot_ref(pv, double(oi[c]), pi, vt.data() + std::size_t(c) * bk, cols));
        }
      }
      // 4. Epilogue (FA2 normalize_softmax_lse): quad all-reduce of the row sum, O *= 1/l (1 where
      //    l is 0 or NaN), LSE = m·softmax_scale + log(l) (+inf where l is 0 or NaN); O converted
      //    to the output type.
      for (int i = 0; i < rows; ++i) {
        const std::vector<T> o = st[i].normalize();
        float* out = res.o.data() + (row0 + std::size_t(i)) * dv;
        for (int c = 0; c < dv; ++c)
          out[c] = round_to_storage(float(o[c]), cfg.out, cfg.conversion);
        const T lse = st[i].lse(sm_t);
        res.lse[row0 + std::size_t(i)] =
            lse == -kInf ? std::numeric_limits<float>::infinity() : float(lse);
      }
    }
  }
}

}  // namespace

FlashResult flash_attention(const AttentionInput& in, const FlashConfig& cfg) {
  if (!in.shape.valid()) throw std::invalid_argument("flash_attention: invalid shape");
  if (cfg.block_q <= 0 || cfg.block_kv <= 0)
    throw std::invalid_argument("flash_attention: block sizes must be > 0");
  if (cfg.out != Storage::kFp32 && cfg.out != Storage::kBf16 && cfg.out != Storage::kFp16) {
    throw std::invalid_argument("flash_attention: output format must be fp32, bf16 or fp16");
  }
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
