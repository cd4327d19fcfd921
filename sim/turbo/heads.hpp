// Head-wise mixed precision of TurboAttention (§3.2, Eq. 11-12; the selectors of Fig. 7b and
// §5.6): per-layer statistics of each KV head over the prompt, and which heads'
// caches are compressed to 2 bits instead of 4.
#pragma once

#include <vector>

#include "sim/problem.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {

// One score per KV head for its K and one for its V, [heads_kv] each. A layer is one
// AttentionInput; the statistics run in FP64 over the first `prefill` tokens (the prompt: the
// cache is compressed block by block as it is built, so the bit-widths must be known from the
// prompt alone) of every batch entry together (one bit-width per head for the whole layer). The
// values are the input's as given (FP32); the FP16 rounding Turbo applies first cannot move a
// ranking by more than a relative 2^-11 of a range.
//
// With X the prompt's K (or V) of head h, [tokens, channels]:
//   gap_c   = max_t X[t,c] − min_t X[t,c]                 per channel
//   gap^(h) = max_{t,c} X − min_{t,c} X                    §3.2 "difference between the maximum
//                                                          and minimum values across all channels"
//   std^(h) = population std over c of gap_c               §3.2 "standard deviation of the
//                                                          channel-wise gaps"
//  kPriority   gap^(h) · std^(h)                           Eq. 11
//  kMinMax     gap^(h)                                     §5.6 "Min-Max: the range between
//                                                          minimum and maximum values"
//  kVariation  std^(h)                                     §5.6 "Variation: variation in
//                                                          channelwise value ranges"
//  kEntropy    the mean over the head's query group (every batch entry, every query head that
//              reads KV head h) of the Shannon entropy −Σ_j p_j ln p_j of the FP64 softmax row of
//              scale·q·kᵀ over the prompt's keys; k and v hold the same value. §5.6 only says
//              "the entropy of each head". Rows: the queries at prompt positions (row i is
//              position i + len_kv − len_q, bottom-right aligned, positions < prefill) with the
//              input's causal mask; an input without prompt queries (decode-only: len_q ≤ len_kv
//              − prefill) uses every query row over the prompt's keys. Rows that see no key are
//              left out.
struct HeadScores {
  std::vector<double> k, v;
};

HeadScores head_scores(const AttentionInput& in, int prefill, HeadSelector selector);

// The bit-widths from the scores (Eq. 12): the n_h candidates of lowest importance get 2 bits,
// the rest 4.
//  kHead        one candidate per KV head, importance k[h] + v[h] (kEntropy: the head's entropy),
//               the same width for its K and V; n_h in [0, heads_kv].
//  kKvSeparate  2·heads_kv candidates, K and V of each head ranked on their own scores; n_h in
//               [0, 2·heads_kv] (§5.6: "8-head configuration ... 0 to 16 heads").
// Importance is the score for kPriority, kMinMax and kVariation (§3.2: "the least critical heads
// (i.e., those with the smallest priority)" get 2 bits). For kEntropy it is the negated entropy:
// the HIGHEST-entropy heads get 2 bits (our choice; the paper does not say). A high-entropy head
// spreads its attention over many keys, so its output is an average in which independent
// quantization errors of the keys' scores and values partly cancel, and head-pruning work finds
// such diffuse heads the least important (Voita et al., 2019, outside the paper: the heads that
// matter are "confident", their largest weight near 1; the paper motivates its heads from pruning
// too, §3.2); a low-entropy head concentrates on a few keys, and an error on those keys' scores or
// values reaches its output undiluted.
// Ties go to the lower candidate index: kHead orders candidates by head, kKvSeparate as K of head
// 0, V of head 0, K of head 1, ... (so equal K and V scores, as kEntropy gives, pick both caches
// of one head before the next head). Throws std::invalid_argument when n_h is out of range.
HeadBits head_bits_from_scores(const HeadScores& scores, HeadSelector selector, HeadScope scope,
                               int n_h);

// head_scores then head_bits_from_scores. Throws std::invalid_argument (one line) on an invalid
// shape, prefill outside 1..len_kv, or n_h out of range.
HeadBits select_head_bits(const AttentionInput& in, int prefill, HeadSelector selector,
                          HeadScope scope, int n_h);

}  // namespace attnsim
