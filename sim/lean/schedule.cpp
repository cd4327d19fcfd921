// LeanAttention's partition as ONNX Runtime computes it (see schedule.hpp and sim/lean/README.md).
#include "sim/lean/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace attnsim {

namespace {

long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// The shape the kernel runs after the host's rewrites (lean_api.cc): block sizes from the head
// dim, decode non-causal, GQA decode folded into M.
LeanPlan plan_frame(const LeanShape& s) {
  validate(s);
  LeanPlan p;
  // lean_api.cc get_num_splits_and_buffer_sizes: kBlockN = 256 (d <= 64), 128 (d <= 128), 64;
  // kBlockM = 64.
  p.block_n = s.head_dim <= 64 ? 256 : (s.head_dim <= 128 ? 128 : 64);
  if (s.block_n > 0) p.block_n = s.block_n;
  p.block_m = 64;
  // mha_fwd_kvcache: seqlen_q == 1 is run non-causal, and with GQA the group's query heads
  // become the M rows of one KV head (seqlenq_ngroups_swapped).
  p.causal = s.causal && s.len_q > 1;
  p.folded = s.len_q == 1 && s.heads_q > s.heads_kv;
  p.rows = p.folded ? s.heads_q / s.heads_kv : s.len_q;
  p.heads = p.folded ? s.heads_kv : s.heads_q;
  p.num_n_blocks = int(cdiv(s.len_kv, p.block_n));
  p.ort = s.m_blocks == LeanMBlocks::kOrt;
  if (p.ort) {
    // lean_api.cc L180-211: m-blocks of the unfolded seqlen_q; causal m-block i has
    // ceil((i + 1)·64 / block_n) n-tiles (top-left: right only when len_q == len_kv); a
    // non-causal head is one block of num_m_blocks · n_blocks tiles, walked as m-block 0
    // (lean_fwd_kernel.h L69-71: cur_m_block = 0, num_tiles_in_block = tiles_per_head).
    const int nm = int(cdiv(s.len_q, p.block_m));
    if (p.causal) {
      p.num_m_blocks = nm;
      for (int i = 0; i < nm; ++i)
        p.tiles_of_m_block.push_back(int(cdiv((i + 1LL) * p.block_m, p.block_n)));
    } else {
      p.num_m_blocks = 1;
      p.tiles_of_m_block.assign(1, nm * p.num_n_blocks);
    }
    p.host_heads = s.heads_kv;
    p.host_m_blocks = nm;
  } else {
    p.num_m_blocks = int(cdiv(p.rows, p.block_m));
    p.tiles_of_m_block.assign(std::size_t(p.num_m_blocks), p.num_n_blocks);
    if (p.causal) {
      // Causal m-block i sees keys up to its last row, bottom-right aligned (FA2 n_block_max):
      // ceil(((i + 1)·block_m + len_kv − len_q) / block_n), clamped to [0, n_blocks].
      for (int i = 0; i < p.num_m_blocks; ++i) {
        const long long last = std::min<long long>(p.rows, (i + 1LL) * p.block_m);
        const long long n = cdiv(std::max<long long>(0, last + s.len_kv - s.len_q), p.block_n);
        p.tiles_of_m_block[std::size_t(i)] = int(std::min<long long>(n, p.num_n_blocks));
      }
    }
    p.host_heads = p.heads;
    p.host_m_blocks = p.num_m_blocks;
  }
  if (!s.len_kv_per_batch.empty()) {
    for (int l : s.len_kv_per_batch) p.n_blocks_per_batch.push_back(int(cdiv(l, p.block_n)));
  }
  p.tiles_per_head = 0;
  for (int t : p.tiles_of_m_block) p.tiles_per_head += t;
  if (p.n_blocks_per_batch.empty()) {
    // ORT: tiles_per_head · b · h_k (L211), whatever heads the kernel indexes.
    p.total_tiles = p.tiles_per_head * s.batch * p.host_heads;
  } else {
    p.total_tiles = 0;
    for (int b = 0; b < s.batch; ++b) p.total_tiles += p.tiles_of(b, 0) * 1LL * p.num_m_blocks;
    p.total_tiles *= p.host_heads;
  }
  // lean_griddimz: 2·SMs by default; small problems get about two tiles per CTA but at most
  // 32 CTAs per head-block's worth of n-tiles; the result in [1, total_tiles].
  long long grid = 2LL * s.sms;
  if (p.total_tiles <= 4LL * s.sms) {
    grid = std::min((p.total_tiles + 1) / 2, cdiv(32 * p.total_tiles, p.num_n_blocks));
  } else {
    grid = std::min<long long>(2LL * s.sms, 32LL * p.host_heads * s.batch * p.host_m_blocks);
  }
  grid = std::clamp<long long>(grid, 1, std::max<long long>(1, p.total_tiles));
  p.grid = int(grid);
  p.max_tiles_per_tb = cdiv(p.total_tiles, p.grid);
  p.high_load_tbs = p.total_tiles - (p.max_tiles_per_tb - 1) * p.grid;
  const long long mtpt = p.max_tiles_per_tb;
  const long long nb = p.num_n_blocks;
  p.num_splits = int(p.total_tiles % p.grid == 0 ? 1 + (nb + mtpt - 2) / mtpt
                    : mtpt > 1                    ? 1 + (nb + mtpt - 3) / (mtpt - 1)
                                                  : 1);
  // What the kernel leaves out (ORT mode): the (batch, head) pairs past the first b·h_k in
  // b-major order (GQA prefill: the host counts h_k heads, the kernel indexes h_q), the m-blocks
  // past the first of a non-causal head (their tiles are walked as n-tiles of m-block 0, past
  // the keys), folded rows past 64, and causal tile counts that assume len_q == len_kv.
  if (p.ort) {
    const long long pairs = (long long)s.batch * p.heads, covered = (long long)s.batch * p.host_heads;
    if (covered < pairs)
      p.coverage.push_back("GQA prefill: the host counts " + std::to_string(s.heads_kv) +
                           " heads, the kernel indexes " + std::to_string(p.heads) + ": only the first " +
                           std::to_string(covered) + " of " + std::to_string(pairs) +
                           " (batch, head) pairs (batch-major) are computed");
    if (!p.causal && p.host_m_blocks > 1)
      p.coverage.push_back("non-causal len_q > 64: a head is walked as one block of " +
                           std::to_string(p.tiles_per_head) +
                           " n-tiles of m-block 0 (n-tiles past " + std::to_string(p.num_n_blocks) +
                           " read past the keys; rows past 64 are never computed)");
    if (p.folded && p.rows > p.block_m)
      p.coverage.push_back("GQA decode with " + std::to_string(p.rows) +
                           " query heads per KV head: one m-block, rows past 64 are never computed");
    if (p.causal && s.len_q != s.len_kv)
      p.coverage.push_back("causal len_q != len_kv: the tile counts are top-left, the mask bottom-right");
  }
  return p;
}

// The first global tile of CTA c and its tile count (lean_fwd_kernel.h: high-load CTAs first).
void cta_range(const LeanPlan& p, long long c, long long* start, long long* count) {
  const long long m = p.max_tiles_per_tb, h = p.high_load_tbs;
  *start = c < h ? c * m : (m - 1) * c + h;
  *count = c < h ? m : m - 1;
}

// Sets host / finisher / split of every segment (split: CTA index − the host CTA's).
void finish_roles(LeanPlan& p) {
  std::vector<int> host_cta;
  for (auto& g : p.segments) {
    g.host = g.n_begin == 0;
    g.finisher = g.n_end == p.tiles_of(g.batch, g.m_block);
  }
  // The host of a block is its first segment in CTA order (the one that starts at n-tile 0).
  struct Key {
    int b, h, m;
    bool operator==(const Key& o) const { return b == o.b && h == o.h && m == o.m; }
  };
  Key cur{-1, -1, -1};
  int host = 0;
  for (auto& g : p.segments) {
    const Key k{g.batch, g.head, g.m_block};
    if (!(k == cur) && g.host) {
      cur = k;
      host = g.cta;
    }
    g.split = g.cta - host;
  }
}

}  // namespace

int LeanPlan::tiles_of(int batch, int m_block) const {
  if (!n_blocks_per_batch.empty()) return n_blocks_per_batch[std::size_t(batch)];
  return tiles_of_m_block[std::size_t(m_block)];
}

void validate(const LeanShape& s) {
  auto bad = [](const std::string& w) { throw std::invalid_argument(w); };
  if (s.batch < 1) bad("lean: --batch must be at least 1");
  if (s.heads_q < 1 || s.heads_kv < 1) bad("lean: --heads-q and --heads-kv must be at least 1");
  if (s.heads_q % s.heads_kv != 0)
    bad("lean: --heads-q (" + std::to_string(s.heads_q) + ") is not a multiple of --heads-kv (" +
        std::to_string(s.heads_kv) + ")");
  if (s.len_q < 1 || s.len_kv < 1) bad("lean: --len-q and --len-kv must be at least 1");
  if (s.head_dim != 64 && s.head_dim != 128)
    bad("lean: --head-dim " + std::to_string(s.head_dim) +
        " is not supported (ONNX Runtime's LeanAttention takes 64 or 128)");
  if (s.sms < 1) bad("lean: --sms must be at least 1");
  if (s.block_n < 0 || (s.block_n > 0 && s.block_n % 16 != 0))
    bad("lean: block_n must be a positive multiple of 16");
  if (!s.len_kv_per_batch.empty()) {
    if (int(s.len_kv_per_batch.size()) != s.batch)
      bad("lean: a ragged batch needs one context length per batch entry");
    if (s.causal && s.len_q > 1) bad("lean: ragged batches are decode only (len_q = 1)");
    for (int l : s.len_kv_per_batch)
      if (l < 1 || l > s.len_kv) bad("lean: a ragged context length is outside [1, len_kv]");
  }
  // Keep every count inside the kernel's int arithmetic.
  const long long tiles = (long long)s.batch * s.heads_q * cdiv(s.len_q, 64) * cdiv(s.len_kv, 64);
  if (tiles > (1LL << 31) - 1) bad("lean: the shape has more than 2^31 tiles");
}

LeanPlan lean_plan(const LeanShape& s) {
  LeanPlan p = plan_frame(s);
  // Block prefix sums in the kernel's global order batch -> head -> m-block.
  const int nblk = s.batch * p.heads * p.num_m_blocks;
  std::vector<long long> first(std::size_t(nblk) + 1, 0);
  for (int i = 0; i < nblk; ++i) {
    const int b = i / (p.heads * p.num_m_blocks), m = i % p.num_m_blocks;
    first[std::size_t(i) + 1] = first[std::size_t(i)] + p.tiles_of(b, m);
  }
  for (long long c = 0; c < p.grid; ++c) {
    long long t, n;
    cta_range(p, c, &t, &n);
    const long long end = t + n;
    // The block holding tile t: the last block whose first tile is <= t (skipping empty ones).
    int blk = int(std::upper_bound(first.begin(), first.end(), t) - first.begin()) - 1;
    while (t < end) {
      while (first[std::size_t(blk) + 1] <= t) ++blk;
      const long long stop = std::min(end, first[std::size_t(blk) + 1]);
      LeanSegment g;
      g.cta = int(c);
      g.batch = blk / (p.heads * p.num_m_blocks);
      g.head = (blk / p.num_m_blocks) % p.heads;
      g.m_block = blk % p.num_m_blocks;
      g.n_begin = int(t - first[std::size_t(blk)]);
      g.n_end = int(stop - first[std::size_t(blk)]);
      p.segments.push_back(g);
      t = stop;
    }
  }
  finish_roles(p);
  return p;
}

LeanPlan lean_plan_ref(const LeanShape& s) {
  LeanPlan p = plan_frame(s);
  // Algorithm 2's walk: CTA g owns the next I_g tiles, the high-load CTAs one more.
  long long walked = 0;
  long long cta = 0, left = p.grid > 0 ? (0 < p.high_load_tbs ? p.max_tiles_per_tb
                                                              : p.max_tiles_per_tb - 1)
                                       : 0;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int m = 0; m < p.num_m_blocks; ++m)
        for (int n = 0; n < p.tiles_of(b, m); ++n) {
          if (walked++ >= p.total_tiles) break;
          while (left == 0) {
            ++cta;
            left = cta < p.high_load_tbs ? p.max_tiles_per_tb : p.max_tiles_per_tb - 1;
          }
          LeanSegment* last = p.segments.empty() ? nullptr : &p.segments.back();
          if (last && last->cta == cta && last->batch == b && last->head == h &&
              last->m_block == m && last->n_end == n) {
            last->n_end = n + 1;
          } else {
            LeanSegment g;
            g.cta = int(cta);
            g.batch = b;
            g.head = h;
            g.m_block = m;
            g.n_begin = n;
            g.n_end = n + 1;
            p.segments.push_back(g);
          }
          --left;
        }
  // Roles by counting: split = how many segments of this block came before.
  std::map<std::tuple<int, int, int>, int> before;
  for (LeanSegment& g : p.segments) {
    g.host = g.n_begin == 0;
    g.finisher = g.n_end == p.tiles_of(g.batch, g.m_block);
    g.split = before[{g.batch, g.head, g.m_block}]++;
  }
  return p;
}

int fa2_num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks,
                             int max_splits) {
  // flash_api.cpp: enough blocks already fill 80% of the SMs -> no split; otherwise the fewest
  // splits whose wave efficiency is within 85% of the best (splits that do not change the
  // blocks per split are not eligible).
  if (batch_nheads_mblocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  auto eligible = [&](int k) {
    return k == 1 || cdiv(num_n_blocks, k) != cdiv(num_n_blocks, k - 1);
  };
  float max_eff = 0.f;
  std::vector<float> eff;
  for (int k = 1; k <= max_splits; ++k) {
    if (!eligible(k)) {
      eff.push_back(0.f);
      continue;
    }
    const float n_waves = float(batch_nheads_mblocks * k) / num_sms;
    const float e = n_waves / float(std::ceil(n_waves));
    max_eff = std::max(max_eff, e);
    eff.push_back(e);
  }
  for (int k = 1; k <= max_splits; ++k) {
    if (!eligible(k)) continue;
    if (eff[std::size_t(k) - 1] >= 0.85f * max_eff) return k;
  }
  return 1;
}

int fa3_num_splits_heuristic(int total_mblocks, int num_sms, int num_n_blocks, int num_m_blocks,
                             long long size_one_kv_head, bool is_causal_or_local, int max_splits) {
  if (total_mblocks >= 0.8f * num_sms) {
    const long long size_l2 = 50LL * 1024 * 1024;  // the H100's L2 as heuristics.h assumes it
    if (size_one_kv_head > size_l2 && num_m_blocks >= num_sms * 2 && !is_causal_or_local)
      return int(std::min<long long>(cdiv(size_one_kv_head, size_l2), max_splits));
    return 1;
  }
  if (num_n_blocks <= 4) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  float max_eff = 0.f;
  std::vector<float> eff;
  for (int k = 1; k <= max_splits; ++k) {
    const float n_waves = float(total_mblocks * k) / num_sms;
    const float e = n_waves / std::ceil(n_waves);
    max_eff = std::max(max_eff, e);
    eff.push_back(e);
  }
  for (int k = 1; k <= max_splits; ++k)
    if (eff[std::size_t(k) - 1] >= 0.85 * max_eff) return k;
  return 1;
}

void split_block_range(int n_blocks, int splits, int split, int* begin, int* end) {
  const int per = int(cdiv(n_blocks, std::max(splits, 1)));
  *begin = split * per;
  *end = std::min(n_blocks, (split + 1) * per);
}

LeanPlan splitkv_plan(const LeanShape& shape, int splits) {
  // FA2's split-KV kernel covers every head and m-block (its own block walk, not Lean's).
  LeanShape s = shape;
  s.m_blocks = LeanMBlocks::kAll;
  LeanPlan p = plan_frame(s);
  if (splits < 0) throw std::invalid_argument("splitkv: splits must be >= 0");
  if (splits == 0)
    // flash_api.cpp set_params_splitkv: num_splits_heuristic(b·h·m_blocks, 2·SMs (128 threads
    // a CTA), n_blocks, 128).
    splits = fa2_num_splits_heuristic(s.batch * p.heads * p.num_m_blocks, 2 * s.sms,
                                      p.num_n_blocks, 128);
  p.num_splits = splits;
  int cta = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < p.heads; ++h)
      for (int m = 0; m < p.num_m_blocks; ++m) {
        const int n = p.tiles_of(b, m);
        const int per = int(cdiv(std::max(n, 1), splits));
        for (int k = 0; k < splits; ++k) {
          const int lo = k * per, hi = std::min(n, (k + 1) * per);
          if (lo >= hi) continue;
          LeanSegment g;
          g.cta = cta++;
          g.batch = b;
          g.head = h;
          g.m_block = m;
          g.n_begin = lo;
          g.n_end = hi;
          g.host = lo == 0;
          g.finisher = hi == n;
          g.split = k;
          p.segments.push_back(g);
        }
      }
  p.grid = cta;
  return p;
}

std::string plan_csv(const LeanPlan& p) {
  std::ostringstream o;
  o << "cta,batch,head,m_block,n_tile_begin,n_tile_end,host,finisher,split\n";
  for (const auto& g : p.segments)
    o << g.cta << ',' << g.batch << ',' << g.head << ',' << g.m_block << ',' << g.n_begin << ','
      << g.n_end << ',' << int(g.host) << ',' << int(g.finisher) << ',' << g.split << '\n';
  return o.str();
}

std::string plan_summary(const LeanPlan& p) {
  std::ostringstream o;
  for (const std::string& c : p.coverage) o << "warning: ONNX Runtime's kernel: " << c << '\n';
  o << "grid " << p.grid << "\nmax_tiles_per_tb " << p.max_tiles_per_tb << "\nhigh_load_tbs "
    << p.high_load_tbs << "\nnum_splits " << p.num_splits << "\ntiles_per_head "
    << p.tiles_per_head << "\ntotal_tiles " << p.total_tiles << "\nblock_m " << p.block_m
    << "\nblock_n " << p.block_n << "\nheads " << p.heads << (p.folded ? " (GQA decode folded)" : "")
    << "\nrows " << p.rows << "\nm_blocks " << (p.ort ? "ort" : "all")
    << "\nsegments " << p.segments.size() << '\n';
  return o.str();
}

}  // namespace attnsim
