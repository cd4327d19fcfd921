// vLLM's Triton unified_attention as a preset of the attention pipeline, its launcher's choices,
// the 2D and 3D schedules and reduce_segments' merge (vllm.hpp; sim/vllm/README.md cites the
// PTX/SASS line behind each choice).
#include "sim/vllm/vllm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "formats/float32.hpp"
#include "numerics/special.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

bool power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

// tl.exp on fp32: mul.f32 by fl32(log2 e) = 0x3FB8AA3B, then ex2.approx.f32 (no .ftz).
float tl_exp(float x) { return f32_from_bits(ex2_approx_bits(f32_bits(x * 0x1.715476p+0f))); }

// compute_tile_loop_bounds (triton_attention_helpers.py) for a causal program: the KV tiles
// [t0, t1) the 2D program of q block `qb` walks (the 3D segments intersect it with their own
// range). Without a window t0 = 0 and t1 is the pipeline's causal block count (attend_tile clamps
// to it); with one, tile_start = max(0, (context + q_lo − W + 1) // TILE) (Triton's divsi
// truncates; max(0, ·) hides it) and tile_end = (context + q_hi) // TILE + 1, q_hi the block's
// last query clamped to the sequence: the same as the causal count.
void tile_range(const AttentionShape& s, int window, int block_q, int tile, int qb, int* t0,
                int* t1) {
  *t0 = 0;
  *t1 = std::numeric_limits<int>::max();
  if (window <= 0) return;
  const int context = s.len_kv - s.len_q;
  const int first = context + qb * block_q - window + 1;
  *t0 = std::max(0, first / tile);
}

}  // namespace

VllmLaunch vllm_launch(const VllmOptions& o, int heads_q, int heads_kv, int head_dim,
                       int max_seqlen_q, int num_seqs, int window) {
  if (heads_kv <= 0 || heads_q % heads_kv != 0)
    fail("vllm_triton: heads_q must be a multiple of heads_kv");
  VllmLaunch l;
  l.qpk = heads_q / heads_kv;
  // BLOCK_M = 16 if num_queries_per_kv <= 16 else next_power_of_2(num_queries_per_kv);
  // BLOCK_Q = BLOCK_M // num_queries_per_kv.
  l.block_m = 16;
  while (l.block_m < l.qpk) l.block_m *= 2;
  l.block_q = l.block_m / l.qpk;
  // The 3D kernel when every query is one token and the batch is small: max_seqlen_q <= 1 and
  // num_seqs <= seq_threshold_3D (128 // num_kv_heads in vLLM's Triton backend).
  const int threshold = o.seq_threshold_3d > 0 ? o.seq_threshold_3d : 128 / heads_kv;
  l.use_3d = max_seqlen_q <= 1 && num_seqs <= threshold && !o.batch_invariant;
  // _get_tile_size: prefill 32; decode 16 for a 2-byte Q, 32 for Gemma 3's signature (sliding
  // window 1024 with head size 128 or 256).
  const bool gemma3 = window == 1024 && (head_dim == 128 || head_dim == 256);
  const int tile_decode = gemma3 ? 32 : 16;
  l.tile = l.use_3d ? tile_decode : 32;
  l.segments = l.use_3d ? o.num_segments : 1;
  return l;
}

VllmLaunch vllm_launch(const VllmOptions& o, const AttentionShape& s, int window,
                       const Launch* launch) {
  if (!launch)
    return vllm_launch(o, s.heads_q, s.heads_kv, s.head_dim, s.len_q, s.batch, window);
  check_launch_target(s, *launch);
  return vllm_launch(o, s.heads_q, s.heads_kv, s.head_dim, launch->max_len_q(),
                     launch->num_seqs(), window);
}

Pipeline vllm_pipeline(const VllmOptions& o, const VllmLaunch& l, const AttentionShape& s) {
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16)
    fail("vllm_triton: dtype must be fp16 or bf16");
  if (s.head_dim_v != s.head_dim)
    fail("vllm_triton: head_dim_v != head_dim (the kernel has one HEAD_SIZE)");
  if (!power_of_two(s.head_dim) || s.head_dim < 16 || s.head_dim > 256)
    fail("vllm_triton: head_dim must be a power of two from 16 to 256 (HEAD_SIZE_PADDED, the "
         "zero padding of other sizes, is not modelled), got " + std::to_string(s.head_dim));
  if (o.num_segments != 16)
    fail("vllm_triton: reduce_segments is modelled for 16 segments (NUM_SEGMENTS_PER_SEQ)");
  if (l.block_m > 16)
    fail("vllm_triton: more than 16 query heads per KV head (BLOCK_M " +
         std::to_string(l.block_m) + ": a different MMA layout) is not modelled");
  if (o.kv_fp8 && (!(o.k_scale > 0) || !(o.v_scale > 0) || std::isinf(o.k_scale) ||
                   std::isinf(o.v_scale)))
    fail("vllm_triton: an e4m3 KV cache needs finite k_scale and v_scale > 0");
  Pipeline p;
  // One program: BLOCK_Q tokens x qpk heads of one KV head; its rows' arithmetic is per row, so
  // a tile of block_q tokens of one head walks the same KV tiles (loop bounds depend on the
  // program's tokens only). TILE keys per step, ascending; bottom-right causal per sequence.
  p.tile.block_q = l.block_q;
  p.tile.block_kv = l.tile;
  p.tile.kv_order = KvOrder::kAscending;
  p.tile.causal = CausalAlign::kBottomRight;
  for (OperandSpec* x : {&p.q, &p.k, &p.v}) {
    x->input = o.dtype;
    x->enc = o.dtype;
    x->cast = kCudaRn;
  }
  // tl.dot at BLOCK_M 16, 4 warps: mma.sync m16n8k16 (HMMA.16816.F32{.BF16}), C chained over
  // head_dim from zero for Q·Kᵀ, P·V into the accumulator. K/V upcast from e4m3 make the dot
  // operands kWidth 4 (BFNU ttgir): the k grouping of both products changes.
  const DotModel dot{DotModel::kMma,
                     o.dtype == Encoding::kBf16 ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32, 0};
  p.qk.dot = p.pv.dot = dot;
  p.qk.kwidth4 = o.kv_fp8;
  p.pv.kwidth4 = o.kv_fp8;
  p.pv.acc = PvAccumulate::kIntoC;
  SoftmaxStage& sm = p.softmax;
  // S = fma.rn(scale, D, 0) = fl(D · scale) (natural units), the softcap on it, the raw max,
  // m = where(m > -inf, m, 0) carried as M, P = tl.exp(fl(S − m)), alpha = tl.exp(fl(M − m)).
  sm.state = StateType::kFp32;
  sm.base = ExpKind::kExp;
  sm.scale_log2 = ScaleLog2::kScoreFirst;
  sm.max_domain = MaxDomain::kRaw;
  sm.fma = false;  // fl(S − m) then tl.exp's multiply: no FMA can fuse (a − b)·c
  sm.empty_max = EmptyMax::kZero;
  sm.softcap = SoftcapFn::kExpDiv;
  // tl.sum over the 4 column warps, L = fma(L, alpha, l).
  sm.row_sum = RowSum::kTritonWarps;
  sm.rowsum_warps = 4;  // warpsPerCTA = [1, 4]
  p.exp.fn = ExpFn::kEx2ApproxLog2e;
  p.rescale.kind = Rescale::kMultiply;  // acc * alpha[:, None] (mul.f32, before the MMA)
  p.p.enc = o.dtype;
  p.p.cast = kCudaRn;
  p.normalize.kind = Normalize::kDivFull;  // acc / L[:, None]: div.full.f32
  p.out.enc = o.dtype;
  p.out.cast = kCudaRn;
  validate(p);
  return canonical(p);
}

std::uint8_t vllm_fp8_quantize(float x, float scale) {
  constexpr Policy kTorchCast{Round::kNearestEven, Overflow::kNaN, NanEncoding::kMlDtypes};
  return std::uint8_t(encode_float_bits(Encoding::kE4m3fn, x / scale, kTorchCast));
}

float vllm_fp8_dequantize(std::uint8_t e4m3, float scale, Encoding dtype) {
  const float f = decode_float_bits(Encoding::kE4m3fn, e4m3);  // cvt.rn.f16x2.e4m3x2, exact
  return round_to(dtype, f * scale, kCudaRn);                 // mul.f32, cvt.rn.bf16x2.f32
}

AttentionInput vllm_fp8_cache(const AttentionInput& in, const VllmOptions& o) {
  AttentionInput r = in;
  auto cache = [&](std::vector<float>& x, float scale) {
    for (float& v : x) {
      // The cache is written from the dtype's values (torch's K/V tensors).
      const float t = round_to(o.dtype, v, kCudaRn);
      v = vllm_fp8_dequantize(vllm_fp8_quantize(t, scale), scale, o.dtype);
    }
  };
  cache(r.k, o.k_scale);
  cache(r.v, o.v_scale);
  return r;
}

void vllm_reduce_segments(const float* acc, const float* m, const float* l, int dv, float* out) {
  constexpr int kSeg = 16;
  float mx = -std::numeric_limits<float>::infinity();
  for (int s = 0; s < kSeg; ++s) mx = m[s] > mx ? m[s] : mx;  // butterfly 8, 4, 2, 1 (exact)
  float e[kSeg], prod[kSeg], u[kSeg];
  for (int s = 0; s < kSeg; ++s) e[s] = tl_exp(m[s] - mx);
  // overall_expsum in the 1D layout (segment l & 15 on lane l): the first butterfly step (xor 8)
  // contracted, u_l = fma(e_l, L_l, fl(e_{l^8}·L_{l^8})), then xor 4, 2, 1 adds; lanes 0-7 and
  // 8-15 end with different sums and each column uses its own lane's.
  for (int s = 0; s < kSeg; ++s) prod[s] = e[s] * l[s];
  for (int s = 0; s < kSeg; ++s) u[s] = std::fma(e[s], l[s], prod[s ^ 8]);
  auto tree = [&](int b) {
    const float v0 = u[b] + u[b + 4], v1 = u[b + 1] + u[b + 5], v2 = u[b + 2] + u[b + 6],
                v3 = u[b + 3] + u[b + 7];
    return (v0 + v2) + (v1 + v3);
  };
  const float es_lo = tree(0), es_hi = tree(8);
  for (int c = 0; c < dv; ++c) {
    // acc_sum: warp w holds segments w, w+4, w+8, w+12 (`segm_output *= e` contracted into the
    // in-thread sum), then the warps (T0 + T2) + (T1 + T3) through shared memory.
    float t[4];
    for (int w = 0; w < 4; ++w) {
      const float* a = acc + c;
      float x = e[w + 4] * a[std::size_t(w + 4) * dv];
      x = std::fma(e[w], a[std::size_t(w) * dv], x);
      x = std::fma(e[w + 8], a[std::size_t(w + 8) * dv], x);
      x = std::fma(e[w + 12], a[std::size_t(w + 12) * dv], x);
      t[w] = x;
    }
    const float sum = (t[0] + t[2]) + (t[1] + t[3]);
    // Column c is divided in lane c // 4 (4 columns a lane): the expsum of its half of 16 lanes.
    const float den = ((c / 4) & 8) == 0 ? es_lo : es_hi;
    out[c] = den == 0.0f ? 0.0f : div_full(sum, den);
  }
}

namespace {

// The 2D or 3D schedule in the pipeline's state type T (FP32: the kernel; FP64: attribution's
// exact state, whose segments reduce_segments then merges in FP32 as the kernel stores them).
template <class T>
void run_schedule(const PreparedInput& pin, const AttentionInput& in, const Pipeline& p,
                  const VllmOptions& o, const VllmLaunch& l, PipelineResult& r) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q, dv = s.head_dim_v;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  // 3D: tiles_per_segment = cdiv(seq_len, NUM_SEGMENTS · TILE); segments at or past the sequence
  // (s · tps · TILE >= seq_len) return at once and reduce_segments reads them as empty.
  const int tile = p.tile.block_kv, nseg = l.use_3d ? l.segments : 1;
  const int tps = (s.len_kv + nseg * tile - 1) / (nseg * tile);
  const int active = l.use_3d ? (s.len_kv + tps * tile - 1) / (tps * tile) : 1;
#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
    std::vector<TileState<T>> st(static_cast<std::size_t>(nseg));
    std::vector<double> lse(static_cast<std::size_t>(bq));
    std::vector<float> acc(static_cast<std::size_t>(16 * dv)), ms(16), ls(16);
    std::vector<float> merged(static_cast<std::size_t>(dv));
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      const Tile t = tile_of_item(s, bq, item);
      const int qb = int(item % q_blocks);
      int t0, t1;
      tile_range(s, in.window, bq, tile, qb, &t0, &t1);
      const std::size_t row0 = (std::size_t(t.batch) * s.heads_q + t.head) * s.len_q + t.q_begin;
      for (int g = 0; g < active; ++g) {
        TileState<T>& x = st[std::size_t(g)];
        x.reset(t.rows, dv);
        // The kernel's state: M = -inf (or the head's sink in the 2D program and in segment 0),
        // L = 1, acc = 0 (triton_attention_helpers.py; with M = -inf the first visible tile's
        // alpha is 0, so L = 1 matters only with a sink).
        for (int i = 0; i < t.rows; ++i) {
          x.lanes(i)[0] = T(1);
          if (g == 0 && !o.sinks.empty()) x.m[std::size_t(i)] = T(o.sinks[std::size_t(t.head)]);
        }
        const int lo = l.use_3d ? std::max(g * tps, t0) : t0;
        const int hi = l.use_3d ? std::min((g + 1) * tps, t1) : t1;
        attend_tile<T>(pin, p, t, lo, hi, x, *ws);
      }
      if (!l.use_3d) {
        finish_tile<T>(pin, p, t, st[0], r.o.data() + row0 * dv, lse.data());
        continue;
      }
      for (int i = 0; i < t.rows; ++i) {
        for (int g = 0; g < 16; ++g) {
          const bool on = g < active;
          const TileState<T>& x = st[std::size_t(std::min(g, active - 1))];
          ms[std::size_t(g)] = on ? float(x.m[std::size_t(i)]) : kNegInf;
          ls[std::size_t(g)] = on ? float(x.lanes(i)[0]) : 0.0f;
          for (int c = 0; c < dv; ++c)
            acc[std::size_t(g) * dv + c] = on ? float(x.o_row(i)[c]) : 0.0f;
        }
        vllm_reduce_segments(acc.data(), ms.data(), ls.data(), dv, merged.data());
        double* out = r.o.data() + (row0 + std::size_t(i)) * dv;
        for (int c = 0; c < dv; ++c)
          out[c] = round_to(p.out.enc, merged[std::size_t(c)], p.out.cast);
      }
    }
  }
}

}  // namespace

PipelineResult vllm_attention(const AttentionInput& in, const Pipeline& p, const VllmOptions& o,
                              const VllmLaunch& l) {
  const AttentionShape& s = in.shape;
  if (!in.causal) fail("vllm_triton: unified_attention is causal only (it asserts `causal`)");
  if (!o.sinks.empty() && int(o.sinks.size()) != s.heads_q)
    fail("vllm_triton: sinks need one value per query head (" + std::to_string(s.heads_q) + ")");
  const PreparedInput pin = prepare(in, p);
  PipelineResult r;
  r.o.assign(s.o_size(), 0.0);
  if (p.softmax.state == StateType::kFp32) {
    run_schedule<float>(pin, in, p, o, l, r);
  } else {
    run_schedule<double>(pin, in, p, o, l, r);
  }
  return r;
}

std::vector<std::string> vllm_unverified(const VllmOptions& o, const VllmLaunch& l,
                                         const AttentionShape& s, int window, double softcap) {
  std::vector<std::string> r;
  if (s.head_dim != 128 && !(s.head_dim == 64 && !l.use_3d && !o.kv_fp8 && window == 0 &&
                             softcap == 0 && o.dtype == Encoding::kFp16))
    r.push_back("vllm_triton: head_dim " + std::to_string(s.head_dim) +
                " with these options (recorded: 128 for every path, 64 for the fp16 2D kernel)");
  if (l.use_3d && l.tile != 16)
    r.push_back("vllm_triton: the 3D kernel with TILE 32 (Gemma 3's window 1024: not recorded)");
  if (o.kv_fp8 && o.dtype == Encoding::kFp16)
    r.push_back("vllm_triton: an e4m3 KV cache with fp16 queries (recorded: bf16)");
  if ((window > 0 || softcap > 0) && o.dtype == Encoding::kFp16)
    r.push_back("vllm_triton: window/softcap with fp16 (recorded: bf16)");
  if (l.qpk != 4 && l.qpk != 1)
    r.push_back("vllm_triton: " + std::to_string(l.qpk) +
                " query heads per KV head (recorded: 1 and 4)");
  if (window > 0)
    r.push_back("vllm_triton: the running max 0 carried by rows whose first KV tiles are all "
                "masked (empty_max=zero, read from the PTX; no recorded row depends on it)");
  return r;
}

KernelSchedule vllm_schedule(const VllmOptions& o, const AttentionShape& s, int window,
                             double softcap, const Launch* launch) {
  const VllmLaunch l = vllm_launch(o, s, window, launch);
  (void)vllm_pipeline(o, l, s);  // throws for what is not modelled
  const int num_seqs = launch ? launch->num_seqs() : s.batch;
  const int max_q = launch ? launch->max_len_q() : s.len_q;
  const int threshold = o.seq_threshold_3d > 0 ? o.seq_threshold_3d : 128 / s.heads_kv;
  KernelSchedule k;
  k.family = "vllm_triton";
  k.kernel = l.use_3d ? "kernel_unified_attention_3d + reduce_segments"
                      : "kernel_unified_attention_2d";
  k.items.push_back({"num_seqs", std::to_string(num_seqs), false, "the launch's sequences"});
  k.items.push_back({"max_seqlen_q", std::to_string(max_q), false, "the longest query"});
  std::string rule = "3D when max_seqlen_q <= 1 and num_seqs <= " + std::to_string(threshold) +
                     " (seq_threshold_3D = 128 // heads_kv)";
  if (o.batch_invariant) rule += "; VLLM_BATCH_INVARIANT=1: always 2D";
  k.items.push_back({"path", l.use_3d ? "3d" : "2d", true, rule});
  k.items.push_back({"block_m", std::to_string(l.block_m) + " (" + std::to_string(l.block_q) +
                                    " tokens x " + std::to_string(l.qpk) + " heads)",
                     false, "BLOCK_M = max(16, next_pow2(heads per KV head)); rows' arithmetic "
                            "does not depend on their program"});
  k.items.push_back({"tile", std::to_string(l.tile), true,
                     l.use_3d ? "TILE_SIZE_DECODE (_get_tile_size)" : "TILE_SIZE_PREFILL (32)"});
  if (l.use_3d) {
    const int tps = (s.len_kv + l.segments * l.tile - 1) / (l.segments * l.tile);
    k.items.push_back({"segments", std::to_string(l.segments) + " of " + std::to_string(tps) +
                                       " tiles",
                       true, "NUM_SEGMENTS_PER_SEQ, cdiv(seq_len, 16 x TILE) tiles each, merged by "
                             "reduce_segments"});
  }
  k.unverified = vllm_unverified(o, l, s, window, softcap);
  return k;
}

}  // namespace attnsim
