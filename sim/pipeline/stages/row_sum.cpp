// The row sum l of the online softmax, every variant in one place: the lanes a model keeps, the
// order each lane adds the block's p in, where the rescale by alpha happens (before the adds, or
// fused into the first one), how the lanes are combined at the end, and the merge of two states
// over disjoint keys (split schedules).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "numerics/isa.hpp"
#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

template <class T>
void row_sum_ref(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf) {
  const int bk = b.bk;
  for (int i = 0; i < b.rows; ++i) {
    T* l = state.lanes(i);
    const T a = buf.alpha[std::size_t(i)];
    const T* pi = buf.p.data() + std::size_t(i) * bk;
    switch (st.row_sum) {
      case RowSum::kQuad:
        // SM80 FA2: lane t owns columns 8n + 2t, 8n + 2t + 1; each p added in column order after
        // the lane's rescale (softmax_rescale_o's row_sum *= scale, then reduce_sum).
        for (int t = 0; t < 4; ++t) l[t] = l[t] * a;
        for (int j = 0; j < b.cols; ++j) l[(j % 8) / 2] = l[(j % 8) / 2] + pi[j];
        break;
      case RowSum::kSingle:
        l[0] = l[0] * a;
        for (int j = 0; j < b.cols; ++j) l[0] = l[0] + pi[j];
        break;
      case RowSum::kSageLanes:
        // Per lane t and 16-key tile: T = ((p(2t) + p(2t+1)) + p(8+2t)) + p(9+2t); the first tile
        // of the block is added by one FFMA with the rescale, the others one by one.
        for (int t = 0; t < 4; ++t)
          for (int tile = 0; tile < bk / 16; ++tile) {
            const T* q16 = pi + 16 * tile;
            const T part = ((q16[2 * t] + q16[2 * t + 1]) + q16[8 + 2 * t]) + q16[9 + 2 * t];
            l[t] = tile == 0 ? std::fma(a, l[t], part) : l[t] + part;
          }
        break;
      case RowSum::kQuadFma:
        // Quad lane t: columns 8g + 2t, 8g + 2t + 1 in order; the first one's add carries the
        // rescale (FFMA); a lane with no key in the block keeps l·alpha (FA2 adds p = 0 there).
        for (int t = 0; t < 4; ++t) {
          bool first = true;
          for (int g = 0; g < bk; g += 8)
            for (int c = 0; c < 2; ++c) {
              const int j = g + 2 * t + c;
              if (j >= b.cols) continue;
              l[t] = first ? std::fma(l[t], a, pi[j]) : l[t] + pi[j];
              first = false;
            }
          if (first) l[t] = l[t] * a;
        }
        break;
      case RowSum::kTritonTree: {
        // tl.sum: lane t folds columns 2t, 2t+1, 8+2t, 9+2t, ... in order; (a0 + a2) + (a1 + a3);
        // then l = fma(l, alpha, block sum).
        T part[4];
        for (int t = 0; t < 4; ++t) {
          T acc = pi[2 * t] + pi[2 * t + 1];
          for (int g = 8; g < bk; g += 8) acc = (acc + pi[g + 2 * t]) + pi[g + 2 * t + 1];
          part[t] = acc;
        }
        l[0] = std::fma(l[0], a, (part[0] + part[2]) + (part[1] + part[3]));
        break;
      }
      case RowSum::kTritonWarps: {
        const int tiles = bk / 8;
        const int w_n = std::min(st.rowsum_warps, tiles);  // distinct warps
        T warp[8];
        for (int w = 0; w < w_n; ++w) {
          T part[4];
          for (int t = 0; t < 4; ++t) {
            T acc = pi[8 * w + 2 * t] + pi[8 * w + 2 * t + 1];
            for (int g = 8 * (w + w_n); g < bk; g += 8 * w_n)
              acc = (acc + pi[g + 2 * t]) + pi[g + 2 * t + 1];
            part[t] = acc;
          }
          warp[w] = (part[0] + part[2]) + (part[1] + part[3]);
        }
        for (int s = w_n / 2; s >= 1; s /= 2)
          for (int w = 0; w < s; ++w) warp[w] = warp[w] + warp[w + s];
        l[0] = std::fma(l[0], a, warp[0]);
        break;
      }
      case RowSum::kQuadBlock:
        // cuDNN sm90 (SASS: FADD.FTZ per column, then FFMA.FTZ R19, R154, R19, R157): lane t's
        // partial of the block from 0 over its columns 8g + 2t, 8g + 2t + 1 in order, then
        // l = fma(alpha, l, partial).
        for (int t = 0; t < 4; ++t) {
          T part = T(0);
          for (int g = 0; g < bk; g += 8)
            for (int c = 0; c < 2; ++c) {
              const int j = g + 2 * t + c;
              if (j < b.cols) part = stage_util::state_add(part, pi[j], st.ftz);
            }
          l[t] = stage_util::state_fma(a, l[t], part, st.ftz);
        }
        break;
      case RowSum::kCutlassWarps: {
        // CUTLASS fmha (kernel_forward.h iterative_softmax): MM0's column warps of 32 keys each
        // (WarpShape 32x32, bk/32 of them); in each, quad lane t sums its columns from 0 in order,
        // the lanes (b0 + b1) + (b2 + b3) (xor 1, then 2); s' = ((fl(s'·alpha) + w0) + w1) + ...
        // (addition_storage read in warp order).
        constexpr int span = 32;
        T total = stage_util::state_mul(l[0], a, st.ftz);
        for (int w = 0; w < bk / span; ++w) {
          T lane[4];
          for (int t = 0; t < 4; ++t) {
            lane[t] = T(0);
            for (int g = 0; g < span; g += 8)
              for (int c = 0; c < 2; ++c) {
                const int j = w * span + g + 2 * t + c;
                if (j < b.cols) lane[t] = stage_util::state_add(lane[t], pi[j], st.ftz);
              }
          }
          const T warp = stage_util::state_add(stage_util::state_add(lane[0], lane[1], st.ftz),
                                               stage_util::state_add(lane[2], lane[3], st.ftz),
                                               st.ftz);
          total = stage_util::state_add(total, warp, st.ftz);
        }
        l[0] = total;
        break;
      }
      case RowSum::kAtomicWarps: {
        // cuDNN's sm80 decode kernel (SASS: FADD.FTZ per column, then an ATOMS.CAST.SPIN loop
        // around a plain FADD into a per-lane shared float zeroed every tile, then FFMA.FTZ):
        // warp w's lane t sums its 8 columns of keys 32w..32w+31 from 0; the warps' partials
        // land on the lane's sum in rowsum_order; l_t = fma(alpha, l_t, sum).
        constexpr int span = 32;
        for (int t = 0; t < 4; ++t) {
          T sum = T(0);
          for (int k = 0; k < 4; ++k) {
            const int w = st.rowsum_order[std::size_t(k)];
            T part = T(0);
            for (int g = 0; g < span; g += 8)
              for (int c = 0; c < 2; ++c) {
                const int j = w * span + g + 2 * t + c;
                if (j < b.cols) part = stage_util::state_add(part, pi[j], st.ftz);
              }
            sum = sum + part;  // the atomic's FADD: no .ftz
          }
          l[t] = stage_util::state_fma(a, l[t], sum, st.ftz);
        }
        break;
      }
      case RowSum::kWarpSum:
        // PyTorch's softmax_warp_forward (the block holds the row): the warp's butterfly sum.
        l[0] = stage_util::state_add(stage_util::state_mul(l[0], a, st.ftz),
                                     stage_util::warp_sum(pi, b.cols), st.ftz);
        break;
      case RowSum::kMma: {
        // SageAttention sm80: the row sum on the tensor core, d = mma(P16, ones, C = d·o_scale),
        // chained over the block's keys (zero-padded to the instruction's k).
        const DotRequirements r = dot_requirements(st.row_sum_dot);
        const int n = b.kv_pad;
        buf.enc_a.assign(std::size_t(n), 0u);
        buf.ones.assign(std::size_t(n), encode_float_bits(r.b_enc, 1.0f, kCudaRn));
        const float* pf = buf.pf.data() + std::size_t(i) * bk;
        // The P registers the P·V instruction takes (SageAttention's in-16 order when permuted).
        for (int k = 0; k < n; ++k) {
          const int j = perm16 ? (k & ~15) + kSagePerm16[k & 15] : k;
          if (j < b.cols) buf.enc_a[std::size_t(k)] = stage_util::encoding_of(p_enc, pf[j]);
        }
        l[0] = l[0] * a;
        l[0] = T(f32_from_bits(
            dot_mma(st.row_sum_dot, buf.enc_a.data(), buf.ones.data(), n, f32_bits(float(l[0])))));
        break;
      }
    }
  }
}

template <class T>
T row_sum_total(const TileState<T>& s, int i, RowSum model) {
  const T* l = s.lanes(i);
  if (row_sum_lanes(model) == 1) return l[0];
  // FA2 quad_allreduce_ (shuffle xor 2, then 1); SageAttention2's normalize_d and cuDNN (xor 1,
  // then 2).
  return model == RowSum::kSageLanes || model == RowSum::kQuadBlock ||
                 model == RowSum::kAtomicWarps
             ? (l[0] + l[1]) + (l[2] + l[3])
             : (l[0] + l[2]) + (l[1] + l[3]);
}

template <class T>
T row_sum_total(const TileState<T>& s, int i, const SoftmaxStage& st) {
  if (!st.ftz) return row_sum_total(s, i, st.row_sum);
  // The same order with FADD.FTZ (cuDNN, FA3).
  const T* l = s.lanes(i);
  if (row_sum_lanes(st.row_sum) == 1) return l[0];
  using stage_util::state_add;
  const bool x1 = st.row_sum == RowSum::kSageLanes || st.row_sum == RowSum::kQuadBlock ||
                  st.row_sum == RowSum::kAtomicWarps;
  return x1 ? state_add(state_add(l[0], l[1], true), state_add(l[2], l[3], true), true)
            : state_add(state_add(l[0], l[2], true), state_add(l[1], l[3], true), true);
}

template <class T>
void o_row_total(const TileState<T>& s, int i, bool ftz, T* out) {
  const T* o0 = s.o_row(i);
  if (s.warp_o.empty()) {
    for (int c = 0; c < s.dv; ++c) out[c] = o0[c];
    return;
  }
  // cuDNN's decode epilogue (through shared memory: warps 2 and 3 store, 0 and 1 add theirs, then
  // warp 1 stores and warp 0 adds): (O0 + O2) + (O1 + O3).
  const T* w = s.warp_o.data() + std::size_t(i) * 3 * s.dv;
  const T *o1 = w, *o2 = w + s.dv, *o3 = w + 2 * s.dv;
  using stage_util::state_add;
  for (int c = 0; c < s.dv; ++c)
    out[c] = state_add(state_add(o0[c], o2[c], ftz), state_add(o1[c], o3[c], ftz), ftz);
}

template <class T>
void merge_row(TileState<T>& a, int i, const TileState<T>& b, int j, RowSum model,
               const ExpModel<T>& e) {
  if (b.empty(j)) return;
  const int lanes = row_sum_lanes(model);
  T* la = a.lanes(i);
  const T* lb = b.lanes(j);
  T* oa = a.o_row(i);
  const T* ob = b.o_row(j);
  if (a.empty(i)) {
    a.m[std::size_t(i)] = b.m[std::size_t(j)];
    for (int t = 0; t < TileState<T>::kMaxLanes; ++t) la[t] = lb[t];
    for (int c = 0; c < a.dv; ++c) oa[c] = ob[c];
    return;
  }
  const T ma = a.m[std::size_t(i)], mb = b.m[std::size_t(j)];
  const T m_new = ma > mb ? ma : mb;
  const T sa = e.alpha(ma, m_new);
  const T sb = e.alpha(mb, m_new);
  for (int t = 0; t < lanes; ++t) la[t] = la[t] * sa + lb[t] * sb;
  for (int c = 0; c < a.dv; ++c) oa[c] = oa[c] * sa + ob[c] * sb;
  a.m[std::size_t(i)] = m_new;
}

template void row_sum_ref<float>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                 TileState<float>&, TileBuffers<float>&);
template void row_sum_ref<double>(const SoftmaxStage&, Encoding, bool, const BlockView&,
                                  TileState<double>&, TileBuffers<double>&);
template float row_sum_total<float>(const TileState<float>&, int, RowSum);
template double row_sum_total<double>(const TileState<double>&, int, RowSum);
template float row_sum_total<float>(const TileState<float>&, int, const SoftmaxStage&);
template double row_sum_total<double>(const TileState<double>&, int, const SoftmaxStage&);
template void o_row_total<float>(const TileState<float>&, int, bool, float*);
template void o_row_total<double>(const TileState<double>&, int, bool, double*);
template void merge_row<float>(TileState<float>&, int, const TileState<float>&, int, RowSum,
                               const ExpModel<float>&);
template void merge_row<double>(TileState<double>&, int, const TileState<double>&, int, RowSum,
                                const ExpModel<double>&);

// The dispatcher (stages.hpp): the instruction models' tile kernels where this CPU has one
// (numerics/mma_tile.hpp), the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void row_sum_stage(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf) {
  if (st.row_sum == RowSum::kMma && dot_mma_tile_has_kernel(st.row_sum_dot))
    return row_sum_mma(st, p_enc, perm16, b, state, buf);
  if constexpr (std::is_same_v<T, float>)
    if (fp32_state_kernels_or_ftz(st) && st.row_sum != RowSum::kTritonWarps) {
      if (const auto f = stage_kernels().row_sum) return f(st, p_enc, perm16, b, state, buf);
    }
  row_sum_ref(st, p_enc, perm16, b, state, buf);
}
template void row_sum_stage<float>(const SoftmaxStage&, Encoding, bool, const BlockView&, TileState<float>&, TileBuffers<float>&);
template void row_sum_stage<double>(const SoftmaxStage&, Encoding, bool, const BlockView&, TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
