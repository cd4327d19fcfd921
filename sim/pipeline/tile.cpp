// The tiled attention skeleton (see pipeline.hpp and sim/pipeline/README.md): one query tile over
// a range of KV blocks as a sequence of stage calls (sim/pipeline/stages/), the epilogue, and the
// whole attention over every tile.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "numerics/mma_tile.hpp"
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
  if (p.pv.flush) flush_ref(p.pv, p.softmax.ftz, b, state, buf);
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
  if (p.pv.flush && b.step == b.steps - 1) flush_final_ref(p.softmax.ftz, b, state);
}

// One KV block of one tile: every stage through its dispatcher (or the counted references).
template <class T>
void attend_block(const PreparedInput& in, const Pipeline& p, const TileIndex& ti,
                  const BlockView& b, const ExpConstants<T>& kc, TileState<T>& state,
                  TileWorkspace& ws) {
  TileBuffers<T>& buf = ws.buffers<T>();
  if (StageCounters* cnt = ws.counters.get()) {
    attend_block_counted(in, p, ti, b, kc, state, buf, ws.snapshot<T>(), *cnt);
    return;
  }
  qk_stage(p.qk, in, ti, b, buf);
  scores_stage(p.softmax, in, ti, b, kc, buf);
  softmax_step_stage(p.softmax, p.rescale.max_round, b, kc, state, buf);
  exp_stage(p.exp, p.softmax.base, b, buf);
  rescale_stage(p.rescale, p.pv.o_accum, b, state, buf);
  if (p.pv.flush) flush_ref(p.pv, p.softmax.ftz, b, state, buf);
  cast_p_stage(p.p, b, buf);
  row_sum_stage(p.softmax, p.p.enc, p.pv.perm16, b, state, buf);
  pv_stage(p.pv, p.p, in, ti, b, state, buf);
  if (p.pv.acc == PvAccumulate::kChunk) add_chunk_stage(p.rescale, p.pv.chunk_add, b, state, buf);
  if (p.pv.flush && b.step == b.steps - 1) flush_final_ref(p.softmax.ftz, b, state);
}

// The block geometry of a tile (everything but the block index).
BlockView block_view_of(const PreparedInput& in, const Pipeline& p, const Tile& t) {
  BlockView b;
  b.rows = t.rows;
  b.bk = p.tile.block_kv;
  b.kv_pad = kv_pad_of(p);
  b.n_blocks = kv_blocks_of_tile(in, p, t);
  return b;
}

// The KV blocks a tile visits under KvOrder::kSparse, in order, each with whether the block mask
// marks its sparse block fully visible (FlexAttention, flex_attention.py.jinja): torch's
// create_block_mask pads the mask to whole sparse blocks with False, calls a block full when
// every padded pair is visible and partial when some are; the kernel walks KV_IDX (the partial
// blocks, ascending) and then FULL_KV_IDX (ascending), each list for at most cdiv(len_kv, bk)
// steps of bk keys. Without a mask the block mask is one block over every key (ascending, and no
// mask select: counted as full). Steps wholly past len_kv (a padded sparse block's tail) change
// nothing on the GPU (every p is 0, alpha 1) and are left out.
struct SparseVisit {
  int nb;
  bool full;
};
std::vector<SparseVisit> sparse_visits(const PreparedInput& in, const Pipeline& p, int q_begin) {
  const AttentionShape& s = in.shape;
  const int bk = p.tile.block_kv, sb = p.tile.sparse_block;
  const int cap = (s.len_kv + bk - 1) / bk;
  std::vector<SparseVisit> v;
  if (!in.causal) {
    for (int nb = 0; nb < cap; ++nb) v.push_back({nb, true});
    return v;
  }
  const int offset = p.tile.causal == CausalAlign::kTopLeft ? 0 : s.len_kv - s.len_q;
  const int q0 = q_begin / sb * sb, q1 = std::min(s.len_q, q0 + sb);
  const std::int64_t total = std::int64_t(sb) * sb;
  std::vector<int> partial, full;
  for (int kb = 0; kb * sb < s.len_kv; ++kb) {
    const int k0 = kb * sb, k1 = std::min(s.len_kv, k0 + sb);
    std::int64_t count = 0;  // visible (query, key) pairs of the padded sparse block
    for (int i = q0; i < q1; ++i) {
      const int lo = in.window > 0 ? std::max(k0, i + offset - in.window + 1) : k0;
      count += std::max(0, std::min(k1 - 1, i + offset) - lo + 1);
    }
    if (count == total) {
      full.push_back(kb);
    } else if (count > 0) {
      partial.push_back(kb);
    }
  }
  const int mult = sb / bk;
  auto walk = [&](const std::vector<int>& list, bool is_full) {
    const int n = std::min(int(list.size()) * mult, cap);
    for (int st = 0; st < n; ++st) {
      const int nb = list[std::size_t(st / mult)] * mult + st % mult;
      if (nb * bk < s.len_kv) v.push_back({nb, is_full});
    }
  };
  walk(partial, false);
  walk(full, true);
  return v;
}

// Block `step` of the tile's range [lo, hi) in the pipeline's order (`visits`: the tile's
// sparse_visits, computed once per tile, for KvOrder::kSparse).
void set_block(const PreparedInput& in, const Pipeline& p, const std::vector<SparseVisit>& visits,
               int lo, int hi, int step, BlockView& b) {
  b.fuse = true;
  b.step = step;
  b.steps = hi - lo;
  if (p.tile.kv_order == KvOrder::kSparse) {
    const SparseVisit v = visits[std::size_t(lo + step)];
    b.nb = v.nb;
    if (p.softmax.fma_blocks == FmaBlocks::kFullDivisible)
      b.fuse = v.full && in.shape.len_q % 128 == 0 && in.shape.len_kv % 128 == 0;
  } else {
    b.nb = p.tile.kv_order == KvOrder::kDescending ? hi - 1 - step : lo + step;
  }
  b.j0 = b.nb * b.bk;
  b.cols = std::min(b.bk, in.shape.len_kv - b.j0);
}

std::atomic<bool> g_group_tiles{true};
std::atomic<std::int64_t> g_grouped_items{0};

}  // namespace

void set_tile_grouping(bool on) { g_group_tiles = on; }
std::int64_t grouped_tile_items() { return g_grouped_items.load(); }

Tile tile_of_item(const AttentionShape& s, int bq, std::int64_t item) {
  const int q_blocks = (s.len_q + bq - 1) / bq;
  Tile t;
  const int qb = int(item % q_blocks);
  t.head = int((item / q_blocks) % s.heads_q);
  t.batch = int(item / q_blocks / s.heads_q);
  t.q_begin = qb * bq;
  t.rows = std::min(bq, s.len_q - t.q_begin);
  return t;
}

int kv_blocks_of_tile(const PreparedInput& in, const Pipeline& p, const Tile& t) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q, bk = p.tile.block_kv;
  int n = (s.len_kv + bk - 1) / bk;
  if (p.tile.kv_order == KvOrder::kSparse) return int(sparse_visits(in, p, t.q_begin).size());
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
  BlockView b = block_view_of(in, p, t);
  buf.size(std::max(t.rows, 1), b.bk, in.shape.head_dim_v);
  const int lo = std::max(kv_block_begin, 0), hi = std::min(kv_block_end, b.n_blocks);
  const std::vector<SparseVisit> visits = p.tile.kv_order == KvOrder::kSparse
                                              ? sparse_visits(in, p, t.q_begin)
                                              : std::vector<SparseVisit>{};
  for (int step = 0; step < hi - lo; ++step) {
    set_block(in, p, visits, lo, hi, step, b);
    buf.kv_key = next_mma_tile_key();  // this block's K and V, seen by this tile only
    attend_block(in, p, ti, b, kc, state, ws);
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

// Tiles of query heads that share a KV head (GQA, MLA), block by block: for each step of the
// block order, every tile in turn. Each tile's own sequence of blocks and stage calls is
// attend_tile's, so its bits are too (the stages keep nothing in the buffers from one block of a
// tile to the next but Q's packing, named per tile by q_key); the tiles at the same block share
// buf.kv_key, so the stages prepare that K and V block once for all of them (the kernels'
// transposed, widened and packed copies and exponent spans).
template <class T>
void attend_tiles(const PreparedInput& in, const Pipeline& p, const Tile* tiles, int n,
                  TileState<T>* states, TileWorkspace& ws) {
  TileBuffers<T>& buf = ws.buffers<T>();
  const ExpConstants<T> kc = exp_constants<T>(p, in.sm_scale);
  struct One {
    TileIndex ti;
    BlockView b;
    int hi;
    std::uint64_t q_key;
    std::vector<SparseVisit> visits;  // KvOrder::kSparse
  };
  std::vector<One> all(static_cast<std::size_t>(n));
  int rows = 1, steps = 0;
  for (int k = 0; k < n; ++k) {
    One& o = all[std::size_t(k)];
    o.ti = tile_index(in, p, tiles[k]);
    o.b = block_view_of(in, p, tiles[k]);
    o.hi = o.b.n_blocks;
    if (p.tile.kv_order == KvOrder::kSparse) o.visits = sparse_visits(in, p, tiles[k].q_begin);
    o.q_key = next_mma_tile_key();
    rows = std::max(rows, tiles[k].rows);
    steps = std::max(steps, o.hi);
  }
  buf.size(rows, p.tile.block_kv, in.shape.head_dim_v);
  for (int step = 0; step < steps; ++step) {
    int shared_nb = -1, shared_skv = -1;
    std::uint64_t shared_key = 0;
    for (int k = 0; k < n; ++k) {
      One& o = all[std::size_t(k)];
      if (step >= o.hi) continue;
      set_block(in, p, o.visits, 0, o.hi, step, o.b);
      if (shared_key == 0 || o.b.nb != shared_nb || o.ti.skv != shared_skv) {
        shared_key = next_mma_tile_key();
        shared_nb = o.b.nb;
        shared_skv = o.ti.skv;
      }
      buf.q_key = o.q_key;
      buf.kv_key = shared_key;
      attend_block(in, p, o.ti, o.b, kc, states[k], ws);
    }
  }
}

// A finished tile's epilogue into the result's rows (`lse`: scratch of block_q rows).
template <class T>
void write_tile(const PreparedInput& in, const Pipeline& p, const Tile& t, const TileState<T>& st,
                PipelineResult& res, std::vector<double>& lse) {
  const AttentionShape& s = in.shape;
  const std::size_t row0 = (std::size_t(t.batch) * s.heads_q + t.head) * s.len_q + t.q_begin;
  finish_tile<T>(in, p, t, st, res.o.data() + row0 * s.head_dim_v, lse.data());
  for (int i = 0; i < t.rows; ++i) res.lse[row0 + i] = lse[std::size_t(i)];
}

// run_all's items as (batch, KV head, Q block, `per_item` consecutive query heads of the group).
template <class T>
void run_grouped(const PreparedInput& in, const Pipeline& p, PipelineResult& res, int per_item) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q, g = s.group();
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const int parts = (g + per_item - 1) / per_item;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_kv * q_blocks * parts;
#pragma omp parallel
  {
    TileWorkspacePtr ws = make_workspace();
    std::vector<Tile> tiles;
    std::vector<TileState<T>> st(static_cast<std::size_t>(per_item));
    std::vector<double> lse(static_cast<std::size_t>(bq));
#pragma omp for schedule(static)
    for (std::int64_t item = 0; item < items; ++item) {
      const int part = int(item % parts);
      const int qb = int((item / parts) % q_blocks);
      const int hk = int((item / parts / q_blocks) % s.heads_kv);
      const int b = int(item / parts / q_blocks / s.heads_kv);
      tiles.clear();
      const int h0 = hk * g + part * per_item, h1 = std::min((hk + 1) * g, h0 + per_item);
      for (int h = h0; h < h1; ++h) {
        Tile t;
        t.batch = b;
        t.head = h;
        t.q_begin = qb * bq;
        t.rows = std::min(bq, s.len_q - t.q_begin);
        st[tiles.size()].reset(t.rows, s.head_dim_v);
        tiles.push_back(t);
      }
      attend_tiles<T>(in, p, tiles.data(), int(tiles.size()), st.data(), *ws);
      ++g_grouped_items;
      for (std::size_t k = 0; k < tiles.size(); ++k) {
        write_tile<T>(in, p, tiles[k], st[k], res, lse);
      }
    }
  }
}

// How many query heads of a KV group one work item of run_all takes (1: one tile per item). Tiles
// of one group share every K and V block, which the stages then prepare once per item and block
// (attend_tiles): worth it when the tiles are short (decode, MLA: one query row per head), where
// preparing a block costs as much as its products. Short tiles only, so that the states of an
// item stay O(tile); at least two items per thread where the shape has them and the group's
// heads allow 8 per item. The grouping changes no bits (attend_tiles), so it may depend on the
// thread count.
int heads_per_item(const AttentionShape& s, const Pipeline& p) {
  const int g = s.group();
  if (g <= 1 || !g_group_tiles || s.len_q * g > 4 * p.tile.block_q) return 1;
  const std::int64_t kv_items =
      std::int64_t(s.batch) * s.heads_kv * ((s.len_q + p.tile.block_q - 1) / p.tile.block_q);
  // The threads this run_all gets (one inside a caller's parallel region, as repro's cases run).
  const int threads =
      omp_get_active_level() >= omp_get_max_active_levels() ? 1 : omp_get_max_threads();
  const std::int64_t want = 2 * std::int64_t(threads);
  const std::int64_t split = std::clamp<std::int64_t>((want + kv_items - 1) / kv_items, 1, g);
  // At least 8 heads per item where the group has them: the reuse is what the grouping is for.
  return std::min(g, std::max(8, int((g + split - 1) / split)));
}

template <class T>
void run_all(const PreparedInput& in, const Pipeline& p, PipelineResult& res) {
  const AttentionShape& s = in.shape;
  const int bq = p.tile.block_q;
  const int q_blocks = (s.len_q + bq - 1) / bq;
  const int per_item = heads_per_item(s, p);
  if (per_item > 1) {
    run_grouped<T>(in, p, res, per_item);
    return;
  }
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
      const Tile t = tile_of_item(s, bq, item);
      st.reset(t.rows, s.head_dim_v);
      attend_tile<T>(in, p, t, 0, std::numeric_limits<int>::max(), st, *ws);
      write_tile<T>(in, p, t, st, res, lse);
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
