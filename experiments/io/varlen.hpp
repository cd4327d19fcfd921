// Varlen (ragged) batches: the sequences of one launch packed along the token axis, as
// FlashAttention's varlen API and vLLM lay them out: q [1, heads_q, total_q, d], k and v [1,
// heads_kv, total_kv, d(v)], cu_seqlens_q and cu_seqlens_k [num_seqs + 1] (sequence s owns
// queries cu_seqlens_q[s] .. cu_seqlens_q[s+1] - 1 and keys cu_seqlens_k[s] ..; its queries are the
// last of its keys). Each sequence runs as its own input with the whole launch attached
// (AttentionInput::launch), so the kernel's schedule is the batch's. No HDF5 here (dump.hpp reads
// the datasets).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "experiments/methods/methods.hpp"
#include "sim/launch.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// The sequences of cumulative lengths (both start at 0, non-decreasing, equal counts, each
// sequence 1 <= queries <= keys) for packed totals `total_q`, `total_kv`; UsageError (one line,
// naming `where`) otherwise.
std::vector<LaunchSeq> varlen_sequences(const std::vector<std::int64_t>& cu_q,
                                        const std::vector<std::int64_t>& cu_k, int total_q,
                                        int total_kv, const std::string& where);

// Sequence s of a packed input as an input of its own (batch 1) run inside the launch of every
// sequence (in order, s the target; `sms` the GPU's SM count).
AttentionInput varlen_sequence(const AttentionInput& packed, const std::vector<LaunchSeq>& seqs,
                               int s, int sms);

// Writes sequence s's output o [1, heads_q, len_q, dv] into the packed output [1, heads_q,
// total_q, dv] at its queries' offset.
void varlen_place(std::vector<double>& packed_o, const AttentionShape& packed,
                  const std::vector<LaunchSeq>& seqs, int s, const std::vector<double>& o);

// Sequence s's rows [1, heads_q, len_q, dv] of a packed output [1, heads_q, total_q, dv] (dv = 1
// for an LSE), varlen_place's inverse.
std::vector<double> varlen_take(const std::vector<double>& packed_o, const AttentionShape& packed,
                                const std::vector<LaunchSeq>& seqs, int s);

// The method on every sequence of a packed input: O packed as the queries are (format and the
// last sequence's resolved values), LSE packed [heads_q, total_q] when the method gives one.
// `each`, when given, sees every sequence's input and output as it is computed (per-sequence
// metrics).
MethodOutput run_varlen(
    const MethodConfig& m, const AttentionInput& packed, const std::vector<LaunchSeq>& seqs,
    int sms,
    const std::function<void(int s, const AttentionInput&, const MethodOutput&)>& each = {});

}  // namespace attnsim
