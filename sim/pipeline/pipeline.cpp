// The tiled attention skeleton (see pipeline.hpp and sim/pipeline/README.md): one query tile over
// a range of KV blocks, each stage the pipeline's chosen model.
#include "sim/pipeline/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "formats/encoding.hpp"
#include "formats/intn.hpp"
#include "numerics/fp32_bits.hpp"
#include "numerics/special.hpp"

namespace attnsim {

struct TileWorkspace {
  std::vector<double> sc;          // scores of the tile, [block_q][block_kv] (T values)
  std::vector<float> cf;           // kFold: the exponent coefficient of each score
  std::vector<double> pt;          // P in the state's type (FP64 P), [block_q][block_kv]
  std::vector<float> pf;           // P as the product sees it (decoded), [block_q][block_kv]
  std::vector<std::uint32_t> pb;   // P encodings, [block_q][kv_pad]
  std::vector<float> p_scale;      // per row (or tile) P scale of the current block
  std::vector<float> vt;           // V tile transposed: row c = V[j0.., c], [dv][block_kv]
  std::vector<std::uint32_t> vtb;  // the same as encodings, [dv][kv_pad]
  std::vector<float> sf;           // FP32 scores (T = float)
  std::vector<float> ptf;          // FP32 P in the state's type (T = float)
  std::vector<float> alpha;        // per row: the rescale factor of the current block
  std::vector<float> p_mul;        // per row: Rescale::kHook's factor of P before its cast
  std::vector<std::uint32_t> ones;  // RowSum::kMma: the B operand of ones
};

void TileWorkspaceDeleter::operator()(TileWorkspace* w) const { delete w; }
TileWorkspacePtr make_workspace() { return TileWorkspacePtr(new TileWorkspace); }

namespace {

constexpr double kLog2e = 1.44269504088896340736;
constexpr double kLn2 = 0.69314718055994530942;

template <class T>
T snap(T x, MaxRound r) {
  if (r == MaxRound::kCeil) return std::ceil(x);
  if (r == MaxRound::kNearest) return std::round(x);  // ties away from zero (AMLA CAST_ROUND)
  return x;
}

// int32 -> FP32 under a rounding mode (cvt.rn.f32.s32 / __int2float_rz): exact below 2^24.
float int_to_f32(std::int32_t v, Round r) {
  if (v > -(1 << 24) && v < (1 << 24)) return float(v);
  return f32_from_bits(
      encode_float_bits(Encoding::kFp32, double(v), Policy{r, Overflow::kInf, NanEncoding::kCuda}));
}

// O·2^n by an integer addition on the bits (AMLA Eq. 3; FP64: the same trick with 2^52).
inline float int_add_pow2(float o, std::int32_t n) { return mul_pow2_by_int_add(o, n); }
inline double int_add_pow2(double o, std::int32_t n) {
  const std::uint64_t b = f64_bits(o) + (std::uint64_t(std::int64_t(n)) << 52);
  return f64_from_bits(b);
}

// The constants of the exponent for an input: the coefficient c of a raw score in the exponent
// (FA2 scale_softmax_log2 = fl32(fl32(sm_scale) · log2 e), the host's double product stored to
// float; the FP64 state keeps the double scale) and the natural-log coefficient of a raw score
// (FA2's LSE: m · softmax_scale).
template <class T>
struct ExpConstants {
  T c;      // raw score -> exponent units
  T c_nat;  // raw score -> natural-log units (LSE)
};

template <class T>
ExpConstants<T> exp_constants(const Pipeline& p, double sm_scale) {
  const double sm = std::is_same_v<T, float> ? double(float(sm_scale)) : sm_scale;
  ExpConstants<T> k;
  if (p.q.prescale == Prescale::kSmScaleLog2e) {
    k.c = T(1);
    k.c_nat = T(kLn2);
  } else if (p.q.prescale == Prescale::kSmScale) {
    k.c = T(1);
    k.c_nat = T(1);
  } else if (p.scale_log2 == ScaleLog2::kDeviceFloat && p.exp_base == ExpKind::kExp2) {
    // SageAttention2: `sm_scale *= math::log2e` on the device, FMUL.FTZ of two FP32 values.
    k.c = T(float(sm_scale) * 1.44269504088896340736f);
    k.c_nat = T(sm);
  } else {
    k.c = p.exp_base == ExpKind::kExp2 ? T(sm * kLog2e) : T(sm);
    k.c_nat = T(sm);
  }
  return k;
}

template <class T>
ExpModel<T> exp_model(const Pipeline& p, T c) {
  ExpModel<T> e;
  e.kind = p.exp_base;
  e.scale = c;
  e.fma = p.fma;
  e.fn = p.exp_fn;
  e.hook = p.exp_hook;
  e.hook_ctx = p.exp_hook_ctx;
  return e;
}

int round_up(int n, int k) { return (n + k - 1) / k * k; }

float round_to_f16(float x) {
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  return decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x, kRne));
}

// Rounds an FP32/FP64 value of the state to the P encoding (non-integer P).
template <class T>
double cast_p(T x, const Pipeline& p) {
  if (p.p == Encoding::kFp64) return double(x);
  const float f = float(x);
  if (p.p == Encoding::kFp32) return f;
  // An integer P with a static scale (the SageAttention2 Table 7 INT8 row read as §3.3's δ_P with
  // 127 for 448): cvt.rni.sat, as SageAttention's float_to_int8_rn (csrc/fused/fused.cu).
  if (p.p == Encoding::kS8) return round_to_int<s8>(f, Round::kNearestEven, IntOverflow::kSaturate);
  if (p.p == Encoding::kS4) return round_to_int<s4>(f, Round::kNearestEven, IntOverflow::kSaturate);
  if (p.p == Encoding::kS2) return round_to_int<s2>(f, Round::kNearestEven, IntOverflow::kSaturate);
  return decode_float_bits(p.p, encode_float_bits(p.p, f, p.p_cast));
}

}  // namespace

int kv_blocks_of_tile(const PreparedInput& in, const Pipeline& p, const Tile& t) {
  const AttentionShape& s = in.shape;
  int n = (s.len_kv + p.block_kv - 1) / p.block_kv;
  if (in.causal && p.causal_align == CausalAlign::kTopLeft) {
    // SageAttention (qk_int_sv_f16_cuda_sm80.cu, ..._sm90.cu): num_iterations =
    // div_ceil(min(kv_len, (bx + 1) · CTA_Q), CTA_K).
    const int limit = std::min(s.len_kv, t.q_begin + p.block_q);
    n = std::min(n, (limit + p.block_kv - 1) / p.block_kv);
  } else if (in.causal) {
    // FA2 n_block_max with the causal mask: cdiv((m_block + 1)·kBlockM + seqlen_k − seqlen_q,
    // kBlockN), bottom-right aligned.
    const int limit = t.q_begin + p.block_q + s.len_kv - s.len_q;
    n = std::min(n, limit <= 0 ? 0 : (limit + p.block_kv - 1) / p.block_kv);
  }
  return n;
}

template <class T>
void attend_tile(const PreparedInput& in, const Pipeline& p, const Tile& t, int kv_block_begin,
                 int kv_block_end, std::vector<SoftmaxState<T>>& rows, TileWorkspace& ws) {
  const AttentionShape& s = in.shape;
  const int bq = p.block_q, bk = p.block_kv, d = s.head_dim, dv = s.head_dim_v;
  const int sq = t.batch * s.heads_q + t.head;
  const int skv = t.batch * s.heads_kv + t.head / s.group();
  const T kInf = std::numeric_limits<T>::infinity();
  const T mask = T(p.mask_value);
  const ExpConstants<T> kc = exp_constants<T>(p, in.sm_scale);
  const ExpModel<T> e = exp_model<T>(p, kc.c);
  const T offset = T(p.max_offset);
  const bool snapping = p.max_round != MaxRound::kNone;
  const bool qk_mma = p.qk.kind == DotModel::kMma, pv_mma = p.pv.kind == DotModel::kMma;
  const DotRequirements pv_req = dot_requirements(p.pv);
  const bool qk_int = qk_mma && dot_requirements(p.qk).integer_acc;
  const bool pv_int = pv_mma && pv_req.integer_acc;
  const bool rowsum_mma = p.row_sum == RowSum::kMma;
  const int kv_pad = round_up(
      bk, std::max(pv_mma ? pv_req.k_step : 1, rowsum_mma ? dot_requirements(p.row_sum_mma).k_step : 1));
  const bool need_pbits = pv_mma || rowsum_mma;
  const bool q_scaled = in.q.scaled(), k_scaled = in.k.scaled(), v_scaled = in.v.scaled();
  const bool v_chunk_scale = v_scaled && in.v.key_dependent_scale;
  const bool fold = p.dequant == Dequant::kFold;
  const bool scaled_max = p.max_domain == MaxDomain::kScaled;
  const bool p_scaled = p.p_scale != PScale::kNone;
  const bool fused_rescale = p.rescale_fused && p.pv_acc == PvAccumulate::kChunk;
  const bool o_fp16 = p.o_accum == Encoding::kFp16;
  const int q_mean_blocks = in.q.means_per_slice;
  // SageAttention's in-16 V order (fused.cu TransposePadPermute): key position k of an
  // instruction holds token kPerm16[k % 16] of its 16-key group.
  static constexpr int kPerm16[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};

  ws.sc.resize(std::size_t(bq) * bk);
  ws.cf.resize(fold ? std::size_t(bq) * bk : 0);
  ws.pt.resize(std::size_t(bq) * bk);
  ws.pf.resize(std::size_t(bq) * bk);
  ws.pb.assign(need_pbits ? std::size_t(bq) * kv_pad : 0, 0u);
  ws.p_scale.resize(std::size_t(bq));
  ws.alpha.resize(std::size_t(bq));
  ws.p_mul.assign(std::size_t(bq), 1.0f);
  const bool hook = p.rescale == Rescale::kHook;
  const bool add_ftz = hook && p.rescale_hook.add_ftz;
  ws.vt.resize(std::size_t(dv) * bk);
  ws.vtb.assign(pv_mma ? std::size_t(dv) * kv_pad : 0, 0u);
  // The T-typed score and P buffers (FP64 state: the double vectors; FP32: float views).
  T* sc;
  T* pt;
  if constexpr (std::is_same_v<T, double>) {
    sc = ws.sc.data();
    pt = ws.pt.data();
  } else {
    ws.sf.resize(std::size_t(bq) * bk);
    ws.ptf.resize(std::size_t(bq) * bk);
    sc = ws.sf.data();
    pt = ws.ptf.data();
  }
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  std::uint32_t ones_bits = 0;
  if (rowsum_mma) {
    const DotRequirements r = dot_requirements(p.row_sum_mma);
    ones_bits = encode_float_bits(r.b_enc, 1.0f, kExact);
  }

  const int n_blocks = kv_blocks_of_tile(in, p, t);
  const int lo = std::max(kv_block_begin, 0), hi = std::min(kv_block_end, n_blocks);
  // A causal mask hides key j from query i when j > i + offset_kv.
  const int offset_kv = p.causal_align == CausalAlign::kTopLeft ? 0 : s.len_kv - s.len_q;
  const T p_static = T(p.p_static_scale);
  for (int step = 0; step < hi - lo; ++step) {
    const int nb = p.kv_order == KvOrder::kDescending ? hi - 1 - step : lo + step;
    const int j0 = nb * bk;
    const int cols = std::min(bk, s.len_kv - j0);
    // SageAttention2's masked path: the last `dequant_tail` blocks of the tile dequantize the
    // score first and use the plain coefficient (attn_utils.cuh; one block on sm90, two on sm80/89).
    const bool fold_b = fold && nb < n_blocks - p.dequant_tail;
    // 1. S = Q Kᵀ for the tile from a cleared accumulator (FA2: acc_s cleared, the first GEMM),
    //    dequantized; masked entries get the mask value (FA2 apply_mask_causal: -inf; keys past
    //    seqlen_k are never read here, the block is `cols` wide).
    for (int i = 0; i < t.rows; ++i) {
      const int qi_tok = t.q_begin + i;
      const float* qi = in.q.row(sq, qi_tok);
      const float sq_scale = q_scaled ? in.q.scale(sq, qi_tok, 0) : 1.0f;
      const float* ds = in.delta_s.empty()
                            ? nullptr
                            : in.delta_s.data() + (std::size_t(sq) * q_mean_blocks +
                                                   std::size_t(qi_tok / in.q.mean_block)) *
                                                      s.len_kv;
      T* si = sc + std::size_t(i) * bk;
      for (int j = 0; j < cols; ++j) {
        const int kj_tok = j0 + j;
        if (in.causal && kj_tok > qi_tok + offset_kv) {
          si[j] = mask;
          if (fold) ws.cf[std::size_t(i) * bk + j] = float(kc.c);
          continue;
        }
        T acc;
        if (!qk_mma) {
          acc = T(dot_values(p.qk.kind, 0.0, qi, in.k.row(skv, kj_tok), d));
        } else {
          const std::uint32_t r = dot_mma(p.qk, in.q.row_bits(sq, qi_tok),
                                          in.k.row_bits(skv, kj_tok), in.q.dim_pad, 0u);
          acc = qk_int ? T(int_to_f32(std::int32_t(r), p.int_cvt)) : T(f32_from_bits(r));
        }
        if (q_scaled || k_scaled) {
          const float sk_scale = k_scaled ? in.k.scale(skv, kj_tok, 0) : 1.0f;
          if (fold_b) {
            // SageAttention2: dequant_scale = q_scale · k_scale; sm_scale_eff = sm_scale ·
            // dequant_scale; x = fmaf(S, sm_scale_eff, −m) (the exponent stage below).
            const float dq = sq_scale * sk_scale;
            ws.cf[std::size_t(i) * bk + j] = float(kc.c) * dq;
          } else if constexpr (std::is_same_v<T, float>) {
            acc = acc * (sq_scale * sk_scale);
          } else {
            acc = acc * (double(sq_scale) * double(sk_scale));
          }
        } else if (fold) {
          ws.cf[std::size_t(i) * bk + j] = float(kc.c);
        }
        if (fold && !fold_b) ws.cf[std::size_t(i) * bk + j] = float(kc.c);
        if (ds) acc = acc + T(ds[kj_tok]);
        si[j] = acc;
      }
    }
    // 2. Online softmax per row (FA2 softmax_rescale_o; SageAttention2 update_mdo for the scaled
    //    domain): the new max, the rescale of l and O, p for every key, each p added to its
    //    lane's partial sum before P is cast (FA2 reduce_sum runs on the FP32 scores,
    //    convert_type afterwards).
    for (int i = 0; i < t.rows; ++i) {
      SoftmaxState<T>& st = rows[std::size_t(i)];
      const T* si = sc + std::size_t(i) * bk;
      const float* ci = fold ? ws.cf.data() + std::size_t(i) * bk : nullptr;
      auto scaled_arg = [&](int j, T sub) -> T {  // fma(s, c, −sub) in exponent units
        const T c = fold ? T(ci[j]) : kc.c;
        return p.fma ? std::fma(si[j], c, -sub) : si[j] * c - sub;
      };
      T block_max = -kInf;
      if (scaled_max) {
        for (int j = 0; j < cols; ++j) {
          const T x = scaled_arg(j, offset);
          block_max = x > block_max ? x : block_max;
        }
      } else {
        for (int j = 0; j < cols; ++j) block_max = si[j] > block_max ? si[j] : block_max;
      }
      const T m_old = st.m;
      const bool was_empty = st.empty();
      st.m = block_max > st.m ? block_max : st.m;
      // FA2 Check_inf: the exponent uses max 0 while the row has seen no visible key, so a fully
      // masked block gives exp(-inf) = 0 instead of a -inf - (-inf) NaN.
      const T m_use = st.empty() ? T(0) : st.m;
      // The reference the exponent subtracts, in exponent units, and the rescale factor.
      T ref, alpha;
      std::int32_t n_shift = 0;
      if (!scaled_max && !snapping) {
        ref = offset != T(0) ? (p.fma ? std::fma(m_use, kc.c, -offset) : m_use * kc.c - offset)
                             : m_use * kc.c;  // FA2: max_scaled = max(mi) * scale
        alpha = e.alpha(m_old, m_use);
      } else {
        auto to_ref = [&](T m) -> T {
          if (scaled_max) return snap(m, p.max_round);
          const T x = offset != T(0) ? (p.fma ? std::fma(m, kc.c, -offset) : m * kc.c - offset)
                                     : m * kc.c;
          return snap(x, p.max_round);
        };
        ref = to_ref(m_use);
        const T ref_old = was_empty ? -kInf : to_ref(m_old);
        alpha = e.eval(ref_old - ref);
        if (p.rescale == Rescale::kIntAdd && !was_empty) n_shift = std::int32_t(ref_old - ref);
      }
      ws.alpha[std::size_t(i)] = float(alpha);
      // The running sum follows alpha here unless the row-sum model fuses it into its first add.
      const bool sum_fuses_rescale = p.row_sum == RowSum::kSageLanes ||
                                     p.row_sum == RowSum::kTritonTree ||
                                     p.row_sum == RowSum::kQuadFma;
      if (!sum_fuses_rescale)
        for (int l = 0; l < st.lanes; ++l) st.l[l] = st.l[l] * alpha;
      if (hook) {
        // The technique's own step (AMLA): an INT32 added to O's FP32 bits, P's factor.
        ws.p_mul[std::size_t(i)] = 1.0f;
        if (!st.empty()) {
          const RescaleStep r =
              p.rescale_hook.step(float(st.m), was_empty, st.aux.data(), p.rescale_hook.ctx);
          ws.p_mul[std::size_t(i)] = r.p_mul;
          if (r.apply_add)
            for (T& x : st.o) x = T(add_to_bits(float(x), r.o_add));
        }
      } else if (p.rescale == Rescale::kIntAdd) {
        if (n_shift != 0)
          for (T& x : st.o) x = int_add_pow2(x, n_shift);
      } else if (o_fp16) {
        // SageAttention sm80 "fp16": __hmul2(RO, fl16(o_scale)), an fp16 product rounded once.
        const float a16 = round_to_f16(float(alpha));
        for (T& x : st.o) x = T(round_to_f16(float(x) * a16));
      } else if (p.rescale == Rescale::kDivide) {
        if (!was_empty)
          for (T& x : st.o) x = x / alpha;
      } else if (!fused_rescale) {
        for (T& x : st.o) x = x * alpha;
      }
      T* pi = pt + std::size_t(i) * bk;
      const bool lane_sum = p.row_sum == RowSum::kQuad || p.row_sum == RowSum::kSingle;
      if (!scaled_max && !snapping && p.exp_base == ExpKind::kExp) {
        for (int j = 0; j < cols; ++j) {
          const T pij = e.eval((si[j] - m_use) * kc.c);
          if (lane_sum) st.add_to_sum(j, pij);
          pi[j] = pij;
        }
      } else if (!scaled_max && !fold) {
        // FA2 scale_apply_exp2: exp2f(x * scale - max_scaled), one FFMA under --fmad=true.
        for (int j = 0; j < cols; ++j) {
          const T pij = e.eval(p.fma ? std::fma(si[j], kc.c, -ref) : si[j] * kc.c - ref);
          if (lane_sum) st.add_to_sum(j, pij);
          pi[j] = pij;
        }
      } else {
        for (int j = 0; j < cols; ++j) {
          const T pij = e.eval(scaled_arg(j, ref));
          if (lane_sum) st.add_to_sum(j, pij);
          pi[j] = pij;
        }
      }
      for (int j = cols; j < bk; ++j) pi[j] = T(0);  // keys past the sequence: p = 0
      if (p.row_sum == RowSum::kSageLanes) {
        // Per lane t and 16-key tile: T = ((p(2t) + p(2t+1)) + p(8+2t)) + p(9+2t); the first tile
        // of the block is added by one FFMA with the rescale, the others one by one.
        for (int lane = 0; lane < 4; ++lane) {
          for (int tile = 0; tile < bk / 16; ++tile) {
            const T* q16 = pi + 16 * tile;
            const T part = ((q16[2 * lane] + q16[2 * lane + 1]) + q16[8 + 2 * lane]) + q16[9 + 2 * lane];
            st.l[lane] = tile == 0 ? std::fma(alpha, st.l[lane], part) : st.l[lane] + part;
          }
        }
      } else if (p.row_sum == RowSum::kQuadFma) {
        // Quad lane t: columns 8g + 2t, 8g + 2t + 1 in order; the first one's add carries the
        // rescale (FFMA); a lane with no key in the block keeps l·alpha (FA2 adds p = 0 there).
        for (int lane = 0; lane < 4; ++lane) {
          bool first = true;
          for (int g = 0; g < bk; g += 8)
            for (int c = 0; c < 2; ++c) {
              const int j = g + 2 * lane + c;
              if (j >= cols) continue;
              st.l[lane] = first ? std::fma(st.l[lane], alpha, pi[j]) : st.l[lane] + pi[j];
              first = false;
            }
          if (first) st.l[lane] = st.l[lane] * alpha;
        }
      } else if (p.row_sum == RowSum::kTritonTree) {
        // tl.sum: lane t folds columns 2t, 2t+1, 8+2t, 9+2t, ... in order; (a0 + a2) + (a1 + a3);
        // then l = fma(l, alpha, block sum).
        T a[4];
        for (int lane = 0; lane < 4; ++lane) {
          T acc = pi[2 * lane] + pi[2 * lane + 1];
          for (int g = 8; g < bk; g += 8) acc = (acc + pi[g + 2 * lane]) + pi[g + 2 * lane + 1];
          a[lane] = acc;
        }
        st.l[0] = std::fma(st.l[0], alpha, (a[0] + a[2]) + (a[1] + a[3]));
      }
    }
    // 3. P cast: to the P encoding (FA2 convert_type<Element>; SageAttention2 cvt.rn.satfinite
    //    e4m3), or quantized with a per-row / per-tile scale (TurboAttention Alg. 1: s_P̃ =
    //    max|P̃| / 119).
    if (p_scaled) {
      const int groups = p.p_scale == PScale::kRow ? t.rows : 1;
      for (int g = 0; g < groups; ++g) {
        const int r0 = p.p_scale == PScale::kRow ? g : 0;
        const int r1 = p.p_scale == PScale::kRow ? g + 1 : t.rows;
        float amax = 0.0f;
        for (int i = r0; i < r1; ++i)
          for (int j = 0; j < cols; ++j) {
            const float a = std::fabs(float(pt[std::size_t(i) * bk + j]));
            amax = a > amax ? a : amax;
          }
        float sc_p = amax / p.p_quantizer.qmax;
        if (p.p_quantizer.epsilon == ScaleEpsilon::kAdd) sc_p = sc_p + 1e-7f;
        float a_eps = p.p_quantizer.epsilon == ScaleEpsilon::kFloor ? std::max(amax, 1e-7f) : amax;
        if (p.p_quantizer.epsilon == ScaleEpsilon::kFloor) sc_p = a_eps / p.p_quantizer.qmax;
        const float inv = p.p_quantizer.qmax / a_eps;
        for (int i = r0; i < r1; ++i) {
          ws.p_scale[std::size_t(i)] = sc_p;
          for (int j = 0; j < cols; ++j) {
            const std::size_t ij = std::size_t(i) * bk + j;
            ws.pf[ij] = float(quantize_value(float(pt[ij]), sc_p, inv, p.p_quantizer));
          }
        }
      }
    } else {
      for (int i = 0; i < t.rows; ++i) {
        for (int j = 0; j < cols; ++j) {
          const std::size_t ij = std::size_t(i) * bk + j;
          // SageAttention2 Alg. 1: (P̃ · 448).to(FP8), the product one FP32 (state) multiply.
          // AMLA Alg. 2 line 12: P·S16 (one FP32 multiply), then the cast.
          const T pij = hook ? pt[ij] * T(ws.p_mul[std::size_t(i)]) : pt[ij];
          const double c = cast_p(p_static != T(0) ? pij * p_static : pij, p);
          ws.pf[ij] = float(c);
          if constexpr (std::is_same_v<T, double>) {
            pt[ij] = c;  // the P the FP64 product multiplies (FP64 P: unrounded)
          }
        }
      }
    }
    if (need_pbits) {
      for (int i = 0; i < t.rows; ++i) {
        std::uint32_t* pb = ws.pb.data() + std::size_t(i) * kv_pad;
        for (int k = 0; k < kv_pad; ++k) {
          const int j = p.pv_perm16 ? (k & ~15) + kPerm16[k & 15] : k;
          if (j >= cols) {
            pb[k] = 0u;
            continue;
          }
          const float v = ws.pf[std::size_t(i) * bk + j];
          pb[k] = is_float_encoding(p.p) ? encode_float_bits(p.p, v, kExact)
                                         : int_to_encoding(p.p, std::int32_t(v));
        }
      }
    }
    if (rowsum_mma) {
      // SageAttention sm80: the row sum on the tensor core, d = mma(P16, ones, C = d·o_scale).
      for (int i = 0; i < t.rows; ++i) {
        SoftmaxState<T>& st = rows[std::size_t(i)];
        std::vector<std::uint32_t>& ones = ws.ones;
        ones.assign(std::size_t(kv_pad), ones_bits);
        const std::uint32_t r = dot_mma(p.row_sum_mma, ws.pb.data() + std::size_t(i) * kv_pad,
                                        ones.data(), kv_pad, f32_bits(float(st.l[0])));
        st.l[0] = T(f32_from_bits(r));
      }
    }
    // 4. O = O·alpha + P V (the rescale happened above): P as cast, V transposed, keys in
    //    natural order, O the C operand (FA2 gemm_rs) or a chunk from zero added with FADD.
    for (int j = 0; j < cols; ++j) {
      const float* vj = in.v.row(skv, j0 + j);
      for (int c = 0; c < dv; ++c) ws.vt[std::size_t(c) * bk + j] = vj[c];
    }
    if (pv_mma) {
      for (int c = 0; c < dv; ++c) {
        std::uint32_t* vb = ws.vtb.data() + std::size_t(c) * kv_pad;
        for (int k = 0; k < kv_pad; ++k) {
          const int j = p.pv_perm16 ? (k & ~15) + kPerm16[k & 15] : k;
          vb[k] = j < cols ? in.v.bits[(std::size_t(skv) * s.len_kv + std::size_t(j0 + j)) * dv + c]
                           : 0u;
        }
      }
    }
    for (int i = 0; i < t.rows; ++i) {
      T* oi = rows[std::size_t(i)].o.data();
      const float* pfi = ws.pf.data() + std::size_t(i) * bk;
      const T* pti = pt + std::size_t(i) * bk;
      const std::uint32_t* pbi = pv_mma ? ws.pb.data() + std::size_t(i) * kv_pad : nullptr;
      const float row_scale = p_scaled ? ws.p_scale[std::size_t(i)] : 1.0f;
      const T alpha_i = T(ws.alpha[std::size_t(i)]);
      for (int c = 0; c < dv; ++c) {
        const float* vtc = ws.vt.data() + std::size_t(c) * bk;
        if (p.pv_acc == PvAccumulate::kIntoC) {
          if (!pv_mma) {
            oi[c] = std::is_same_v<T, double> && p.p == Encoding::kFp64
                        ? T(dot_values(p.pv.kind, double(oi[c]), pti, vtc, cols))
                        : T(dot_values(p.pv.kind, double(oi[c]), pfi, vtc, cols));
          } else {
            // An FP64 state hands O to the instruction as its FP32 C (the accumulator's own
            // rounding is then the product stage's).
            const std::uint32_t r = dot_mma(p.pv, pbi, ws.vtb.data() + std::size_t(c) * kv_pad,
                                            kv_pad, f32_bits(float(oi[c])));
            oi[c] = T(f32_from_bits(r));
          }
          continue;
        }
        T chunk;
        if (!pv_mma) {
          chunk = std::is_same_v<T, double> && p.p == Encoding::kFp64
                      ? T(dot_values(p.pv.kind, 0.0, pti, vtc, cols))
                      : T(dot_values(p.pv.kind, 0.0, pfi, vtc, cols));
        } else {
          const std::uint32_t r =
              dot_mma(p.pv, pbi, ws.vtb.data() + std::size_t(c) * kv_pad, kv_pad, 0u);
          chunk = pv_int ? T(int_to_f32(std::int32_t(r), p.int_cvt)) : T(f32_from_bits(r));
        }
        // The chunk's dequantization: fl(s_P · s_V) then one multiply (TurboAttention Alg. 1
        // `s_P̃ · s_V · Q(P̃) V`, an order the paper leaves open), then the FADD onto O.
        float f = row_scale;
        if (v_chunk_scale) f = f * in.v.scale(skv, j0, c);
        if (p_scaled || v_chunk_scale) chunk = chunk * T(f);
        // SageAttention2's flush RO = fma(o_scale, RO, buffer) when the rescale is fused.
        if (add_ftz) {
          oi[c] = T(red_add_f32_ftz(float(oi[c]), float(chunk)));
          continue;
        }
        oi[c] = fused_rescale ? std::fma(alpha_i, oi[c], chunk) : oi[c] + chunk;
      }
    }
  }
}

template <class T>
void finish_tile(const PreparedInput& in, const Pipeline& p, const Tile& t,
                 const std::vector<SoftmaxState<T>>& rows, double* o, double* lse) {
  const AttentionShape& s = in.shape;
  const int dv = s.head_dim_v;
  const int sq = t.batch * s.heads_q + t.head;
  const int skv = t.batch * s.heads_kv + t.head / s.group();
  const ExpConstants<T> kc = exp_constants<T>(p, in.sm_scale);
  const bool v_epilogue_scale = in.v.scaled() && !in.v.key_dependent_scale;
  const float* v_mean =
      in.v.mean.empty() ? nullptr : in.v.mean.data() + std::size_t(skv) * in.v.means_per_slice * dv;
  for (int i = 0; i < t.rows; ++i) {
    const SoftmaxState<T>& st = rows[std::size_t(i)];
    const T l = st.sum();
    const bool degenerate = l == T(0) || l != l;
    // 5. O / l (FA2 normalize_softmax_lse: inv_sum = 1/sum, 1 when sum is 0 or NaN, then O·inv).
    T inv = T(1);
    if (!degenerate) {
      if (p.normalize == Normalize::kRcp) inv = T(1) / l;
      if (p.normalize == Normalize::kRcpApproxFtz) inv = T(RcpApproxFtz::h100()(float(l)));
    }
    double* orow = o + std::size_t(i) * dv;
    // A technique's own epilogue (Rescale::kHook: AMLA's guard and O / (l·S16)).
    thread_local std::vector<float> hooked;
    const bool hook_finish = p.rescale == Rescale::kHook && p.rescale_hook.finish && !degenerate;
    if (hook_finish) {
      hooked.assign(st.o.begin(), st.o.end());
      p.rescale_hook.finish(hooked.data(), dv, float(l), st.aux.data(), p.rescale_hook.ctx);
    }
    for (int c = 0; c < dv; ++c) {
      T x;
      if (hook_finish) {
        x = T(hooked[std::size_t(c)]);
      } else if (p.normalize == Normalize::kDiv) {
        x = degenerate ? st.o[c] : st.o[c] / l;
      } else if (p.normalize == Normalize::kDivFull) {
        x = degenerate ? st.o[c] : T(div_full(float(st.o[c]), float(l)));
      } else {
        x = st.o[c] * inv;
      }
      // SageAttention2 Alg. 1 line 8: O / l / 448 · δ_V (the static P scale undone).
      if (p.p_static_scale != 0.0) x = x / T(p.p_static_scale);
      // SageAttention sm80 "fp16": the normalized fp16 accumulator is rounded to fp16 again.
      if (p.o_accum == Encoding::kFp16) {
        x = T(round_to_f16(float(x)));
        if (v_mean && p.out != Encoding::kFp32 && p.out != Encoding::kFp64) {
          // ... and the smooth-V mean is added to the output-dtype value by __hadd2 in that dtype
          // (qk_int_sv_f16_cuda_sm80.cu fuse_v_mean): round to the output format first; the FP32
          // sum below is exact for values of one 16-bit format within 2^13 of each other.
          x = T(decode_float_bits(p.out, encode_float_bits(p.out, float(x), p.out_cast)));
        }
      }
      // SageAttention2 epilogue: RO *= v_scale[channel]; with smooth V one FFMA adds the mean
      // (fuse_v_scale + fuse_v_mean: fma(RO·r, v_scale, v_mean)).
      if (v_epilogue_scale && v_mean) {
        x = std::fma(x, T(in.v.scale(skv, 0, c)), T(v_mean[c]));
      } else {
        if (v_epilogue_scale) x = x * T(in.v.scale(skv, 0, c));
        if (v_mean) x = x + T(v_mean[c]);
      }
      // The output conversion (FA2: convert_type<Element> of acc_o; from an FP64 state through
      // FP32, as that state's FP32 store did).
      if (p.out == Encoding::kFp64) {
        orow[c] = double(x);
      } else {
        const float f = float(x);
        orow[c] = p.out == Encoding::kFp32
                      ? f
                      : decode_float_bits(p.out, encode_float_bits(p.out, f, p.out_cast));
      }
    }
    // Natural-log LSE: FA2's m·softmax_scale + log(sum) in the state's arithmetic; with a scaled or
    // snapped max the exponent's own reference r: r·ln 2 + log(sum) (base 2) or r + log(sum).
    double lse_v;
    if (p.lse == LseModel::kLog2Mufu || p.lse == LseModel::kLog2Libdevice) {
      // SageAttention: lse2 = log2(d) + m in FP32, m the exponent's reference (offset included).
      const float ml = float(p.max_domain == MaxDomain::kScaled ? st.m : st.m * kc.c);
      const float lg = p.lse == LseModel::kLog2Mufu ? Lg2ApproxFtz::h100()(float(l))
                                                    : log2f_libdevice(float(l));
      lse[i] = l == T(0) ? -std::numeric_limits<double>::infinity() : double(lg + ml);
      continue;
    } else if (degenerate) {
      lse_v = std::numeric_limits<double>::infinity();  // FA2 writes INFINITY (no split)
    } else if (p.max_domain == MaxDomain::kRaw && p.max_round == MaxRound::kNone) {
      T x = st.m * kc.c_nat + std::log(l);
      if (p.max_offset != 0 && p.exp_base == ExpKind::kExp2) x = x - T(p.max_offset * kLn2);
      lse_v = double(x);
    } else {
      T r;
      if (p.max_domain == MaxDomain::kScaled) {
        r = snap(st.m, p.max_round);
      } else {
        const T y = p.max_offset != 0 ? (p.fma ? std::fma(st.m, kc.c, -T(p.max_offset))
                                               : st.m * kc.c - T(p.max_offset))
                                      : st.m * kc.c;
        r = snap(y, p.max_round);
      }
      lse_v = double(p.exp_base == ExpKind::kExp2 ? r * T(kLn2) + std::log(l) : r + std::log(l));
    }
    if (!degenerate && !in.lse_shift.empty())
      lse_v += in.lse_shift[std::size_t(sq) * s.len_q + std::size_t(t.q_begin + i)];
    lse[i] = lse_v;
  }
}

template void attend_tile<float>(const PreparedInput&, const Pipeline&, const Tile&, int, int,
                                 std::vector<SoftmaxState<float>>&, TileWorkspace&);
template void attend_tile<double>(const PreparedInput&, const Pipeline&, const Tile&, int, int,
                                  std::vector<SoftmaxState<double>>&, TileWorkspace&);
template void finish_tile<float>(const PreparedInput&, const Pipeline&, const Tile&,
                                 const std::vector<SoftmaxState<float>>&, double*, double*);
template void finish_tile<double>(const PreparedInput&, const Pipeline&, const Tile&,
                                  const std::vector<SoftmaxState<double>>&, double*, double*);

namespace {

template <class T>
void run_all(const PreparedInput& in, const Pipeline& p, PipelineResult& res) {
  const AttentionShape& s = in.shape;
  const int bq = p.block_q;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  // Work items are whole (batch, head, Q block) tiles, as CUDA thread blocks are: every output
  // element is computed by one item in a fixed order, so the thread count changes nothing.
#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
    std::vector<SoftmaxState<T>> st(std::size_t(bq), empty_row_state<T>(p, s.head_dim_v));
    std::vector<double> lse(static_cast<std::size_t>(bq));
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      Tile t;
      const int qb = int(item % q_blocks);
      t.head = int((item / q_blocks) % s.heads_q);
      t.batch = int(item / q_blocks / s.heads_q);
      t.q_begin = qb * bq;
      t.rows = std::min(bq, s.len_q - t.q_begin);
      for (int i = 0; i < t.rows; ++i) st[std::size_t(i)].reset();
      attend_tile<T>(in, p, t, 0, std::numeric_limits<int>::max(), st, *ws);
      const std::size_t row0 = (std::size_t(t.batch) * s.heads_q + t.head) * s.len_q + t.q_begin;
      finish_tile<T>(in, p, t, st, res.o.data() + row0 * s.head_dim_v, lse.data());
      for (int i = 0; i < t.rows; ++i) res.lse[row0 + i] = lse[std::size_t(i)];
    }
  }
}

}  // namespace

PipelineResult run_pipeline(const PreparedInput& in, const Pipeline& p) {
  validate(p);
  PipelineResult r;
  r.o.assign(in.shape.o_size(), 0.0);
  r.lse.assign(std::size_t(in.shape.batch) * in.shape.heads_q * in.shape.len_q, 0.0);
  if (p.state == StateType::kFp32) {
    run_all<float>(in, p, r);
  } else {
    run_all<double>(in, p, r);
  }
  return r;
}

PipelineResult run_pipeline(const AttentionInput& in, const Pipeline& p) {
  return run_pipeline(prepare(in, p), p);
}

}  // namespace attnsim
