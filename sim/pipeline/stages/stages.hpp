// The stage functions of the attention pipeline: one plain-loop reference per stage (`*_ref`),
// each over the contiguous buffers of one tile and one KV block and taking only its own stage
// value (plus what an earlier stage computed into the buffers). attend_tile (tile.cpp) is the
// sequence of these calls; every choice is resolved once per call, never per element.
//
// Per KV block, in order:
//   qk_ref          acc = Q Kᵀ (the product model, int32 -> FP32)            QkStage
//   scores_ref      s = dequantized acc (+ ΔS), masked; fold coefficients    SoftmaxStage
//   softmax_step_ref  new max, exp arguments x, alpha's argument, int shift  SoftmaxStage (+ max_round)
//   exp_ref         p = exp(x), alpha = exp(alpha argument)                   ExpStage
//   rescale_ref     O (and a hook's P factor) follow alpha                   RescaleStage
//   cast_p_ref      P as the P·V product sees it (decoded), its scale        PStage
//   row_sum_ref     l += p in the row-sum model's lanes and order            SoftmaxStage
//   pv_ref          O = P V + O (into C) or a chunk from zero                PvStage
//   add_chunk_ref   O = O + chunk (FADD, fused FFMA, or RED.ADD.FTZ)         RescaleStage (+ chunk_add)
//   flush_ref       every N blocks A = fma(s, A, O), O = 0 (pv_flush)       PvStage::flush
// and once per tile, finish_tile's epilogue_ref (NormalizeStage, OutStage).
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/isa.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/pipeline/stages/cuda_core_span.hpp"

namespace attnsim {

// The exponent's constants for an input: the coefficient of a raw score in the exponent (FA2
// scale_softmax_log2 = fl32(double(fl32(sm_scale)) · log2 e), the host's double product stored to
// float; the FP64 state keeps the double scale) and the natural-log coefficient of a raw score
// (FA2's LSE: m · softmax_scale).
template <class T>
struct ExpConstants {
  T c;      // raw score -> exponent units
  T c_nat;  // raw score -> natural-log units (LSE)
  // ScaleLog2::kScoreFirst: the score stage rounds every score as fl(acc · score_scale) (the
  // softmax scale) before c = fl32(log2 e) applies; 0 for the other choices (no such multiply).
  T score_scale = T(0);
};
template <class T>
ExpConstants<T> exp_constants(const Pipeline& p, double sm_scale);

// The exp model of the pipeline (numerics/exp_model.hpp) with scale c.
template <class T>
ExpModel<T> exp_model(const ExpStage& e, ExpKind base, T c);

// One KV block of one tile.
struct BlockView {
  int rows = 0;    // query rows of the tile
  int cols = 0;    // keys of this block (the last block may be partial)
  int bk = 0;      // the block width: the leading dimension of every [rows][bk] buffer
  int j0 = 0;      // the block's first key
  int nb = 0;      // the block's index
  int n_blocks = 0;  // KV blocks the tile visits (kv_blocks_of_tile)
  int step = 0, steps = 0;  // this block's place in the range attend_tile runs, and its length
  int kv_pad = 0;    // bk rounded up to the k of the P·V and row-sum instructions (zero padding)
  // Whether the exponent's FMA contraction (SoftmaxStage::fma) happens in this block
  // (SoftmaxStage::fma_blocks: FlexAttention fuses only in fully visible blocks).
  bool fuse = true;
};

// Where one tile's rows and keys live in the prepared input.
struct TileIndex {
  int sq = 0;   // the query slice (batch·heads_q + head)
  int skv = 0;  // the KV slice it reads
  int q_begin = 0;
  int offset_kv = 0;  // a causal mask hides key j from query i when j > i + offset_kv
};

// The contiguous buffers of one tile and block (T: the state's type).
template <class T>
struct TileBuffers {
  std::vector<T> acc;             // [rows][bk] QKᵀ accumulators as FP32/FP64 values
  std::vector<T> s;               // [rows][bk] scores (dequantized, ΔS, masked)
  std::vector<float> coef;        // [rows][bk] fold: the exponent coefficient of each score
  std::vector<T> x;               // [rows][bk] exp arguments
  std::vector<T> p;               // [rows][bk] p in the state's type (0 past the block's keys)
  std::vector<T> pc;              // [rows][bk] FP64 state: P as cast, in the state's type
  std::vector<float> pf;          // [rows][bk] P as the P·V product sees it (decoded)
  std::vector<T> alpha_arg;       // [rows] the argument of the rescale factor
  std::vector<T> alpha;           // [rows] the rescale factor of this block
  std::vector<std::uint8_t> first;  // [rows] whether the row saw no key before this block
  std::vector<std::int32_t> shift;  // [rows] Rescale::kIntAdd: the power of two N
  std::vector<float> p_mul;       // [rows] Rescale::kHook: P's factor before its cast ...
  bool p_mul_active = false;      // ... when the rescale is a hook
  std::vector<float> p_scale;     // [rows] PScale: P's scale of this block
  std::vector<T> chunk;           // [rows][dv] PvAccumulate::kChunk: this block's product
  std::vector<std::uint32_t> enc_a, enc_b, ones;  // instruction operands (encodings)
  std::vector<std::uint32_t> mma_c, mma_d;        // tile products' C and D bits (qk_mma, pv_mma)
  std::vector<int> mma_k;                         // their key of each instruction position
  // Names this tile's Q rows for the tile products (MmaTile::a_key): fresh for every tile (size),
  // so the QKᵀ of each KV block reuses Q as the first block's product prepared it.
  std::uint64_t q_key = 0;
  // Names this KV block's K and V (fresh for every block of a tile; one value for the tiles of a
  // KV group at the same block, attend_tiles): the CUDA-core kernels keep the block's transposed,
  // widened copies and exponent spans, and the tile products the packed B, for the calls with the
  // same key on this worker.
  std::uint64_t kv_key = 0;
  // Scratch of the AVX-512 kernels (qk_cuda_core, pv_cuda_core, *_avx512), sized on first use:
  // O(tile) per worker.
  // What the CUDA-core kernels derive from a K or V block alone, kept for the calls with the same
  // kv_key (each with the key it was made for; 0: none):
  std::vector<float> kt;          // [head_dim][keys rounded up to 16] the K block transposed
  std::vector<double> kt_wide;    // its FP64 copy (kFp64, kExact)
  std::vector<cuda_core_span::Span> k_spans;  // kExact: the exponent span of each key
  std::vector<double> v_wide;     // [keys][dv] FP64 copy of the V block (kFp64, kExact)
  std::vector<cuda_core_span::Span> v_spans;  // kExact: the exponent span of each V column
  std::uint64_t kt_for = 0, kt_wide_for = 0, k_spans_for = 0, v_wide_for = 0, v_spans_for = 0;
  std::vector<float> tmp_f, tmp_p;     // FP32 results / P of an FP64 state
  std::vector<double> tmp_d, tmp_pd;   // FP64 results / P
  void size(int rows, int bk, int dv);
};

// QK: acc[i][j] for the block's keys (every key, masked or not: the mask is the scores' step).
template <class T>
void qk_ref(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf);

// Scores: s = acc dequantized by the Q and K scales (kScore) or the fold coefficient c·(s_q·s_k)
// (kFold, outside the dequant_tail blocks), ΔS of a smoothed Q added, masked keys set to the
// mask value.
template <class T>
void scores_ref(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const ExpConstants<T>& kc, TileBuffers<T>& buf);

// The online-softmax step of every row: the block max in the max domain, the new running max (in
// `state`), the exponent's reference (snapped by `max_round`), the arguments x of every key and
// the argument of the rescale factor (-inf on a row's first block), the integer shift N of
// Rescale::kIntAdd, and whether the row was empty.
template <class T>
void softmax_step_ref(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                      const ExpConstants<T>& kc, TileState<T>& state, TileBuffers<T>& buf);

// Exp: p = exp(x) for the block's keys (0 past them) and alpha = exp(alpha_arg).
template <class T>
void exp_ref(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf);

// Rescale: O follows alpha (multiply, integer add, divide, an fp16 accumulator's __hmul2, a
// hook's step, or nothing when the multiply is fused into the chunk's add); the hook's P factor.
template <class T>
void rescale_ref(const RescaleStage& st, Encoding o_accum, const BlockView& b, TileState<T>& state,
                 TileBuffers<T>& buf);

// P cast: pf = P as the product sees it (cast, static scale, hook factor; or quantized with a
// per-row / per-tile scale into p_scale); an FP64 state's cast P also into pc.
template <class T>
void cast_p_ref(const PStage& st, const BlockView& b, TileBuffers<T>& buf);

// Row sum: every lane of l takes alpha and the block's p in the model's order (kMma: the cast P on
// the tensor core with a ones operand).
template <class T>
void row_sum_ref(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf);

// P·V: into O as C, or the block's chunk from zero, dequantized by P's scale and V's per-block
// scale (V in its natural [key][channel] layout).
template <class T>
void pv_ref(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf);

// The chunk onto O: an FADD, the rescale's multiply fused into it (FFMA), or the H100's FTZ
// float atomicAdd.
template <class T>
void add_chunk_ref(const RescaleStage& st, ChunkAdd how, const BlockView& b, TileState<T>& state,
                   TileBuffers<T>& buf);

// PvStage::flush (pv_flush=N): after the block's rescale, the deferred scale follows alpha and every
// N blocks the accumulator takes O (flush_ref); after the range's last P·V, O = fma(s, A, O)
// (flush_final_ref).
template <class T>
void flush_ref(const PvStage& st, bool ftz, const BlockView& b, TileState<T>& state,
               const TileBuffers<T>& buf);
template <class T>
void flush_final_ref(bool ftz, const BlockView& b, TileState<T>& state);

// The epilogue of one tile's rows: O / l, the static P scale, an fp16 accumulator's rounding, V's
// epilogue scale and mean, the output cast (values of the output encoding into `o`), and the LSE.
template <class T>
void epilogue_ref(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                  const TileState<T>& state, double* o, double* lse);
// The LSE of row i of the epilogue (every LSE model; +inf for a row that saw no key).
template <class T>
double epilogue_lse(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int i,
                    const TileState<T>& state);

// The instruction-model kernels of qk, pv and row_sum (qk_mma.cpp, pv_mma.cpp): the same bits as
// the references, as tile products (numerics/mma_tile.hpp) vectorised across outputs. The
// dispatchers take them for DotModel::kMma when dot_mma_tile_has_kernel.
template <class T>
void qk_mma(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf);
template <class T>
void pv_mma(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf);
template <class T>
void row_sum_mma(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf);

// Integer operands (s8, s4, s2 values) under an exact product model: qk_int and pv_int compute
// the exact integer sums with the integer tile kernel (kIntegerExactModel: the wrapping s8 IMMA,
// exact where integer_product_is_exact bounds every partial sum), each model's result being that
// integer as it holds it: FP64 exactly, kExact and the FP32 loop rounded to nearest FP32.
inline constexpr DotModel kIntegerExactModel{DotModel::kMma, MmaInstr::kImmaS8, 0};
bool integer_product_is_exact(DotModel::Kind kind, Encoding a, Encoding b, int n);
template <class T>
inline T exact_integer_as(DotModel::Kind kind, std::int32_t s) {
  return kind == DotModel::kFp64 ? T(double(s)) : T(float(s));
}
template <class T>
void qk_int(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf);
template <class T>
void pv_int(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf);

// The AVX-512 kernels of an FP32 state (scores, softmax step, row sum, epilogue) and of the
// CUDA-core products cover the choices they were written and tested for; the dispatchers send
// the others (the .ftz state arithmetic, the SDPA/FA3 row sums, the FMA-chain product) to the
// references.
inline bool fp32_state_kernels(const SoftmaxStage& st) {
  return !st.ftz && st.row_sum != RowSum::kQuadBlock && st.row_sum != RowSum::kCutlassWarps &&
         st.row_sum != RowSum::kWarpSum && st.row_sum != RowSum::kAtomicWarps &&
         st.softcap != SoftcapFn::kExpDiv;
}
// The same for the score, softmax-step and row-sum kernels, which also take .ftz state arithmetic:
// the step kernels have its forms, and the scores and these row sums have no state operation it
// changes (FA3 FP8's descaled coefficient, which does, takes the reference).
inline bool fp32_state_kernels_or_ftz(const SoftmaxStage& st) {
  SoftmaxStage ieee = st;
  ieee.ftz = false;
  return fp32_state_kernels(ieee);
}
inline bool cuda_core_kernel_model(DotModel::Kind k) {
  return k == DotModel::kFp32 || k == DotModel::kFp64 || k == DotModel::kExact;
}

// The dispatchers attend_tile calls: each chooses, once per call (a tile's KV block), a fast
// kernel that gives its reference's bits (numerics/isa.hpp: by the CPU's features, capped by
// ATTNSIM_ISA / --isa) or the reference itself. Same signatures as the references.
template <class T>
void qk_stage(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
            TileBuffers<T>& buf);
template <class T>
void scores_stage(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const ExpConstants<T>& kc, TileBuffers<T>& buf);
template <class T>
void softmax_step_stage(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                      const ExpConstants<T>& kc, TileState<T>& state, TileBuffers<T>& buf);
template <class T>
void exp_stage(const ExpStage& st, ExpKind base, const BlockView& b, TileBuffers<T>& buf);
template <class T>
void rescale_stage(const RescaleStage& st, Encoding o_accum, const BlockView& b, TileState<T>& state,
                 TileBuffers<T>& buf);
template <class T>
void cast_p_stage(const PStage& st, const BlockView& b, TileBuffers<T>& buf);
template <class T>
void row_sum_stage(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                 TileState<T>& state, TileBuffers<T>& buf);
template <class T>
void pv_stage(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
            const BlockView& b, TileState<T>& state, TileBuffers<T>& buf);
template <class T>
void add_chunk_stage(const RescaleStage& st, ChunkAdd how, const BlockView& b, TileState<T>& state,
                   TileBuffers<T>& buf);
template <class T>
void epilogue_stage(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                  const TileState<T>& state, double* o, double* lse);

// The AVX-512 kernels behind the dispatchers (Isa::kAvx512 and above): the same signatures as the
// references and the same bits (NaN payloads aside: see sim/pipeline/README.md, "Fast kernels").
// qk_cuda_core / pv_cuda_core: the CUDA-core product models (dot kFp32, kFp64, kExact; not kMma),
// one definition per architecture: AVX-512 and AVX2 on x86-64 (qk_cuda_core.cpp,
// pv_cuda_core.cpp), NEON on AArch64 (qk_cuda_core_neon.cpp, pv_cuda_core_neon.cpp; kExact takes
// the reference there). Called only where the active set of the dispatch table has them
// (kernels.hpp: StageKernels::cuda_core).
template <class T>
void qk_cuda_core(const QkStage& st, const PreparedInput& in, const TileIndex& ti,
                  const BlockView& b, TileBuffers<T>& buf);
template <class T>
void pv_cuda_core(const PvStage& st, const PStage& pst, const PreparedInput& in,
                  const TileIndex& ti, const BlockView& b, TileState<T>& state,
                  TileBuffers<T>& buf);

// The softmax arithmetic of an FP32 state (scores, online-softmax step, row sum except kMma,
// rescale and chunk add except an fp16 O accumulator, the epilogue's O / l and V's scale and mean;
// each sends the cases it does not vectorize to its reference).
void scores_avx512(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                   const BlockView& b, const ExpConstants<float>& kc, TileBuffers<float>& buf);
void softmax_step_avx512(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                         const ExpConstants<float>& kc, TileState<float>& state,
                         TileBuffers<float>& buf);
void row_sum_avx512(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                    TileState<float>& state, TileBuffers<float>& buf);
void rescale_avx512(const RescaleStage& st, Encoding o_accum, const BlockView& b,
                    TileState<float>& state, TileBuffers<float>& buf);
void add_chunk_avx512(const RescaleStage& st, ChunkAdd how, const BlockView& b,
                      TileState<float>& state, TileBuffers<float>& buf);
void epilogue_avx512(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                     const TileState<float>& state, double* o, double* lse);

// The same kernels on AVX2 + FMA (Isa::kAvx2; the dispatchers take them where the AVX-512 ones
// are not available or capped off, for the same cases): 8 lanes a register, the same chains and
// the same bits (scores_avx2.cpp, ...).
void scores_avx2(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                 const BlockView& b, const ExpConstants<float>& kc, TileBuffers<float>& buf);
void softmax_step_avx2(const SoftmaxStage& st, MaxRound max_round, const BlockView& b,
                       const ExpConstants<float>& kc, TileState<float>& state,
                       TileBuffers<float>& buf);
void row_sum_avx2(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                  TileState<float>& state, TileBuffers<float>& buf);
void rescale_avx2(const RescaleStage& st, Encoding o_accum, const BlockView& b,
                  TileState<float>& state, TileBuffers<float>& buf);
void add_chunk_avx2(const RescaleStage& st, ChunkAdd how, const BlockView& b,
                    TileState<float>& state, TileBuffers<float>& buf);
void epilogue_avx2(const Pipeline& p, const PreparedInput& in, const TileIndex& ti, int rows,
                   const TileState<float>& state, double* o, double* lse);

// The number of row-sum lanes of a model (4 for the quad-lane models, 1 otherwise).
// A chunk's product r dequantized as every P·V model does it: fl(row_scale · s_v(key block,
// channel c)) once, then one multiply (TurboAttention `s_P̃ · s_V · Q(P̃)V`); r unchanged when
// neither P nor V carries a per-block scale.
template <class T>
inline T dequant_chunk(T r, float row_scale, bool p_scaled, bool v_chunk_scale,
                       const PreparedInput& in, const TileIndex& ti, int j0, int c) {
  if (!p_scaled && !v_chunk_scale) return r;
  float f = row_scale;
  if (v_chunk_scale) f = f * in.v.scale(ti.skv, j0, c);
  return r * T(f);
}

int row_sum_lanes(RowSum r);

// SageAttention's in-16 V order (fused.cu TransposePadPermute): key position k of an instruction
// holds token kSagePerm16[k % 16] of its 16-key group (P packed to match).
inline constexpr int kSagePerm16[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
// The key that position k of a P·V instruction's reduction (n positions) reads within its block:
// SageAttention's in-16 order (PvStage::perm16), Triton's kWidth-4 order (PvStage::kwidth4), or k.
inline int pv_key_index(bool perm16, bool kwidth4, int k, int n) {
  if (perm16) return (k & ~15) + kSagePerm16[k & 15];
  return kwidth4 ? kwidth4_index(k, n) : k;
}

}  // namespace attnsim
