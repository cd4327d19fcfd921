// TurboAttention as presets of the attention pipeline: Algorithm 1 (prefill) is a Pipeline whose
// stages are FlashQ's INT8 operands, SAS and the per-tile P̃ quantization; Algorithm 2 (decode)
// is the same Pipeline with one query per tile over operands the compressed cache provides.
// What is TurboAttention's own lives here and in cache.cpp: the cache with its buffer and the
// decode schedule. sim/turbo/README.md gives the paper line behind every choice.
#include "sim/turbo/turbo.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "formats/encoding.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim {

namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

void check(const TurboOptions& o) {
  if (o.br < 1 || o.bc < 1) throw std::invalid_argument("turbo: br and bc must be >= 1");
  if (o.kv_bits != 4 && o.kv_bits != 2 && o.kv_bits != 0)
    throw std::invalid_argument("turbo: kv_bits must be 4, 2 or 0 (mixed)");
  if (o.buffer_clamp < 1 || o.buffer_clamp > 127)
    throw std::invalid_argument("turbo: buffer_clamp must be in 1..127");
  if (o.sas_rule.n_r < 1 || o.sas_rule.n_r > 30)
    throw std::invalid_argument("turbo: n_r must be in -30..-1");
  if (o.out != Encoding::kFp16 && o.out != Encoding::kFp32 && o.out != Encoding::kBf16)
    throw std::invalid_argument("turbo: out must be fp16, bf16 or fp32");
}

// The stage choices both algorithms share.
Pipeline base_pipeline(const TurboOptions& o) {
  check(o);
  Pipeline p;
  p.tile.block_q = o.br;
  p.tile.block_kv = o.bc;
  p.tile.kv_order = KvOrder::kAscending;  // Alg. 1 line 7: "for j = 1 to T_c"
  p.tile.causal = CausalAlign::kBottomRight;
  p.softmax.state = StateType::kFp32;
  p.softmax.base = ExpKind::kExp;  // Eq. 13: e^x, no base-2 rewrite
  p.softmax.max_domain = MaxDomain::kRaw;
  // The softmax scale Algorithm 1 omits (README item e): in the exponent's argument, folded into
  // Q (below), or left out as printed.
  p.softmax.sm_scale = o.softmax_scale == TurboSoftmaxScale::kNone ? SmScale::kOne : SmScale::kInput;
  if (o.sas) {
    p.exp.fn = ExpFn::kHook;
    p.exp.hook = sas_hook(o.sas_rule);
  } else {
    p.exp.fn = ExpFn::kExact;  // SAS off: e^x in FP64 rounded once to FP32
  }
  // Our kernel's row sum (cuda_check/turbo): each quad lane adds the p of its mma fragment columns
  // (8n + 2t, 8n + 2t + 1), lanes combined (l0 + l2) + (l1 + l3) in the epilogue; the paper does
  // not say (Alg. 1 line 9: "rowsum(P̃)").
  p.softmax.row_sum = RowSum::kQuad;
  p.rescale.kind = o.rescale == TurboRescale::kMultiply ? Rescale::kMultiply : Rescale::kDivide;
  p.normalize.kind = Normalize::kRcp;  // Alg. 1 line 16: diag(ℓ)^{-1} O
  p.softmax.lse = LseModel::kNatural;
  p.out.enc = o.out;
  if (o.flashq) {
    // FlashQ stage 1 (Alg. 1 line 8, Eq. 9): INT8 symmetric per block, s = max|X| / 119, the
    // products on the INT8 values with exact INT32 accumulation and S = fl(fl(acc)·fl(s_Q·s_K)).
    // FP64 sums of integer products are exact (|acc| <= 127·127·d < 2^53) and equal the IMMA /
    // wgmma s8 accumulators (numerics/mma.hpp, H100 recordings in data/hw/h100).
    auto spec = [&](int block) {
      OperandSpec s;
      s.input = o.input;
      s.enc = Encoding::kS8;
      s.scale = ScaleMode::kInteger;
      s.quantizer = o.q8;
      s.groups = GroupMap{Granularity::kPerBlock, block};
      s.apply = ScaleAt::kProduct;
      return s;
    };
    p.q = spec(o.br);
    p.k = spec(o.bc);
    p.v = spec(o.bc);
    if (o.softmax_scale == TurboSoftmaxScale::kPrescaleQ) p.q.prescale = Prescale::kSmScale;
    p.qk.dot = DotModel{DotModel::kFp64, MmaInstr::kHmmaF16F32, 0};
    p.pv.dot = DotModel{DotModel::kFp64, MmaInstr::kHmmaF16F32, 0};
    p.softmax.dequant = Dequant::kScore;
    // Alg. 1 line 10: P̃ quantized to INT8 with s_P = max|P̃| / 119 (one scale per tile), the
    // P̃·V chunk in exact INT32 and O += s_P·s_V·chunk after the rescale (line 12).
    p.p.enc = Encoding::kS8;
    p.p.scale = o.p_scale;
    p.p.quantizer = o.p8;
    p.pv.acc = PvAccumulate::kChunk;
  } else {
    // FlashQ off: FlashAttention in FP16 (HMMA with FP32 accumulation, P in FP16), so SAS alone
    // can be attributed.
    OperandSpec s;
    s.input = o.input;
    s.enc = o.input;
    if (o.softmax_scale == TurboSoftmaxScale::kPrescaleQ) {
      p.q = s;
      p.q.prescale = Prescale::kSmScale;
    } else {
      p.q = s;
    }
    p.k = s;
    p.v = s;
    const MmaInstr mi = o.input == Encoding::kBf16 ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32;
    p.qk.dot = DotModel{DotModel::kMma, mi, 0};
    p.pv.dot = DotModel{DotModel::kMma, mi, 0};
    p.p.enc = o.input;
    p.pv.acc = PvAccumulate::kIntoC;
  }
  return p;
}


// Stage 1 of one block of rows (FlashQ, Eq. 9): the INT8 values and the block's scale, exactly as
// the pipeline's preparation computes them (numerics/quantize.hpp quantize_symmetric).
struct Block8 {
  std::vector<std::int8_t> q;
  float scale = 0;
};
Block8 stage1(const float* x, int len, int d, const SymmetricQuantizer& qz) {
  const QuantizedTensor t = quantize_symmetric(x, len, d, GroupMap{Granularity::kPerTensor, 1}, qz);
  Block8 b;
  b.q.assign(t.q.begin(), t.q.end());
  b.scale = t.scale[0];
  return b;
}

}  // namespace

Pipeline turbo_pipeline(const TurboOptions& o) {
  Pipeline p = base_pipeline(o);
  validate(p);
  return canonical(p);
}

Pipeline turbo_decode_pipeline(const Pipeline& prefill) {
  Pipeline p = prefill;
  // Alg. 2: one query row q_t; a per-block Q scale becomes its own (line 3: s_Q = max|q_t| / 119).
  p.tile.block_q = 1;
  if (p.q.scale != ScaleMode::kNone && p.q.groups.kind == Granularity::kPerBlock)
    p.q.groups = GroupMap{Granularity::kPerToken, 1};
  validate(p);
  return canonical(p);
}

AttentionInput prefix_input(const AttentionInput& in, int len_kv) {
  const AttentionShape& s = in.shape;
  const int off = s.len_kv - s.len_q;  // position of query row 0
  AttentionInput r;
  r.shape = s;
  r.shape.len_kv = len_kv;
  r.shape.len_q = std::max(0, std::min(s.len_q, len_kv - off));
  r.causal = in.causal;
  r.sm_scale = in.sm_scale;
  r.dtype = in.dtype;
  const int nq = r.shape.len_q;
  r.q.resize(std::size_t(s.batch) * s.heads_q * nq * s.head_dim);
  for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
    std::copy_n(in.q.begin() + std::ptrdiff_t(bh) * s.len_q * s.head_dim,
                std::size_t(nq) * s.head_dim,
                r.q.begin() + std::ptrdiff_t(bh) * nq * s.head_dim);
  auto kv = [&](const std::vector<float>& x, int d, std::vector<float>& out) {
    out.resize(std::size_t(s.batch) * s.heads_kv * len_kv * d);
    for (int bh = 0; bh < s.batch * s.heads_kv; ++bh)
      std::copy_n(x.begin() + std::ptrdiff_t(bh) * s.len_kv * d, std::size_t(len_kv) * d,
                  out.begin() + std::ptrdiff_t(bh) * len_kv * d);
  };
  kv(in.k, s.head_dim, r.k);
  kv(in.v, s.head_dim_v, r.v);
  return r;
}

int turbo_prefill_tokens(const AttentionInput& in, int requested, int n_b) {
  const AttentionShape& s = in.shape;
  if (s.len_q > s.len_kv)
    throw std::invalid_argument("turbo decode: more queries than keys (len_q > len_kv)");
  if (!in.causal && s.len_q != 1)
    throw std::invalid_argument(
        "turbo decode needs a causal input (teacher-forced steps) or a single query");
  const int first = s.len_kv - s.len_q;  // position of the first query row
  if (requested >= 0) {
    if (requested < 1 || requested >= s.len_kv)
      throw std::invalid_argument("turbo decode: prefill must be in 1.." +
                                  std::to_string(s.len_kv - 1) + " (got " +
                                  std::to_string(requested) + ")");
    return requested;
  }
  if (first > 0) return first;
  if (s.len_kv < 2) throw std::invalid_argument("turbo decode: needs at least 2 tokens");
  const int half = s.len_kv / 2 / n_b * n_b;
  return std::max(std::min(half, s.len_kv - 1), std::min(n_b, s.len_kv - 1));
}

TurboResult turbo_attention(const AttentionInput& in, const TurboOptions& o) {
  return turbo_attention(in, o, turbo_pipeline(o));
}

namespace {

// The rows [first_row, first_row + nq) of every (batch, head) from a run over nq query rows.
void place_rows(const AttentionShape& s, const PipelineResult& r, int nq, int first_row,
                PipelineResult& out) {
  const int dv = s.head_dim_v;
  for (int bh = 0; bh < s.batch * s.heads_q; ++bh) {
    std::copy_n(r.o.begin() + std::ptrdiff_t(bh) * nq * dv, std::size_t(nq) * dv,
                out.o.begin() + (std::ptrdiff_t(bh) * s.len_q + first_row) * dv);
    std::copy_n(r.lse.begin() + std::ptrdiff_t(bh) * nq, std::size_t(nq),
                out.lse.begin() + std::ptrdiff_t(bh) * s.len_q + first_row);
  }
}

// The bits of every KV head: the options' explicit lists, else the head-priority rule (§3.4).
HeadBits resolve_head_bits(const AttentionInput& in, const TurboOptions& o, int prefill) {
  if (o.head_bits_k.empty() && o.head_bits_v.empty()) return turbo_head_bits(in, o, prefill);
  const int heads_kv = in.shape.heads_kv;
  if (int(o.head_bits_k.size()) != heads_kv || int(o.head_bits_v.size()) != heads_kv)
    throw std::invalid_argument("turbo: head_bits needs one value per KV head for K and V (given " +
                                std::to_string(o.head_bits_k.size()) + " and " +
                                std::to_string(o.head_bits_v.size()) + "; the input has " +
                                std::to_string(heads_kv) + " KV heads)");
  for (const std::vector<int>* bits : {&o.head_bits_k, &o.head_bits_v})
    for (int b : *bits)
      if (b != 4 && b != 2) throw std::invalid_argument("turbo: head bits must be 4 or 2");
  return HeadBits{o.head_bits_k, o.head_bits_v};
}

// The INT8 keys and values the decode groups of one (batch, KV head) slice read: blocks [0, k)
// reconstructed from the cache, block k from the buffer; and the buffer's scale of every block.
struct SliceState {
  std::vector<float> k8, v8;    // [len_kv][d] the buffer's INT8 values as the products see them
  std::vector<float> ks, vs;    // [blocks] the buffer's scale of each decode block
  std::vector<float> kc8, vc8;  // [compressed tokens][d] the cache's INT8 reconstruction
};

// One slice's cache after the whole schedule: the prompt's complete blocks compressed with the
// scales Algorithm 1 used (lines 13-14), every later token through the buffer with the universal
// scale, a full buffer compressed after the step that reads it; `st` what each decode group reads.
// K and V hold the slice's tokens in the input format.
void build_slice_cache(const float* K, const float* V, int len_kv, int prefill, int bits_k,
                       int bits_v, const TurboOptions& o, int dk, int dv, TurboKvCache& c,
                       SliceState& st) {
  const int bc = o.bc, nblocks = cdiv(len_kv, bc);
  c.dim_k = dk;
  c.dim_v = dv;
  c.n_b = bc;
  c.bpq = o.compress ? o.bpq : kBpqOffset;
  c.bits_k = o.compress ? bits_k : 8;
  c.bits_v = o.compress ? bits_v : 8;
  c.block_begin.push_back(0);
  st.k8.assign(std::size_t(len_kv) * dk, 0.0f);
  st.v8.assign(std::size_t(len_kv) * dv, 0.0f);
  st.ks.assign(std::size_t(nblocks), 0.0f);
  st.vs.assign(std::size_t(nblocks), 0.0f);
  // Prompt blocks: stage 1 (the scales Alg. 1 used), complete ones compressed (lines 13-14).
  float su_k = 0, su_v = 0, last_k = 0, last_v = 0;
  for (int b = 0; b < cdiv(prefill, bc); ++b) {
    const int t0 = b * bc, len = std::min(bc, prefill - t0);
    const Block8 kb = stage1(K + std::size_t(t0) * dk, len, dk, o.q8);
    const Block8 vb = stage1(V + std::size_t(t0) * dv, len, dv, o.q8);
    su_k = std::max(su_k, kb.scale);
    su_v = std::max(su_v, vb.scale);
    if (len == bc || b == 0) {
      last_k = kb.scale;
      last_v = vb.scale;
    }
    if (len == bc) {
      c.append_block(false, kb.q.data(), len, kb.scale);
      c.append_block(true, vb.q.data(), len, vb.scale);
      c.block_begin.push_back(t0 + len);
    }
  }
  // The universal scale (§3.3, README §buffer).
  c.su_k = o.buffer_scale == BufferScale::kLast ? last_k : su_k;
  c.su_v = o.buffer_scale == BufferScale::kLast ? last_v : su_v;
  // Decode steps: every token from the prompt's partial block on goes through the buffer; a full
  // buffer is compressed (after the step's attention, which reads the block as INT8).
  for (int b = prefill / bc; b < nblocks; ++b) {
    const int t0 = b * bc, len = std::min(bc, len_kv - t0);
    if (o.buffer_scale == BufferScale::kOracle) {
      // The counterfactual: the block's own scale, known in advance (no clamping).
      c.su_k = stage1(K + std::size_t(t0) * dk, len, dk, o.q8).scale;
      c.su_v = stage1(V + std::size_t(t0) * dv, len, dv, o.q8).scale;
    }
    for (int t = t0; t < t0 + len; ++t)
      c.buffer_push(K + std::size_t(t) * dk, V + std::size_t(t) * dv, o.buffer_clamp);
    // What the block's queries read: the buffer's INT8 values with the universal scale.
    std::copy(c.buf_k.begin(), c.buf_k.end(), st.k8.begin() + std::ptrdiff_t(t0) * dk);
    std::copy(c.buf_v.begin(), c.buf_v.end(), st.v8.begin() + std::ptrdiff_t(t0) * dv);
    st.ks[std::size_t(b)] = c.su_k;
    st.vs[std::size_t(b)] = c.su_v;
    if (len == bc) c.flush(c.su_k, c.su_v);
  }
  // Compressed blocks as later queries read them: the integer dequantization of the cache.
  st.kc8.resize(std::size_t(c.compressed_tokens()) * dk);
  st.vc8.resize(std::size_t(c.compressed_tokens()) * dv);
  for (int b = 0; b < c.blocks(); ++b) {
    const int t0 = c.block_begin[std::size_t(b)];
    const std::vector<std::int32_t> kr = c.block_int8(false, b), vr = c.block_int8(true, b);
    std::copy(kr.begin(), kr.end(), st.kc8.begin() + std::ptrdiff_t(t0) * dk);
    std::copy(vr.begin(), vr.end(), st.vc8.begin() + std::ptrdiff_t(t0) * dv);
  }
}

// The input of one decode group: queries at positions [first_pos, e) over keys [0, e), causal;
// K and V copied from the input only when `with_kv` (an operand the cache does not feed).
AttentionInput decode_group_input(const AttentionInput& in, int first_pos, int e, bool with_kv) {
  const AttentionShape& s = in.shape;
  const int off = s.len_kv - s.len_q, nq = e - first_pos, dk = s.head_dim, dv = s.head_dim_v;
  AttentionInput g;
  g.shape = s;
  g.shape.len_q = nq;
  g.shape.len_kv = e;
  g.causal = true;
  g.sm_scale = in.sm_scale;
  g.dtype = in.dtype;
  g.q.resize(g.shape.q_size());
  for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
    std::copy_n(in.q.begin() + (std::ptrdiff_t(bh) * s.len_q + (first_pos - off)) * dk,
                std::size_t(nq) * dk, g.q.begin() + std::ptrdiff_t(bh) * nq * dk);
  if (!with_kv) return g;
  g.k.resize(g.shape.k_size());
  g.v.resize(g.shape.v_size());
  for (int bh = 0; bh < s.batch * s.heads_kv; ++bh) {
    std::copy_n(in.k.begin() + std::ptrdiff_t(bh) * s.len_kv * dk, std::size_t(e) * dk,
                g.k.begin() + std::ptrdiff_t(bh) * e * dk);
    std::copy_n(in.v.begin() + std::ptrdiff_t(bh) * s.len_kv * dv, std::size_t(e) * dv,
                g.v.begin() + std::ptrdiff_t(bh) * e * dv);
  }
  return g;
}

// The cache's K (value = false) or V operand of decode group k (keys [0, e), block k starting at
// t0) for every slice: blocks [0, k) reconstructed with their compressed scales, block k the
// buffer with its scale; prepared as the decode pipeline's operand with one scale per block.
PreparedOperand cached_operand(const Pipeline& dec, bool value, int k, int t0, int e, int d,
                               const std::vector<TurboKvCache>& caches,
                               const std::vector<SliceState>& slices) {
  const int n = int(caches.size());
  std::vector<float> vals(std::size_t(n) * e * d), scales(std::size_t(n) * (k + 1));
  for (int sl = 0; sl < n; ++sl) {
    const TurboKvCache& c = caches[std::size_t(sl)];
    const SliceState& st = slices[std::size_t(sl)];
    const std::vector<float>& compressed = value ? st.vc8 : st.kc8;
    const std::vector<float>& buffered = value ? st.v8 : st.k8;
    float* out = vals.data() + std::size_t(sl) * e * d;
    std::copy_n(compressed.begin(), std::size_t(t0) * d, out);
    std::copy_n(buffered.begin() + std::ptrdiff_t(t0) * d, std::size_t(e - t0) * d,
                out + std::size_t(t0) * d);
    float* sc = scales.data() + std::size_t(sl) * (k + 1);
    for (int b = 0; b < k; ++b) sc[b] = (value ? c.v_scale : c.k_scale)[std::size_t(b)];
    sc[k] = (value ? st.vs : st.ks)[std::size_t(k)];
  }
  const OperandSpec& spec = value ? dec.v : dec.k;
  return prepared_operand(dec, value ? Operand::kV : Operand::kK, n, e, d, std::move(vals),
                          std::move(scales), spec.groups, k + 1);
}

}  // namespace

TurboResult turbo_attention(const AttentionInput& in, const TurboOptions& o, const Pipeline& pre) {
  check(o);
  validate(pre);
  const AttentionShape& s = in.shape;
  if (!s.valid()) throw std::invalid_argument("turbo: invalid shape");
  const bool decode =
      o.mode == TurboMode::kDecode ||
      (o.mode == TurboMode::kAuto && ((in.causal && s.len_q <= s.len_kv) || s.len_q == 1));
  TurboResult res;
  res.decode = decode;
  const int bc = o.bc;
  const int P = decode ? turbo_prefill_tokens(in, o.prefill, bc) : s.len_kv;
  res.prefill = P;
  const int off = s.len_kv - s.len_q;
  res.out.o.assign(s.o_size(), 0.0);
  res.out.lse.assign(std::size_t(s.batch) * s.heads_q * s.len_q,
                     std::numeric_limits<double>::infinity());
  const int dk = s.head_dim, dv = s.head_dim_v;

  // 1. Algorithm 1 on the prompt (every row in prefill mode).
  if (P > off && (!decode || o.decode_prefill_rows)) {
    const AttentionInput pin = decode ? prefix_input(in, P) : in;
    place_rows(s, run_pipeline(pin, pre), pin.shape.len_q, 0, res.out);
  }

  // 2. The cache: per (batch, KV head), the prompt's complete blocks compressed, its partial last
  //    block in the buffer with the universal scale; from the FP16 (input-format) K and V.
  res.bits = resolve_head_bits(in, o, P);
  res.caches.resize(std::size_t(s.batch) * s.heads_kv);
  std::vector<float> kin(in.k.size()), vin(in.v.size());
  for (std::size_t i = 0; i < kin.size(); ++i) kin[i] = round_to(o.input, in.k[i], kCudaRn);
  for (std::size_t i = 0; i < vin.size(); ++i) vin[i] = round_to(o.input, in.v[i], kCudaRn);
  std::vector<SliceState> slices(res.caches.size());
#pragma omp parallel for schedule(dynamic)
  for (int sl = 0; sl < s.batch * s.heads_kv; ++sl) {
    const std::size_t h = std::size_t(sl % s.heads_kv);
    build_slice_cache(kin.data() + std::size_t(sl) * s.len_kv * dk,
                      vin.data() + std::size_t(sl) * s.len_kv * dv, s.len_kv, P, res.bits.k[h],
                      res.bits.v[h], o, dk, dv, res.caches[std::size_t(sl)],
                      slices[std::size_t(sl)]);
  }
  // Silent-failure counters (sim/pipeline/counters.hpp), stage `prepare`: the buffer's clamps and
  // BPQ's zero-range groups of every slice's cache, at the slice's first query head; counted
  // here, on the calling thread, after the loop (independent of the thread count).
  if (StageCounters* sink = counter_sink()) {
    StageCounters c;
    for (int sl = 0; sl < s.batch * s.heads_kv; ++sl) {
      const TurboKvCache& kc = res.caches[std::size_t(sl)];
      const std::int64_t qslice =
          std::int64_t(sl / s.heads_kv) * s.heads_q + std::int64_t(sl % s.heads_kv) * s.group();
      if (kc.clamped_k + kc.clamped_v > 0)
        c.add(CounterStage::kPrepare, CounterEvent::kTurboClamp, qslice, kc.first_clamp_token,
              kc.first_clamp_col, kc.clamped_k + kc.clamped_v);
      if (kc.zero_range_k + kc.zero_range_v > 0)
        c.add(CounterStage::kPrepare, CounterEvent::kBpqZeroRange, qslice,
              kc.first_zero_range_token, kc.first_zero_range_col,
              kc.zero_range_k + kc.zero_range_v);
    }
    counter_sink_merge(sink, c);
  }
  if (!decode) return res;
  if (!o.flashq) {
    // Without FlashQ the cache is the FP16 K/V itself and a decode step computes the same row as
    // Algorithm 1 (every stage is per row): the prefill run covers every row past the prompt.
    const PipelineResult r = run_pipeline(in, pre);
    const int first = std::max(0, P - off);
    for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
      for (int i = first; i < s.len_q; ++i) {
        std::copy_n(r.o.begin() + (std::ptrdiff_t(bh) * s.len_q + i) * dv, std::size_t(dv),
                    res.out.o.begin() + (std::ptrdiff_t(bh) * s.len_q + i) * dv);
        res.out.lse[std::size_t(bh) * s.len_q + i] = r.lse[std::size_t(bh) * s.len_q + i];
      }
    return res;
  }

  // 3. Algorithm 2 for every query past the prompt, grouped by the block it falls in: queries of
  //    block k read blocks [0, k) from the compressed cache and block k from the buffer. The cache
  //    feeds FlashQ's INT8 blocks, as the preset prepares K and V; a pipeline whose K or V
  //    preparation is another (attribution's counterfactuals, a stage override) reads that operand
  //    from the input through its own preparation instead.
  const Pipeline preset = turbo_pipeline(o);
  const bool cache_k = pre.k == preset.k, cache_v = pre.v == preset.v;
  const Pipeline dec = turbo_decode_pipeline(pre);
  for (int k = P / bc; k < cdiv(s.len_kv, bc); ++k) {
    const int t0 = k * bc, e = std::min(s.len_kv, t0 + bc);
    const int first_pos = std::max({P, t0, off});
    if (first_pos >= e) continue;
    const AttentionInput gin = decode_group_input(in, first_pos, e, !cache_k || !cache_v);
    PreparedInput prep = cache_k && cache_v ? prepare_queries(gin, dec) : prepare(gin, dec);
    if (cache_k) prep.k = cached_operand(dec, false, k, t0, e, dk, res.caches, slices);
    if (cache_v) prep.v = cached_operand(dec, true, k, t0, e, dv, res.caches, slices);
    place_rows(s, run_pipeline(prep, dec), e - first_pos, first_pos - off, res.out);
  }
  return res;
}

std::string describe(const TurboOptions& o) {
  std::ostringstream r;
  r << "turbo br=" << o.br << " bc=" << o.bc << " flashq=" << (o.flashq ? "on" : "off")
    << " kv_bits=" << (o.kv_bits == 0 ? "mixed" : std::to_string(o.kv_bits)) << " n_h=" << o.n_h
    << " bpq=" << o.bpq.name << " q8=" << o.q8.name << " p8=" << o.p8.name
    << " p_scale=" << (o.p_scale == PScale::kRow ? "row" : "tile")
    << " sas=" << (o.sas ? describe(o.sas_rule) : std::string("off"))
    << " rescale=" << (o.rescale == TurboRescale::kMultiply ? "multiply" : "literal_inverse");
  return r.str();
}

}  // namespace attnsim
