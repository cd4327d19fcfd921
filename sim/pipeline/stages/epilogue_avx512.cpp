// The epilogue on AVX-512 for an FP32 state: epilogue_ref's bits, 16 channels of one row per
// register for O / l (or O·(1/l)), the static P scale, V's epilogue scale and mean; the output
// cast of a 16-bit output format and the LSE are the reference's scalar code. A rescale hook's
// finish, an fp16 O accumulator and div.full take the reference.
#include <vector>

#include "numerics/special.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
// Last: the AVX-512 helpers (avx512.hpp).
#include "sim/pipeline/stages/avx512.hpp"

namespace attnsim {

namespace {

struct RowOps {
  bool div = false;           // O / l (Normalize::kDiv), else O · inv
  bool static_scale = false;  // O / s
  float s = 0.0f;
  const float* v_scale = nullptr;  // V's scale per channel (epilogue groups)
  const float* v_mean = nullptr;   // V's mean per channel
};

// x = O / l or O·inv (O unchanged for a degenerate row of kDiv), then / s, then V's scale and
// mean in the reference's order (one FFMA when both).
ATTNSIM_AVX512 void normalize_row(const RowOps& op, const float* o, int dv, float l, float inv,
                                  bool degenerate, float* x) {
  const __m512 vl = _mm512_set1_ps(l), vinv = _mm512_set1_ps(inv), vs = _mm512_set1_ps(op.s);
  for (int c = 0; c < dv; c += 16) {
    const __mmask16 m = avx512::first16(dv - c);
    __m512 r = _mm512_maskz_loadu_ps(m, o + c);
    if (op.div) {
      if (!degenerate) r = _mm512_div_ps(r, vl);
    } else {
      r = _mm512_mul_ps(r, vinv);
    }
    if (op.static_scale) r = _mm512_div_ps(r, vs);
    if (op.v_scale && op.v_mean) {
      r = _mm512_fmadd_ps(r, _mm512_maskz_loadu_ps(m, op.v_scale + c),
                          _mm512_maskz_loadu_ps(m, op.v_mean + c));
    } else {
      if (op.v_scale) r = _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, op.v_scale + c));
      if (op.v_mean) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, op.v_mean + c));
    }
    _mm512_mask_storeu_ps(x + c, m, r);
  }
}

// out[c] = double(x[c]): the FP32 and FP64 outputs of an FP32 state are its FP32 values.
ATTNSIM_AVX512 void widen_row(const float* x, int dv, double* out) {
  for (int c = 0; c < dv; c += 8) {
    const __mmask8 m = avx512::first8(dv - c);
    _mm512_mask_storeu_pd(out + c, m, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + c)));
  }
}

}  // namespace

void epilogue_avx512(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                     const TileState<float>& state, double* o, double* lse) {
  const Normalize norm = p.normalize.kind;
  if (p.rescale.kind == Rescale::kHook || p.pv.o_accum == Encoding::kFp16 ||
      norm == Normalize::kDivFull)
    return epilogue_ref(p, in, ti, rows, state, o, lse);
  const int dv = in.shape.head_dim_v;
  RowOps op;
  op.div = norm == Normalize::kDiv;
  op.static_scale = p.p.static_scale != 0.0;
  op.s = float(p.p.static_scale);
  // V's per-channel scale (groups that do not follow the keys) and mean, once per tile.
  std::vector<float> v_scale;
  if (in.v.scaled() && !in.v.key_dependent_scale) {
    v_scale.resize(std::size_t(dv));
    for (int c = 0; c < dv; ++c) v_scale[std::size_t(c)] = in.v.scale(ti.skv, 0, c);
    op.v_scale = v_scale.data();
  }
  if (!in.v.mean.empty())
    op.v_mean = in.v.mean.data() + std::size_t(ti.skv) * in.v.means_per_slice * dv;
  const bool wide_out = p.out.enc == Encoding::kFp32 || p.out.enc == Encoding::kFp64;
  std::vector<float> x(static_cast<std::size_t>(dv));
  for (int i = 0; i < rows; ++i) {
    const float l = row_sum_total(state, i, p.softmax);
    const bool degenerate = l == 0.0f || l != l;
    // FA2 normalize_softmax_lse: inv = 1/l, 1 when l is 0 or NaN (the reference's inv).
    float inv = 1.0f;
    if (!degenerate) {
      if (norm == Normalize::kRcp) inv = 1.0f / l;
      if (norm == Normalize::kRcpApproxFtz) inv = RcpApproxFtz::h100()(l);
    }
    normalize_row(op, state.o_row(i), dv, l, inv, degenerate, x.data());
    double* orow = o + std::size_t(i) * dv;
    if (wide_out) {
      widen_row(x.data(), dv, orow);
    } else {
      for (int c = 0; c < dv; ++c)
        orow[c] = double(round_to(p.out.enc, x[std::size_t(c)], p.out.cast));
    }
    lse[i] = epilogue_lse(p, in, ti, i, state);
  }
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
