// The epilogue of one tile: O / l (the normalize model), a technique's own finish (a rescale
// hook), the static P scale undone, an fp16 accumulator's rounding, V's epilogue scale and mean,
// the output cast; and the LSE in the softmax stage's model. A row that sees no key (l = 0) gives
// O = 0 and LSE +inf, in every model (FA2 normalize_softmax_lse's INFINITY marker).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "numerics/isa.hpp"
#include "numerics/special.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

namespace {

// The FP32 kernels' natural-log LSE forms (LseModel kNaturalFma, kNaturalFmaC, kNaturalDiv) of a
// row with sum l > 0 and max m, in the state's arithmetic (.ftz or not); c_row is the raw score's
// exponent coefficient of the row (FA3 FP8: with its descales).
template <class T>
T kernel_lse(const SoftmaxStage& sm, T m, T l, T c_row, T c_nat) {
  constexpr float kLn2f = 0.693147182464599609375f;   // 0x3F317218, fl32(ln 2)
  constexpr float kLog2ef = 1.44269502162933349609f;  // 0x3FB8AA3B, fl32(log2 e)
  const bool ftz = sm.ftz;
  // FA3 FP8: the p carry 2^max_offset (Max_offset = 8), the sum is scaled back first.
  const T ls = sm.max_offset != 0 ? stage_util::state_mul(l, T(std::exp2(-sm.max_offset)), ftz) : l;
  if (sm.lse == LseModel::kNaturalDiv)  // CUTLASS: mi / kLog2e + logf(s_prime), IEEE
    return stage_util::state_add(m / T(kLog2ef), T(logf_libdevice(float(ls), ftz)), ftz);
  if (sm.lse == LseModel::kNaturalLg2Fma) {
    // cuDNN decode: FFMA(lg2.approx(l), ln2, FMUL(m, ln2)) (lean_reduction_kernel's last FFMA on
    // the max the split epilogue writes in natural-log units).
    const T lg = ftz ? T(Lg2ApproxFtz::h100()(float(ls)))
                     : T(f32_from_bits(lg2_approx_bits(f32_bits(float(ls)))));
    return stage_util::state_fma(lg, T(kLn2f), stage_util::state_mul(m, T(kLn2f), ftz), ftz);
  }
  const T log_l = T(fast_logf(float(ls), ftz));  // __logf: lg2.approx, FMUL by ln 2
  T k;
  if (sm.lse == LseModel::kNaturalFmaC) {
    k = stage_util::state_mul(c_row, T(kLn2f), ftz);  // FA3: softmax_scale_log2 * M_LN2
  } else {
    k = sm.max_domain == MaxDomain::kScaled ? T(kLn2f) : c_nat;  // cuDNN ln 2; FA2 softmax_scale
  }
  return stage_util::state_fma(m, k, log_l, ftz);
}

}  // namespace

template <class T>
double epilogue_lse(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int i,
                    const TileState<T>& state) {
  constexpr double kLn2 = 0.69314718055994530942;
  const AttentionShape& s = in.shape;
  const SoftmaxStage& sm = p.softmax;
  const ExpConstants<T> kc = exp_constants<T>(p, in.sm_scale);
  const T l = row_sum_total(state, i, sm);
  const bool degenerate = l == T(0) || l != l;
  const T m = state.m[std::size_t(i)];
  double lse_v;
  if (degenerate) {
    lse_v = std::numeric_limits<double>::infinity();  // the empty-row convention (above)
  } else if (sm.lse == LseModel::kNaturalFma || sm.lse == LseModel::kNaturalFmaC ||
             sm.lse == LseModel::kNaturalDiv || sm.lse == LseModel::kNaturalLg2Fma) {
    const int qt = ti.q_begin + i;
    const T c_row = sm.dequant == Dequant::kDescale
                        ? T(stage_util::descale_coefficient(float(kc.c), in, ti, qt, sm.ftz))
                        : kc.c;
    lse_v = double(kernel_lse(sm, m, l, c_row, kc.c_nat));
  } else if (sm.lse == LseModel::kLog2Mufu || sm.lse == LseModel::kLog2Libdevice ||
             sm.lse == LseModel::kLog2LibdeviceLn2) {
    // SageAttention: lse2 = log2(d) + m in FP32, m the exponent's reference (offset included).
    const float ml = float(sm.max_domain == MaxDomain::kScaled ? m : m * kc.c);
    const float lg = sm.lse == LseModel::kLog2Mufu ? Lg2ApproxFtz::h100()(float(l))
                                                   : log2f_libdevice(float(l));
    const float lse2 = lg + ml;
    // FlexAttention: `lse * 0.6931471805599453` in an Inductor pointwise kernel (mul.f32 by
    // 0x3F317218).
    lse_v = sm.lse == LseModel::kLog2LibdeviceLn2 ? double(lse2 * 0.6931471805599453f)
                                                  : double(lse2);
  } else if (sm.max_domain == MaxDomain::kRaw && p.rescale.max_round == MaxRound::kNone) {
    // Natural-log LSE: FA2's m·softmax_scale + log(sum) in the state's arithmetic.
    T x = m * kc.c_nat + std::log(l);
    if (sm.max_offset != 0 && sm.base == ExpKind::kExp2) x = x - T(sm.max_offset * kLn2);
    lse_v = double(x);
  } else {
    // With a scaled or snapped max, the exponent's own reference r: r·ln 2 + log(sum) (base 2)
    // or r + log(sum).
    T r;
    if (sm.max_domain == MaxDomain::kScaled) {
      r = p.rescale.max_round == MaxRound::kCeil      ? std::ceil(m)
          : p.rescale.max_round == MaxRound::kNearest ? std::round(m)
                                                      : m;
    } else {
      const T y = sm.max_offset != 0 ? (sm.fma ? std::fma(m, kc.c, -T(sm.max_offset))
                                               : m * kc.c - T(sm.max_offset))
                                     : m * kc.c;
      r = p.rescale.max_round == MaxRound::kCeil      ? std::ceil(y)
          : p.rescale.max_round == MaxRound::kNearest ? std::round(y)
                                                      : y;
    }
    lse_v = double(sm.base == ExpKind::kExp2 ? r * T(kLn2) + std::log(l) : r + std::log(l));
  }
  // Smooth K's LSE correction q·mean_k·sm_scale (the base-2 kernels' wrapper adds its own).
  const bool natural = sm.lse == LseModel::kNatural;
  if (!degenerate && natural && !in.lse_shift.empty())
    lse_v += in.lse_shift[std::size_t(ti.sq) * s.len_q + std::size_t(ti.q_begin + i)];
  return lse_v;
}

template <class T>
void epilogue_ref(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                  const TileState<T>& state, double* o, double* lse) {
  const AttentionShape& s = in.shape;
  const int dv = s.head_dim_v;
  const SoftmaxStage& sm = p.softmax;
  const bool v_epilogue_scale = in.v.scaled() && !in.v.key_dependent_scale;
  // FA3 FP8: V's scale multiplies 1/l before O (ScaleAt::kReciprocal).
  const bool v_in_inv = v_epilogue_scale && p.v.apply == ScaleAt::kReciprocal;
  const bool ftz = sm.ftz;
  const float* v_mean =
      in.v.mean.empty() ? nullptr
                        : in.v.mean.data() + std::size_t(ti.skv) * in.v.means_per_slice * dv;
  const bool hooked = p.rescale.kind == Rescale::kHook;
  std::vector<float> row;
  if (hooked) row.resize(std::size_t(dv));
  // Per-warp O accumulators (PvStage::warps): combined first (o_row_total).
  std::vector<T> o_total;
  if (!state.warp_o.empty()) o_total.resize(std::size_t(dv));
  for (int i = 0; i < rows; ++i) {
    const T* oi = state.o_row(i);
    if (!o_total.empty()) {
      o_row_total(state, i, ftz, o_total.data());
      oi = o_total.data();
    }
    const T l = row_sum_total(state, i, sm);
    const bool degenerate = l == T(0) || l != l;
    // 5. O / l (FA2 normalize_softmax_lse: inv_sum = 1/sum, 1 when sum is 0 or NaN, then O·inv).
    T inv = T(1);
    if (!degenerate) {
      if (p.normalize.kind == Normalize::kRcp) inv = T(1) / l;
      if (p.normalize.kind == Normalize::kRcpApproxFtz) inv = T(RcpApproxFtz::h100()(float(l)));
    }
    // A technique's own epilogue (Rescale::kHook: AMLA's guard and O / (l·S16)).
    const bool hook_finish = hooked && !degenerate;
    if (hook_finish) {
      for (int c = 0; c < dv; ++c) row[std::size_t(c)] = float(oi[c]);
      p.rescale.hook->finish(row.data(), dv, float(l), state.hook[std::size_t(i)].data());
    }
    double* orow = o + std::size_t(i) * dv;
    for (int c = 0; c < dv; ++c) {
      T x;
      bool v_done = false;  // V's scale already in the reciprocal (the O·inv form only)
      if (hook_finish) {
        x = T(row[std::size_t(c)]);
      } else if (p.normalize.kind == Normalize::kDiv) {
        x = degenerate ? oi[c] : oi[c] / l;
      } else if (p.normalize.kind == Normalize::kDivFull) {
        x = degenerate ? oi[c] : T(div_full(float(oi[c]), float(l)));
      } else if (v_in_inv) {
        const T inv_v = stage_util::state_mul(inv, T(in.v.scale(ti.skv, 0, c)), ftz);
        x = stage_util::state_mul(oi[c], inv_v, ftz);
        v_done = true;
      } else {
        x = stage_util::state_mul(oi[c], inv, ftz);
      }
      // SageAttention2 Alg. 1 line 8: O / l / 448 · δ_V (the static P scale undone).
      if (p.p.static_scale != 0.0) x = x / T(p.p.static_scale);
      // SageAttention sm80 "fp16": the normalized fp16 accumulator is rounded to fp16 again.
      if (p.pv.o_accum == Encoding::kFp16) {
        x = T(round_to(Encoding::kFp16, float(x), kCudaRn));
        if (v_mean && p.out.enc != Encoding::kFp32 && p.out.enc != Encoding::kFp64) {
          // ... and the smooth-V mean is added to the output-dtype value by __hadd2 in that dtype
          // (qk_int_sv_f16_cuda_sm80.cu fuse_v_mean): round to the output format first; the FP32
          // sum below is exact for values of one 16-bit format within 2^13 of each other.
          x = T(round_to(p.out.enc, float(x), p.out.cast));
        }
      }
      // SageAttention2 epilogue: RO *= v_scale[channel]; with smooth V one FFMA adds the mean
      // (fuse_v_scale + fuse_v_mean: fma(RO·r, v_scale, v_mean)).
      if (v_epilogue_scale && v_mean && !v_done) {
        x = std::fma(x, T(in.v.scale(ti.skv, 0, c)), T(v_mean[c]));
      } else {
        if (v_epilogue_scale && !v_done) x = x * T(in.v.scale(ti.skv, 0, c));
        if (v_mean) x = x + T(v_mean[c]);
      }
      // The output conversion (FA2: convert_type<Element> of acc_o; from an FP64 state through
      // FP32, as that state's FP32 store did).
      orow[c] = p.out.enc == Encoding::kFp64 ? double(x) : double(round_to(p.out.enc, float(x), p.out.cast));
    }
    lse[i] = epilogue_lse(p, in, ti, i, state);
  }
}

template double epilogue_lse<float>(const Pipeline&, const PreparedInput&, const TileIndex&, int,
                                    const TileState<float>&);
template double epilogue_lse<double>(const Pipeline&, const PreparedInput&, const TileIndex&, int,
                                     const TileState<double>&);
template void epilogue_ref<float>(const Pipeline&, const PreparedInput&, const TileIndex&, int,
                                  const TileState<float>&, double*, double*);
template void epilogue_ref<double>(const Pipeline&, const PreparedInput&, const TileIndex&, int,
                                   const TileState<double>&, double*, double*);

// The dispatcher (stages.hpp): the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void epilogue_stage(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                  const TileState<T>& state, double* o, double* lse) {
  if constexpr (std::is_same_v<T, float>)
    if (fp32_state_kernels(p.softmax) && p.normalize.kind != Normalize::kNone &&
        p.v.apply != ScaleAt::kReciprocal && state.warp_o.empty()) {
      if (const auto f = stage_kernels().epilogue) return f(p, in, ti, rows, state, o, lse);
    }
  epilogue_ref(p, in, ti, rows, state, o, lse);
}
template void epilogue_stage<float>(const Pipeline&, const PreparedInput&, const TileIndex&, int, const TileState<float>&, double*, double*);
template void epilogue_stage<double>(const Pipeline&, const PreparedInput&, const TileIndex&, int, const TileState<double>&, double*, double*);

}  // namespace attnsim
