// The tiled attention skeleton (see pipeline.hpp and sim/pipeline/README.md): one query tile over
// a range of KV blocks as a sequence of stage calls (sim/pipeline/stages/), the epilogue, and the
// whole attention over every tile.
#include <algorithm>
#include <limits>
#include <memory>

#include "sim/pipeline/pipeline.hpp"
#include "sim/pipeline/counters.hpp"
#include "sim/pipeline/stages/observe.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

struct TileWorkspace {
  TileBuffers<float> f;
  TileBuffers<double> d;
  // The silent-failure counters (counters.hpp): this worker's counts while a CounterScope lives
  // (null otherwise), merged into the scope's sink when the workspace goes; the state before the
  // stages that update it in place.
  std::unique_ptr<StageCounters> counters;
  StageCounters* sink = nullptr;  // where `counters` go when the workspace is destroyed
  StateSnapshot<float> snap_f;
  StateSnapshot<double> snap_d;
  template <class T>
  TileBuffers<T>& buffers() {
    if constexpr (std::is_same_v<T, float>) {
      return f;
    } else {
      return d;
    }
  }
  template <class T>
  StateSnapshot<T>& snapshot() {
    if constexpr (std::is_same_v<T, float>) {
      return snap_f;
    } else {
      return snap_d;
    }
  }
};

void TileWorkspaceDeleter::operator()(TileWorkspace* w) const {
  if (w->counters) counter_sink_merge(w->sink, *w->counters);
  delete w;
}
TileWorkspacePtr make_workspace() {
  TileWorkspacePtr w(new TileWorkspace);
  w->sink = counter_sink();
  if (w->sink) w->counters = std::make_unique<StageCounters>();
  return w;
}

namespace {

TileIndex tile_index(const PreparedInput& in, const Pipeline& p, const Tile& t) {
  const AttentionShape& s = in.shape;
  TileIndex ti;
  ti.sq = t.batch * s.heads_q + t.head;
  ti.skv = t.batch * s.heads_kv + t.head / s.group();
  ti.q_begin = t.q_begin;
  ti.offset_kv = p.tile.causal == CausalAlign::kTopLeft ? 0 : s.len_kv - s.len_q;
  return ti;
}

// The block width rounded up to the k of the instruction models that take P (zero padding).
int kv_pad_of(const Pipeline& p) {
  int k = 1;
  if (p.pv.dot.kind == DotModel::kMma) k = std::max(k, dot_requirements(p.pv.dot).k_step);
  if (p.softmax.row_sum == RowSum::kMma) k = std::max(k, dot_requirements(p.softmax.row_sum_dot).k_step);
  return stage_util::round_up(p.tile.block_kv, k);
}

// One KV block with the counters on: the reference of every stage (bit-identical to the
// dispatchers by construction: each fast kernel is tested against its reference), each followed
// by its observer. Counting therefore runs at the references' speed.
template <class T>
void attend_block_counted(const PreparedInput& in, const Pipeline& p, const TileIndex& ti,
                          const BlockView& b, const ExpConstants<T>& kc, TileState<T>& state,
                          TileBuffers<T>& buf, StateSnapshot<T>& snap, StageCounters& c) {
  qk_ref(p.qk, in, ti, b, buf);
  observe_qk(p.qk, in, ti, b, buf, c);
  scores_ref(p.softmax, in, ti, b, kc, buf);
  observe_scores(in, ti, b, buf, c);
  softmax_step_ref(p.softmax, p.rescale.max_round, b, kc, state, buf);
  observe_softmax(in, ti, b, buf, c);
  exp_ref(p.exp, p.softmax.base, b, buf);
  observe_exp(p.softmax.base, in, ti, b, buf, c);
  snap.take(state);
  rescale_ref(p.rescale, p.pv.o_accum, b, state, buf);
  observe_rescale(p.rescale, ti, b, snap, state, buf, c);
  cast_p_ref(p.p, b, buf);
  observe_p_cast(p.p, in, ti, b, buf, c);
  snap.take(state);
  row_sum_ref(p.softmax, p.p.enc, p.pv.perm16, b, state, buf);
  observe_row_sum(ti, b, snap, state, c);
  snap.take(state);
  pv_ref(p.pv, p.p, in, ti, b, state, buf);
  observe_pv(p.pv, p.p, in, ti, b, snap, state, buf, c);
  if (p.pv.acc == PvAccumulate::kChunk) {
    snap.take(state);
    add_chunk_ref(p.rescale, p.pv.chunk_add, b, state, buf);
    observe_chunk_add(p.pv.chunk_add, ti, b, snap, state, buf, c);
  }
}

}  // namespace

int kv_blocks_of_tile(const PreparedInput& in, const Pipeline& p, const Tile& t) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q, bk = p.tile.block_kv;
  int n = (s.len_kv + bk - 1) / bk;
  if (in.causal && p.tile.causal == CausalAlign::kTopLeft) {
    // SageAttention (qk_int_sv_f16_cuda_sm80.cu, ..._sm90.cu): num_iterations =
    // div_ceil(min(kv_len, (bx + 1) · CTA_Q), CTA_K).
    const int limit = std::min(s.len_kv, t.q_begin + bq);
    n = std::min(n, (limit + bk - 1) / bk);
  } else if (in.causal) {
    // FA2 n_block_max with the causal mask: cdiv((m_block + 1)·kBlockM + seqlen_k − seqlen_q,
    // kBlockN), bottom-right aligned.
    const int limit = t.q_begin + bq + s.len_kv - s.len_q;
    n = std::min(n, limit <= 0 ? 0 : (limit + bk - 1) / bk);
  }
  return n;
}

template <class T>
void attend_tile(const PreparedInput& in, const Pipeline& p, const Tile& t, int kv_block_begin,
                 int kv_block_end, TileState<T>& state, TileWorkspace& ws) {
  TileBuffers<T>& buf = ws.buffers<T>();
  const TileIndex ti = tile_index(in, p, t);
  const ExpConstants<T> kc = exp_constants<T>(p, in.sm_scale);
  BlockView b;
  b.rows = t.rows;
  b.bk = p.tile.block_kv;
  b.kv_pad = kv_pad_of(p);
  b.n_blocks = kv_blocks_of_tile(in, p, t);
  buf.size(std::max(t.rows, 1), b.bk, in.shape.head_dim_v);
  const int lo = std::max(kv_block_begin, 0), hi = std::min(kv_block_end, b.n_blocks);
  for (int step = 0; step < hi - lo; ++step) {
    b.nb = p.tile.kv_order == KvOrder::kDescending ? hi - 1 - step : lo + step;
    b.j0 = b.nb * b.bk;
    b.cols = std::min(b.bk, in.shape.len_kv - b.j0);
    if (StageCounters* cnt = ws.counters.get()) {
      attend_block_counted(in, p, ti, b, kc, state, buf, ws.snapshot<T>(), *cnt);
      continue;
    }
    qk_stage(p.qk, in, ti, b, buf);
    scores_stage(p.softmax, in, ti, b, kc, buf);
    softmax_step_stage(p.softmax, p.rescale.max_round, b, kc, state, buf);
    exp_stage(p.exp, p.softmax.base, b, buf);
    rescale_stage(p.rescale, p.pv.o_accum, b, state, buf);
    cast_p_stage(p.p, b, buf);
    row_sum_stage(p.softmax, p.p.enc, p.pv.perm16, b, state, buf);
    pv_stage(p.pv, p.p, in, ti, b, state, buf);
    if (p.pv.acc == PvAccumulate::kChunk) add_chunk_stage(p.rescale, p.pv.chunk_add, b, state, buf);
  }
}

template <class T>
void finish_tile(const PreparedInput& in, const Pipeline& p, const Tile& t,
                 const TileState<T>& state, double* o, double* lse) {
  const TileIndex ti = tile_index(in, p, t);
  if (counter_sink()) {
    epilogue_ref(p, in, ti, t.rows, state, o, lse);
    StageCounters c;
    observe_epilogue(p, ti, t.rows, state, o, c);
    if (c.total() > 0) counter_sink_merge(c);
    return;
  }
  epilogue_stage(p, in, ti, t.rows, state, o, lse);
}

template void attend_tile<float>(const PreparedInput&, const Pipeline&, const Tile&, int, int,
                                 TileState<float>&, TileWorkspace&);
template void attend_tile<double>(const PreparedInput&, const Pipeline&, const Tile&, int, int,
                                  TileState<double>&, TileWorkspace&);
template void finish_tile<float>(const PreparedInput&, const Pipeline&, const Tile&,
                                 const TileState<float>&, double*, double*);
template void finish_tile<double>(const PreparedInput&, const Pipeline&, const Tile&,
                                  const TileState<double>&, double*, double*);

namespace {

template <class T>
void run_all(const PreparedInput& in, const Pipeline& p, PipelineResult& res) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * q_blocks;
  // Work items are whole (batch, head, Q block) tiles, as CUDA thread blocks are: every output
  // element is computed by one item in a fixed order, so the thread count changes nothing.
#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
    TileState<T> st;
    std::vector<double> lse(static_cast<std::size_t>(bq));
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      Tile t;
      const int qb = int(item % q_blocks);
      t.head = int((item / q_blocks) % s.heads_q);
      t.batch = int(item / q_blocks / s.heads_q);
      t.q_begin = qb * bq;
      t.rows = std::min(bq, s.len_q - t.q_begin);
      st.reset(t.rows, s.head_dim_v);
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
  if (p.softmax.state == StateType::kFp32) {
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
