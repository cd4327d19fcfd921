// Attention tensor dumps in HDF5 (layout in experiments/README.md); the seeded synthetic inputs
// are in synthetic.hpp (no HDF5: the Python module links them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/io/input_checks.hpp"
#include "experiments/io/synthetic.hpp"
#include "sim/problem.hpp"

namespace attnsim {

struct DumpInfo {
  std::string path;    // file, or "synthetic:SPEC"
  std::string prefix;  // "" or "layer_00/"
  std::string dtype;   // dtype of q as stored
  std::string source;  // the file's `source` attribute, if any
};

// Reads q, k, v ([batch, heads, tokens, head_dim]; float32/float16/bfloat16/float64) and the
// optional attributes causal and sm_scale (on the file root or on the prefix group). Errors are
// one line: missing dataset, wrong rank, mismatched shapes, non-finite values (with location)
// unless allow_nonfinite.
AttentionInput read_attention_dump(const std::string& path, const std::string& prefix,
                                   bool allow_nonfinite, DumpInfo* info = nullptr);

// A varlen dump (experiments/io/varlen.hpp): the sequences its datasets cu_seqlens_q and
// cu_seqlens_k (int, [num_seqs + 1], beside q, k, v of batch 1) describe; empty when it has none.
// UsageError (one line) for one without the other, batch > 1 or lengths that do not add up.
std::vector<LaunchSeq> dump_varlen(const std::string& path, const std::string& prefix);

// Reads the inputs `prefixes` of `path` one at a time and drops them: a command that computes input
// by input calls it first, so that a bad layer group deep in a file is refused before anything is
// computed, printed or checkpointed (read_attention_dump's errors).
void check_attention_dumps(const std::string& path, const std::vector<std::string>& prefixes,
                           bool allow_nonfinite);

// Lists the inputs of a dump: {""} for a flat file, {"layer_00/", ...} for per-layer groups.
std::vector<std::string> dump_prefixes(const std::string& path);
// The inputs a command runs on: every prefix of the dump, or the one layer group `group` names
// (a UsageError when the dump has no such group with q, k, v).
std::vector<std::string> select_dump_prefixes(const std::string& path, const std::string& group);
// An input as a command line names it: a dump file (every group of it), or FILE:GROUP for one
// group ("data/real/smollm2_gpl3.h5:layer_15", the name results give that input; a file whose
// own name holds a ':' is taken whole when it exists).
struct DumpSelection {
  std::string file;
  std::vector<std::string> prefixes;
};
DumpSelection select_dump_input(const std::string& text);

// How results name one input of a dump: "path" or "path:layer_03".
std::string dump_input_name(const std::string& path, const std::string& prefix);

// Whether one input of a dump is causal (its group's `causal` attribute, else the root's), from
// the metadata alone; false when the attribute is absent or unreadable (the reader then says why).
bool dump_causal(const std::string& path, const std::string& prefix);

// check_causal_rows: experiments/io/input_checks.hpp.

void write_attention_dump(const std::string& path, const AttentionInput& in,
                          const std::string& source);

}  // namespace attnsim
