// The counters' observers (observe.hpp): per stage, the events read off its inputs and outputs.
// Each classifies an element once, at the stage where the failure first appears (a NaN or Inf
// that only passes through a later stage is counted there as propagated, or not at all).
#include "sim/pipeline/stages/observe.hpp"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "formats/encoding.hpp"

namespace attnsim {

namespace {

// Row i of the tile against key `key` (the block's first key b.j0 plus the column in the block).
bool masked(const PreparedInput& in, const TileIndex& ti, int i, int key) {
  return in.causal && key > ti.q_begin + i + ti.offset_kv;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
bool is_sub(T x) {
  return x != T(0) && std::fabs(x) < std::numeric_limits<T>::min();
}

// A result that should be `exact` (computed in FP64 from the stage's inputs) but came out as
// `got`: overflow, underflow, flush, or NaN.
template <class T>
void classify(StageCounters& c, CounterStage s, double exact, T got, bool input_nan,
              CounterEvent nan_cause, std::int64_t slice, std::int64_t row, std::int64_t col) {
  if (got != got) {
    c.add(s, input_nan ? CounterEvent::kNanPropagated : nan_cause, slice, row, col);
  } else if (std::isinf(got) && std::isfinite(exact) &&
             std::fabs(exact) <= double(std::numeric_limits<T>::max())) {
    // exact within range but Inf out: an intermediate overflowed (an accumulator's partial sum)
    c.add(s, CounterEvent::kOverflowInf, slice, row, col);
  } else if (std::isinf(got) && !std::isinf(exact) && exact == exact) {
    c.add(s, CounterEvent::kOverflowInf, slice, row, col);
  } else if (got == T(0) && exact != 0.0 && exact == exact) {
    const double a = std::fabs(exact);
    c.add(s,
          a >= double(std::numeric_limits<T>::denorm_min()) / 2 ? CounterEvent::kFlushedSubnormal
                                                               : CounterEvent::kUnderflowZero,
          slice, row, col);
  }
}

// std::fmax(m, |x|) for m >= 0 (never NaN): a NaN x leaves m. Written out because GCC 12's AArch64
// vectorizer stops with an internal compiler error (vect_transform_reduction) on an fmax
// reduction over FP32 values widened to FP64.
inline double max_abs(double m, float x) {
  const double a = std::fabs(double(x));
  return a > m ? a : m;
}

}  // namespace

double encoding_max_finite(Encoding e) {
  if (e == Encoding::kFp64) return DBL_MAX;
  if (e == Encoding::kFp32) return FLT_MAX;
  if (!is_float_encoding(e)) return double(encoding_traits(e).int_max);
  return double(decode_float_bits(e, encode_float_bits(e, FLT_MAX, kCudaSatfinite)));
}

template <class T>
void observe_qk(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                const TileBuffers<T>& buf, StageCounters& c) {
  const int d = in.shape.head_dim;
  const bool integer = st.dot.kind == DotModel::kMma && dot_requirements(st.dot).integer_acc;
  for (int i = 0; i < b.rows; ++i) {
    const int qt = ti.q_begin + i;
    const float* q = in.q.row(ti.sq, qt);
    double qmax = 0;
    bool qnan = false;
    for (int k = 0; k < d; ++k) {
      qmax = max_abs(qmax, q[k]);
      qnan = qnan || q[k] != q[k];
    }
    for (int j = 0; j < b.cols; ++j) {
      if (masked(in, ti, i, b.j0 + j)) continue;
      const T a = buf.acc[std::size_t(i) * b.bk + j];
      const float* k = in.k.row(ti.skv, b.j0 + j);
      if (integer) {
        // int32 accumulators: a wrap (or the instruction's clamp) needs |Σ q·k| ≥ 2^31, impossible
        // below the bound d · max|q| · max|k| < 2^31 (INT8 at d < 133,144); above it, the exact sum.
        double kmax = 0;
        for (int x = 0; x < d; ++x) kmax = max_abs(kmax, k[x]);
        if (double(d) * qmax * kmax >= 2147483648.0) {
          std::int64_t s = 0;
          for (int x = 0; x < d; ++x) s += std::int64_t(q[x]) * std::int64_t(k[x]);
          if (s > INT32_MAX || s < INT32_MIN)
            c.add(CounterStage::kQk, CounterEvent::kIntWrap, ti.sq, qt, b.j0 + j);
        }
        continue;
      }
      if (std::isfinite(a)) continue;
      bool knan = false, inf_in = false;
      for (int x = 0; x < d; ++x) {
        knan = knan || k[x] != k[x];
        inf_in = inf_in || std::isinf(k[x]) || std::isinf(q[x]);
      }
      if (a != a) {
        c.add(CounterStage::kQk,
              qnan || knan ? CounterEvent::kNanPropagated
              : inf_in     ? CounterEvent::kNanZeroTimesInf
                           : CounterEvent::kNanInfMinusInf,
              ti.sq, qt, b.j0 + j);
      } else if (!inf_in) {
        c.add(CounterStage::kQk, CounterEvent::kOverflowInf, ti.sq, qt, b.j0 + j);
      }
    }
  }
}

template <class T>
void observe_scores(const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                    const TileBuffers<T>& buf, StageCounters& c) {
  for (int i = 0; i < b.rows; ++i)
    for (int j = 0; j < b.cols; ++j) {
      if (masked(in, ti, i, b.j0 + j)) continue;
      const std::size_t ij = std::size_t(i) * b.bk + j;
      const T a = buf.acc[ij], s = buf.s[ij];
      if (std::isfinite(s) || !std::isfinite(a)) continue;
      c.add(CounterStage::kScores, s != s ? CounterEvent::kNanZeroTimesInf : CounterEvent::kOverflowInf,
            ti.sq, ti.q_begin + i, b.j0 + j);
    }
}

template <class T>
void observe_softmax(const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                     const TileBuffers<T>& buf, StageCounters& c) {
  for (int i = 0; i < b.rows; ++i)
    for (int j = 0; j < b.cols; ++j) {
      if (masked(in, ti, i, b.j0 + j)) continue;
      const std::size_t ij = std::size_t(i) * b.bk + j;
      const T s = buf.s[ij], x = buf.x[ij];
      // x = s·c − m: NaN from a finite-or-infinite score is Inf − Inf (s = m = +Inf).
      if (x != x && s == s)
        c.add(CounterStage::kSoftmax, CounterEvent::kNanInfMinusInf, ti.sq, ti.q_begin + i, b.j0 + j);
    }
}

template <class T>
void observe_exp(ExpKind base, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                 const TileBuffers<T>& buf, StageCounters& c) {
  constexpr double kLog2e = 1.44269504088896340736;
  const double to2 = base == ExpKind::kExp2 ? 1.0 : kLog2e;
  // The least exponent (base 2) of T's subnormals and of its normals.
  const double lo_sub = std::is_same_v<T, float> ? -149.0 : -1074.0;
  const double lo_norm = std::is_same_v<T, float> ? -126.0 : -1022.0;
  auto one = [&](T x, T p, std::int64_t row, std::int64_t col) {
    if (p != p) {
      if (x == x) c.add(CounterStage::kExp, CounterEvent::kNanZeroOverZero, ti.sq, row, col);
      return;
    }
    if (std::isinf(p) && std::isfinite(x)) {
      c.add(CounterStage::kExp, CounterEvent::kOverflowInf, ti.sq, row, col);
      return;
    }
    if (p != T(0) || !std::isfinite(x)) return;  // exp(−inf) = 0 is a mask, not a failure
    const double x2 = double(x) * to2;
    // A true value at or above half the least subnormal rounds to a nonzero: an FTZ exp
    // (ex2.approx.ftz) flushed it. Below, every exp model underflows.
    if (x2 >= lo_sub - 1.0)
      c.add(CounterStage::kExp, x2 < lo_norm ? CounterEvent::kFlushedSubnormal : CounterEvent::kUnderflowZero,
            ti.sq, row, col);
    else
      c.add(CounterStage::kExp, CounterEvent::kUnderflowZero, ti.sq, row, col);
  };
  for (int i = 0; i < b.rows; ++i) {
    for (int j = 0; j < b.cols; ++j) {
      if (masked(in, ti, i, b.j0 + j)) continue;
      const std::size_t ij = std::size_t(i) * b.bk + j;
      one(buf.x[ij], buf.p[ij], ti.q_begin + i, b.j0 + j);
    }
    // alpha (column -1): a rescale factor that underflows erases the row's earlier keys.
    one(buf.alpha_arg[std::size_t(i)], buf.alpha[std::size_t(i)], ti.q_begin + i, -1);
  }
}

template <class T>
void observe_rescale(const RescaleStage& st, const TileIndex& ti, const BlockView& b,
                     const StateSnapshot<T>& before, const TileState<T>& state,
                     const TileBuffers<T>& buf, StageCounters& c) {
  const int dv = state.dv;
  const bool int_add = st.kind == Rescale::kIntAdd || st.kind == Rescale::kHook;
  for (int i = 0; i < b.rows; ++i) {
    const T a = buf.alpha[std::size_t(i)];
    for (int ch = 0; ch < dv; ++ch) {
      const std::size_t k = std::size_t(i) * dv + ch;
      const T o0 = before.o[k], o1 = state.o[k];
      if (same_bits(o0, o1)) continue;
      const std::int64_t row = ti.q_begin + i;
      if (int_add) {
        // AMLA: O·2^N as an INT32 add on the bits is right only for a normal O whose result stays
        // normal; a zero or subnormal O, a sign flip or a non-finite result is a failure.
        if (o0 == T(0) || is_sub(o0) || is_sub(o1) || std::signbit(o0) != std::signbit(o1) ||
            !std::isfinite(o1) || o1 == T(0))
          c.add(CounterStage::kRescale, CounterEvent::kAmlaAddFailure, ti.sq, row, ch);
        if (st.kind == Rescale::kIntAdd && std::isfinite(o0) && o0 != T(0) && !is_sub(o0)) {
          const double want = std::ldexp(double(o0), int(buf.alpha_arg[std::size_t(i)]));
          if (double(o1) != want && !(o1 == T(0) || is_sub(o1) || !std::isfinite(o1)))
            c.add(CounterStage::kRescale, CounterEvent::kAmlaAddFailure, ti.sq, row, ch);
        }
        continue;
      }
      if (st.kind == Rescale::kDivide && a == T(0) && std::isfinite(o0) && o0 != T(0) &&
          std::isinf(o1)) {
        // A finite O divided by a zero factor (TurboAttention's printed diag(α)^-1 with SAS's
        // α = 0): a finite computation gave ±Inf.
        c.add(CounterStage::kRescale, CounterEvent::kOverflowInf, ti.sq, row, ch);
        continue;
      }
      const double exact = st.kind == Rescale::kDivide ? double(o0) / double(a) : double(o0) * double(a);
      const CounterEvent nan_cause =
          st.kind == Rescale::kDivide ? CounterEvent::kNanZeroOverZero : CounterEvent::kNanZeroTimesInf;
      classify(c, CounterStage::kRescale, exact, o1, o0 != o0 || a != a, nan_cause, ti.sq, row, ch);
    }
  }
}

template <class T>
void observe_p_cast(const PStage& st, const PreparedInput& in, const TileIndex& ti,
                    const BlockView& b, const TileBuffers<T>& buf, StageCounters& c) {
  const double maxf = encoding_max_finite(st.enc);
  const bool scaled = st.scale != PScale::kNone;
  for (int i = 0; i < b.rows; ++i) {
    const double mul = buf.p_mul_active ? double(buf.p_mul[std::size_t(i)]) : 1.0;
    for (int j = 0; j < b.cols; ++j) {
      if (masked(in, ti, i, b.j0 + j)) continue;
      const std::size_t ij = std::size_t(i) * b.bk + j;
      const T p = buf.p[ij];
      const float pf = buf.pf[ij];
      if (p != T(0) && p == p && pf == 0.0f) {
        c.add(CounterStage::kPCast, CounterEvent::kPVanished, ti.sq, ti.q_begin + i, b.j0 + j);
        continue;
      }
      if (scaled) continue;  // a per-row/tile scale maps max|P| to qmax: no clamp
      double pre = double(p) * mul;
      if (st.static_scale != 0.0) pre *= st.static_scale;
      if (std::fabs(pre) > maxf && std::fabs(double(pf)) == maxf)
        c.add(CounterStage::kPCast, CounterEvent::kSaturation, ti.sq, ti.q_begin + i, b.j0 + j);
      else if (std::isinf(pf) && std::isfinite(pre))
        c.add(CounterStage::kPCast, CounterEvent::kOverflowInf, ti.sq, ti.q_begin + i, b.j0 + j);
    }
  }
}

template <class T>
void observe_row_sum(const TileIndex& ti, const BlockView& b, const StateSnapshot<T>& before,
                     const TileState<T>& state, StageCounters& c) {
  for (int i = 0; i < b.rows; ++i)
    for (int k = 0; k < TileState<T>::kMaxLanes; ++k) {
      const std::size_t x = std::size_t(i) * TileState<T>::kMaxLanes + k;
      const T l0 = before.l[x], l1 = state.l[x];
      if (std::isinf(l1) && std::isfinite(l0))
        c.add(CounterStage::kRowSum, CounterEvent::kOverflowInf, ti.sq, ti.q_begin + i, -1);
      else if (l1 != l1 && l0 == l0)
        c.add(CounterStage::kRowSum, CounterEvent::kNanInfMinusInf, ti.sq, ti.q_begin + i, -1);
    }
}

template <class T>
void observe_pv(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const StateSnapshot<T>& before, const TileState<T>& state,
                const TileBuffers<T>& buf, StageCounters& c) {
  const int dv = state.dv;
  const bool chunked = st.acc == PvAccumulate::kChunk;
  const bool integer = st.dot.kind == DotModel::kMma && dot_requirements(st.dot).integer_acc;
  (void)pst;
  for (int i = 0; i < b.rows; ++i) {
    const float* pf = buf.pf.data() + std::size_t(i) * b.bk;
    double pmax = 0;
    bool pnan = false;
    for (int j = 0; j < b.cols; ++j) {
      pmax = max_abs(pmax, pf[j]);
      pnan = pnan || pf[j] != pf[j];
    }
    for (int ch = 0; ch < dv; ++ch) {
      const std::size_t k = std::size_t(i) * dv + ch;
      const T o0 = chunked ? T(0) : before.o[k];
      const T o1 = chunked ? buf.chunk[k] : state.o[k];
      const std::int64_t row = ti.q_begin + i;
      if (integer) {
        double vmax = 0;
        for (int j = 0; j < b.cols; ++j) vmax = max_abs(vmax, in.v.row(ti.skv, b.j0 + j)[ch]);
        if (double(b.kv_pad) * pmax * vmax >= 2147483648.0) {
          std::int64_t s = 0;
          for (int j = 0; j < b.cols; ++j)
            s += std::int64_t(pf[j]) * std::int64_t(in.v.row(ti.skv, b.j0 + j)[ch]);
          if (s > INT32_MAX || s < INT32_MIN) c.add(CounterStage::kPv, CounterEvent::kIntWrap, ti.sq, row, ch);
        }
      }
      if (std::isfinite(o1) || !std::isfinite(o0)) continue;
      bool vnan = false, vinf = false;
      for (int j = 0; j < b.cols; ++j) {
        const float v = in.v.row(ti.skv, b.j0 + j)[ch];
        vnan = vnan || v != v;
        vinf = vinf || std::isinf(v);
      }
      if (o1 != o1) {
        c.add(CounterStage::kPv,
              pnan || vnan ? CounterEvent::kNanPropagated
              : vinf       ? CounterEvent::kNanZeroTimesInf
                           : CounterEvent::kNanInfMinusInf,
              ti.sq, row, ch);
      } else if (!vinf) {
        // P·V (or its accumulator: SageAttention's fp16 pv_accum) overflowed.
        c.add(CounterStage::kPv, CounterEvent::kOverflowInf, ti.sq, row, ch);
      }
    }
  }
}

template <class T>
void observe_chunk_add(ChunkAdd how, const TileIndex& ti, const BlockView& b,
                       const StateSnapshot<T>& before, const TileState<T>& state,
                       const TileBuffers<T>& buf, StageCounters& c) {
  const int dv = state.dv;
  for (int i = 0; i < b.rows; ++i)
    for (int ch = 0; ch < dv; ++ch) {
      const std::size_t k = std::size_t(i) * dv + ch;
      const T o0 = before.o[k], x = buf.chunk[k], o1 = state.o[k];
      const double a = double(buf.alpha[std::size_t(i)]);
      // The exact value the add should give (the fused rescale's alpha included when it applies;
      // classify only reads its magnitude class and finiteness).
      double exact = double(o0) + double(x);
      if (!(std::isfinite(exact)) && std::isfinite(double(o0) * a + double(x))) exact = double(o0) * a + double(x);
      if (ftz_chunk_add(how) && o1 == T(0) && exact != 0.0 &&
          std::fabs(exact) < double(std::numeric_limits<float>::min())) {
        c.add(CounterStage::kChunkAdd, CounterEvent::kFlushedSubnormal, ti.sq, ti.q_begin + i, ch);
        continue;
      }
      if (std::isfinite(o1) || (!std::isfinite(o0) && !std::isfinite(x))) continue;
      classify(c, CounterStage::kChunkAdd, exact, o1, o0 != o0 || x != x,
               CounterEvent::kNanInfMinusInf, ti.sq, ti.q_begin + i, ch);
    }
}

template <class T>
void observe_epilogue(const Pipeline& p, const TileIndex& ti, int rows, const TileState<T>& state,
                      const double* o, StageCounters& c) {
  const int dv = state.dv;
  const double maxf = encoding_max_finite(p.out.enc);
  const double minsub = p.out.enc == Encoding::kFp64 ? 0.0
                        : is_float_encoding(p.out.enc)
                            ? double(decode_float_bits(p.out.enc, 1u))
                            : 1.0;
  for (int i = 0; i < rows; ++i) {
    const T* oi = state.o_row(i);
    double l = 0;
    for (int k = 0; k < TileState<T>::kMaxLanes; ++k) l += double(state.lanes(i)[k]);
    if (l == 0.0 || l != l) continue;  // the empty-row convention (O = 0)
    for (int ch = 0; ch < dv; ++ch) {
      const double y = o[std::size_t(i) * dv + ch];
      const double x = double(oi[ch]);
      const std::int64_t row = ti.q_begin + i;
      if (y != y) {
        c.add(CounterStage::kEpilogue, x != x ? CounterEvent::kNanPropagated : CounterEvent::kNanZeroOverZero,
              ti.sq, row, ch);
      } else if (std::isinf(y) && std::isfinite(x)) {
        c.add(CounterStage::kEpilogue, CounterEvent::kOverflowInf, ti.sq, row, ch);
      } else if (std::fabs(y) == maxf && std::isfinite(x) && p.p.static_scale == 0.0 &&
                 std::fabs(x / l) > maxf * 1.0001) {
        c.add(CounterStage::kEpilogue, CounterEvent::kSaturation, ti.sq, row, ch);
      } else if (y == 0.0 && x != 0.0 && std::isfinite(x) && p.out.enc != Encoding::kFp64) {
        // O / l below the output format's reach (the static scale and V's scale make this
        // approximate: counted only where O / l is clearly nonzero in the output format).
        if (std::fabs(x / l) >= minsub && p.p.static_scale == 0.0)
          c.add(CounterStage::kEpilogue, CounterEvent::kFlushedSubnormal, ti.sq, row, ch);
        else if (std::fabs(x / l) < minsub / 2 && p.p.static_scale == 0.0)
          c.add(CounterStage::kEpilogue, CounterEvent::kUnderflowZero, ti.sq, row, ch);
      }
    }
  }
}

template void observe_qk<float>(const QkStage&, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<float>&, StageCounters&);
template void observe_scores<float>(const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<float>&, StageCounters&);
template void observe_softmax<float>(const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<float>&, StageCounters&);
template void observe_exp<float>(ExpKind, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<float>&, StageCounters&);
template void observe_rescale<float>(const RescaleStage&, const TileIndex&, const BlockView&, const StateSnapshot<float>&, const TileState<float>&, const TileBuffers<float>&, StageCounters&);
template void observe_p_cast<float>(const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<float>&, StageCounters&);
template void observe_row_sum<float>(const TileIndex&, const BlockView&, const StateSnapshot<float>&, const TileState<float>&, StageCounters&);
template void observe_pv<float>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, const StateSnapshot<float>&, const TileState<float>&, const TileBuffers<float>&, StageCounters&);
template void observe_chunk_add<float>(ChunkAdd, const TileIndex&, const BlockView&, const StateSnapshot<float>&, const TileState<float>&, const TileBuffers<float>&, StageCounters&);
template void observe_epilogue<float>(const Pipeline&, const TileIndex&, int, const TileState<float>&, const double*, StageCounters&);
template void observe_qk<double>(const QkStage&, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<double>&, StageCounters&);
template void observe_scores<double>(const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<double>&, StageCounters&);
template void observe_softmax<double>(const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<double>&, StageCounters&);
template void observe_exp<double>(ExpKind, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<double>&, StageCounters&);
template void observe_rescale<double>(const RescaleStage&, const TileIndex&, const BlockView&, const StateSnapshot<double>&, const TileState<double>&, const TileBuffers<double>&, StageCounters&);
template void observe_p_cast<double>(const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, const TileBuffers<double>&, StageCounters&);
template void observe_row_sum<double>(const TileIndex&, const BlockView&, const StateSnapshot<double>&, const TileState<double>&, StageCounters&);
template void observe_pv<double>(const PvStage&, const PStage&, const PreparedInput&, const TileIndex&, const BlockView&, const StateSnapshot<double>&, const TileState<double>&, const TileBuffers<double>&, StageCounters&);
template void observe_chunk_add<double>(ChunkAdd, const TileIndex&, const BlockView&, const StateSnapshot<double>&, const TileState<double>&, const TileBuffers<double>&, StageCounters&);
template void observe_epilogue<double>(const Pipeline&, const TileIndex&, int, const TileState<double>&, const double*, StageCounters&);

}  // namespace attnsim
