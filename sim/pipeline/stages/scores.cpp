// The scores of one tile and KV block (the softmax stage's first step): the QKᵀ accumulators
// dequantized by the Q and K scales, or (dequant=fold) the scales folded into each score's
// exponent coefficient; ΔS of a block-mean-smoothed Q; masked keys set to the mask value (FA2
// apply_mask_causal: -inf; SageAttention: -5e6).
#include <cmath>
#include <type_traits>
#include <vector>

#include "numerics/isa.hpp"
#include "numerics/special.hpp"
#include "numerics/special_array.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

template <class T>
void scores_ref(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const ExpConstants<T>& kc, TileBuffers<T>& buf) {
  const bool fold = st.dequant == Dequant::kFold;
  // FA3 FP8: S stays the raw accumulator; the row's coefficient carries the per-tensor descales,
  // c = fl(fl(scale_log2 · q_descale) · k_descale) (FMUL.FTZ under its fast math).
  const bool descale = st.dequant == Dequant::kDescale;
  // SageAttention2's masked path: the last `dequant_tail` blocks of the tile dequantize the score
  // first and use the plain coefficient (attn_utils.cuh; one block on sm90, two on sm80/89).
  const bool fold_b = fold && b.nb < b.n_blocks - st.dequant_tail;
  const bool q_scaled = in.q.scaled(), k_scaled = in.k.scaled();
  const T mask = T(st.mask_value);
  const float c = float(kc.c);
  // A softcapped input (AttentionInput::softcap): C·tanh(s / C) as the pipeline computes it.
  const bool capped = in.softcap > 0;
  const double cap = in.softcap;
  auto softcap_of = [&](T x) -> T {
    if (st.softcap == SoftcapFn::kLibdevice && std::is_same_v<T, float>)
      return T(tanhf_libdevice(float(x) * float(1.0 / cap)) * float(cap));
    if (st.softcap == SoftcapFn::kExpDiv && std::is_same_v<T, float>) {
      // vLLM apply_softcap: u = S / C, (e^u − e^-u) / (e^u + e^-u) · C with tl.exp (mul by
      // fl32(log2 e), ex2.approx.f32) and `/` as div.full.f32; 0 − u is an FADD (no negation).
      const float cf = float(cap);
      const float u = div_full(float(x), cf);
      auto tl_exp = [](float y) { return f32_from_bits(ex2_approx_bits(f32_bits(y * 0x1.715476p+0f))); };
      const float p1 = tl_exp(u), p2 = tl_exp(0.0f - u);
      return T(div_full(cf * (p1 - p2), p1 + p2));
    }
    return T(cap * std::tanh(double(x) / cap));
  };
  // FlexAttention's softcap over a row at once: tanhf_libdevice_array, element by element the
  // scalar model (its MUFU steps through the array kernels).
  const bool cap_rows = capped && st.softcap == SoftcapFn::kLibdevice && std::is_same_v<T, float>;
  std::vector<float> cap_arg;
  std::vector<int> cap_col;
  for (int i = 0; i < b.rows; ++i) {
    const int qt = ti.q_begin + i;
    const float sq_scale = q_scaled ? in.q.scale(ti.sq, qt, 0) : 1.0f;
    const float* ds = in.delta_s.empty()
                          ? nullptr
                          : in.delta_s.data() + (std::size_t(ti.sq) * in.q.means_per_slice +
                                                 std::size_t(qt / in.q.mean_block)) *
                                                    in.shape.len_kv;
    const T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    T* s = buf.s.data() + std::size_t(i) * b.bk;
    float* cf = fold || descale ? buf.coef.data() + std::size_t(i) * b.bk : nullptr;
    if (descale) {
      const float c_row = stage_util::descale_coefficient(c, in, ti, qt, st.ftz);
      for (int j = 0; j < b.cols; ++j) {
        const int kt = b.j0 + j;
        cf[j] = c_row;
        s[j] = in.causal && (kt > qt + ti.offset_kv ||
                             (in.window > 0 && kt <= qt + ti.offset_kv - in.window))
                   ? mask
                   : acc[j];
      }
      continue;
    }
    for (int j = 0; j < b.cols; ++j) {
      const int kt = b.j0 + j;
      if (in.causal && (kt > qt + ti.offset_kv ||
                        (in.window > 0 && kt <= qt + ti.offset_kv - in.window))) {
        s[j] = mask;
        if (fold) cf[j] = c;
        continue;
      }
      T a = acc[j];
      if (q_scaled || k_scaled) {
        const float sk_scale = k_scaled ? in.k.scale(ti.skv, kt, 0) : 1.0f;
        if (fold_b) {
          // SageAttention2: dequant_scale = q_scale · k_scale; sm_scale_eff = sm_scale ·
          // dequant_scale; x = fmaf(S, sm_scale_eff, −m) (the softmax step).
          cf[j] = c * (sq_scale * sk_scale);
        } else if constexpr (std::is_same_v<T, float>) {
          a = a * (sq_scale * sk_scale);
        } else {
          a = a * (double(sq_scale) * double(sk_scale));
        }
      }
      if (fold && !(fold_b && (q_scaled || k_scaled))) cf[j] = c;
      // scale_log2=score: fl(acc · sm_scale) (FMUL.FTZ with .ftz: cuDNN's decode kernel)
      if (kc.score_scale != T(0)) a = stage_util::state_mul(a, kc.score_scale, st.ftz);
      if (ds) a = a + T(ds[kt]);
      if (cap_rows) {
        cap_arg.push_back(float(a) * float(1.0 / cap));
        cap_col.push_back(j);
      } else if (capped) {
        a = softcap_of(a);
      }
      s[j] = a;
    }
    if (cap_rows && !cap_col.empty()) {
      tanhf_libdevice_array(cap_arg.data(), cap_arg.size(), cap_arg.data());
      for (std::size_t k = 0; k < cap_col.size(); ++k)
        s[cap_col[k]] = T(cap_arg[k] * float(cap));
      cap_arg.clear();
      cap_col.clear();
    }
  }
}

template void scores_ref<float>(const SoftmaxStage&, const PreparedInput&, const TileIndex&,
                                const BlockView&, const ExpConstants<float>&, TileBuffers<float>&);
template void scores_ref<double>(const SoftmaxStage&, const PreparedInput&, const TileIndex&,
                                 const BlockView&, const ExpConstants<double>&,
                                 TileBuffers<double>&);

// The dispatcher (stages.hpp): the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void scores_stage(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const ExpConstants<T>& kc, TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>)
    if (fp32_state_kernels_or_ftz(st) &&
        in.window == 0 && !(in.softcap > 0)) {
      if (const auto f = stage_kernels().scores) return f(st, in, ti, b, kc, buf);
    }
  scores_ref(st, in, ti, b, kc, buf);
}
template void scores_stage<float>(const SoftmaxStage&, const PreparedInput&, const TileIndex&, const BlockView&, const ExpConstants<float>&, TileBuffers<float>&);
template void scores_stage<double>(const SoftmaxStage&, const PreparedInput&, const TileIndex&, const BlockView&, const ExpConstants<double>&, TileBuffers<double>&);

}  // namespace attnsim
