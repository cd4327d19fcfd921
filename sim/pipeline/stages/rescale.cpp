// The rescale stage of one tile and KV block: O follows the rescale factor alpha of the new max
// (a multiply in the state's arithmetic; AMLA's INT32 addition of N·2^23 to O's bits; O / alpha as
// TurboAttention Alg. 1 prints it; an fp16 accumulator's __hmul2; or a technique's hook), and the
// chunk of a two-level P·V lands on O (FADD, the rescale's multiply fused into it, or the H100's
// FTZ float atomicAdd). The row sum's rescale is the row-sum model's (row_sum.cpp).
#include <cmath>
#include <type_traits>

#include "numerics/isa.hpp"
#include "numerics/special.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

namespace {

float round_to_f16(float x) { return round_to(Encoding::kFp16, x, kCudaRn); }

}  // namespace

template <class T>
void rescale_ref(const RescaleStage& st, Encoding o_accum, const BlockView& b, TileState<T>& state,
                 TileBuffers<T>& buf) {
  const int dv = state.dv;
  buf.p_mul_active = st.kind == Rescale::kHook;
  for (int i = 0; i < b.rows; ++i) {
    T* o = state.o_row(i);
    const T a = buf.alpha[std::size_t(i)];
    const bool first = buf.first[std::size_t(i)] != 0;
    switch (st.kind) {
      case Rescale::kHook: {
        // The technique's own step (AMLA): an INT32 added to O's FP32 bits, P's factor.
        buf.p_mul[std::size_t(i)] = 1.0f;
        if (state.empty(i)) break;
        const RescaleStep r = st.hook->step(float(state.m[std::size_t(i)]), first,
                                            state.hook[std::size_t(i)].data());
        buf.p_mul[std::size_t(i)] = r.p_mul;
        if (r.apply_add)
          for (int c = 0; c < dv; ++c) o[c] = T(add_to_bits(float(o[c]), r.o_add));
        break;
      }
      case Rescale::kIntAdd: {
        if (first) break;
        const std::int32_t n = std::int32_t(buf.alpha_arg[std::size_t(i)]);  // snap(m_old) − snap(m)
        if (n != 0)
          for (int c = 0; c < dv; ++c) o[c] = stage_util::int_add_pow2(o[c], n);
        break;
      }
      case Rescale::kMultiplyFtz:
        // cuDNN's and FA3's fast-math rescale: FMUL.FTZ of O by alpha, every block (alpha = 0 on
        // a row's first block, where O is 0).
        for (int c = 0; c < dv; ++c) o[c] = stage_util::state_mul(o[c], a, true);
        break;
      case Rescale::kMultiply:
      case Rescale::kDivide:
        if (o_accum == Encoding::kFp16) {
          // SageAttention sm80 "fp16": __hmul2(RO, fl16(o_scale)), an fp16 product rounded once.
          const float a16 = round_to_f16(float(a));
          for (int c = 0; c < dv; ++c) o[c] = T(round_to_f16(float(o[c]) * a16));
        } else if (st.kind == Rescale::kDivide) {
          if (!first)
            for (int c = 0; c < dv; ++c) o[c] = o[c] / a;
        } else if (!st.fused) {
          for (int c = 0; c < dv; ++c) o[c] = o[c] * a;
        }
        break;
    }
    // Per-warp O accumulators (PvStage::warps: cuDNN's decode kernel rescales each warp's O with
    // FMUL.FTZ every tile): the same multiply on warps 1.. (couplings: mul or mul.ftz only).
    if (!state.warp_o.empty()) {
      const int nw = int(state.warp_o.size() / (std::size_t(state.rows) * dv));
      T* w = state.warp_o.data() + std::size_t(i) * nw * dv;
      const bool ftz = st.kind == Rescale::kMultiplyFtz;
      for (int c = 0; c < nw * dv; ++c) w[c] = stage_util::state_mul(w[c], a, ftz);
    }
  }
}

template <class T>
void add_chunk_ref(const RescaleStage& st, ChunkAdd how, const BlockView& b, TileState<T>& state,
                   TileBuffers<T>& buf) {
  const int dv = state.dv;
  for (int i = 0; i < b.rows; ++i) {
    T* o = state.o_row(i);
    const T* ch = buf.chunk.data() + std::size_t(i) * dv;
    const T a = buf.alpha[std::size_t(i)];
    if (ftz_chunk_add(how)) {
      for (int c = 0; c < dv; ++c) o[c] = T(red_add_f32_ftz(float(o[c]), float(ch[c])));
    } else if (how == ChunkAdd::kCutlassEpilogue) {
      // MemoryEfficientAttentionNormalize (epilogue_rescale_output.h) against the FP32 output
      // buffer: kIsFirst = the tile's first block (D = a·accum), kIsLast = its last (a =
      // 1 / s_prime, IEEE, with s_prime = 0 taken as 1; else a = 1); later blocks D =
      // fma(a, accum, fl(beta·source)), beta = fl(a·out_rescale) (`a * b + c` contracted).
      const T l = state.lanes(i)[0];
      const T inv = b.nb == b.n_blocks - 1 ? T(1) / (l == T(0) ? T(1) : l) : T(1);
      if (b.nb == 0) {
        for (int c = 0; c < dv; ++c) o[c] = inv * ch[c];
      } else {
        const T beta = inv * a;
        for (int c = 0; c < dv; ++c) o[c] = std::fma(inv, ch[c], beta * o[c]);
      }
    } else if (st.fused) {
      // SageAttention2's flush RO = fma(o_scale, RO, buffer) (the rescale fused).
      for (int c = 0; c < dv; ++c) o[c] = std::fma(a, o[c], ch[c]);
    } else {
      for (int c = 0; c < dv; ++c) o[c] = o[c] + ch[c];
    }
  }
}

template <class T>
void flush_ref(const PvStage& st, bool ftz, const BlockView& b, TileState<T>& state,
               const TileBuffers<T>& buf) {
  const int dv = state.dv;
  if (state.acc_o.empty()) {
    state.acc_o.assign(std::size_t(state.rows) * dv, T(0));
    state.acc_scale.assign(std::size_t(state.rows), T(1));
  }
  // The kernel's first block is outside its loop: no rescale, no merge check.
  if (b.step == 0) return;
  auto merge = [&](int i) {
    T* o = state.o_row(i);
    T* a = state.acc_o.data() + std::size_t(i) * dv;
    const T s = state.acc_scale[std::size_t(i)];
    // softmax.h merge_accum_with_scale: accum = scale * accum + acc_o (FFMA under fast math).
    for (int c = 0; c < dv; ++c) {
      a[c] = stage_util::state_fma(s, a[c], o[c], ftz);
      o[c] = T(0);
    }
    state.acc_scale[std::size_t(i)] = T(1);
  };
  for (int i = 0; i < b.rows; ++i) {
    // update_accum_scale: accum_scale *= scores_scale (the block's alpha).
    state.acc_scale[std::size_t(i)] =
        stage_util::state_mul(state.acc_scale[std::size_t(i)], buf.alpha[std::size_t(i)], ftz);
    // The loop's check for this block ((tile_idx + 1) % N, tile_idx = step − 1), and before the
    // last block's P·V the epilogue's own check with tile_idx = steps − 1.
    if (b.step % st.flush == 0) merge(i);
    if (b.step == b.steps - 1 && b.steps % st.flush == 0) merge(i);
  }
}

template <class T>
void flush_final_ref(bool ftz, const BlockView& b, TileState<T>& state) {
  if (state.acc_o.empty()) return;
  const int dv = state.dv;
  // softmax.h final_merge_accum: acc_o = scale * accum + acc_o.
  for (int i = 0; i < b.rows; ++i) {
    T* o = state.o_row(i);
    const T* a = state.acc_o.data() + std::size_t(i) * dv;
    const T s = state.acc_scale[std::size_t(i)];
    for (int c = 0; c < dv; ++c) o[c] = stage_util::state_fma(s, a[c], o[c], ftz);
  }
}

template void flush_ref<float>(const PvStage&, bool, const BlockView&, TileState<float>&,
                               const TileBuffers<float>&);
template void flush_ref<double>(const PvStage&, bool, const BlockView&, TileState<double>&,
                                const TileBuffers<double>&);
template void flush_final_ref<float>(bool, const BlockView&, TileState<float>&);
template void flush_final_ref<double>(bool, const BlockView&, TileState<double>&);

template void rescale_ref<float>(const RescaleStage&, Encoding, const BlockView&,
                                 TileState<float>&, TileBuffers<float>&);
template void rescale_ref<double>(const RescaleStage&, Encoding, const BlockView&,
                                  TileState<double>&, TileBuffers<double>&);
template void add_chunk_ref<float>(const RescaleStage&, ChunkAdd, const BlockView&,
                                   TileState<float>&, TileBuffers<float>&);
template void add_chunk_ref<double>(const RescaleStage&, ChunkAdd, const BlockView&,
                                    TileState<double>&, TileBuffers<double>&);

// The dispatcher (stages.hpp): the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void rescale_stage(const RescaleStage& st, Encoding o_accum, const BlockView& b, TileState<T>& state,
                 TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>)
    if (state.warp_o.empty())  // per-warp O accumulators: the reference only
      if (const auto f = stage_kernels().rescale) return f(st, o_accum, b, state, buf);
  rescale_ref(st, o_accum, b, state, buf);
}
template void rescale_stage<float>(const RescaleStage&, Encoding, const BlockView&, TileState<float>&, TileBuffers<float>&);
template void rescale_stage<double>(const RescaleStage&, Encoding, const BlockView&, TileState<double>&, TileBuffers<double>&);

// The dispatcher (stages.hpp): the AVX-512 or AVX2 kernel for an FP32 state, else the reference.
template <class T>
void add_chunk_stage(const RescaleStage& st, ChunkAdd how, const BlockView& b, TileState<T>& state,
                   TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    if (how != ChunkAdd::kCutlassEpilogue)
      if (const auto f = stage_kernels().add_chunk) return f(st, how, b, state, buf);
  }
  add_chunk_ref(st, how, b, state, buf);
}
template void add_chunk_stage<float>(const RescaleStage&, ChunkAdd, const BlockView&, TileState<float>&, TileBuffers<float>&);
template void add_chunk_stage<double>(const RescaleStage&, ChunkAdd, const BlockView&, TileState<double>&, TileBuffers<double>&);

}  // namespace attnsim
