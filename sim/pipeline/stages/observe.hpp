// The counters' observers (sim/pipeline/counters.hpp): each reads what one stage call read and
// wrote (the tile buffers, O and l before and after) and counts the silent failures in it. They
// run after the stage's dispatcher, so the stage functions, fast or reference, stay as they are;
// attend_tile calls them only when counting is on.
#pragma once

#include <vector>

#include "sim/pipeline/counters.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim {

// O and l of a tile before a stage that updates them in place.
template <class T>
struct StateSnapshot {
  std::vector<T> o, l;
  void take(const TileState<T>& s) {
    o = s.o;
    l = s.l;
  }
};

template <class T>
void observe_qk(const QkStage& st, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_scores(const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                    const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_softmax(const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                     const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_exp(ExpKind base, const PreparedInput& in, const TileIndex& ti, const BlockView& b,
                 const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_rescale(const RescaleStage& st, const TileIndex& ti, const BlockView& b,
                     const StateSnapshot<T>& before, const TileState<T>& state,
                     const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_p_cast(const PStage& st, const PreparedInput& in, const TileIndex& ti,
                    const BlockView& b, const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_row_sum(const TileIndex& ti, const BlockView& b, const StateSnapshot<T>& before,
                     const TileState<T>& state, StageCounters& c);
template <class T>
void observe_pv(const PvStage& st, const PStage& pst, const PreparedInput& in, const TileIndex& ti,
                const BlockView& b, const StateSnapshot<T>& before, const TileState<T>& state,
                const TileBuffers<T>& buf, StageCounters& c);
template <class T>
void observe_chunk_add(ChunkAdd how, const TileIndex& ti, const BlockView& b,
                       const StateSnapshot<T>& before, const TileState<T>& state,
                       const TileBuffers<T>& buf, StageCounters& c);
// The epilogue: the rows' final O (values of the output encoding) against O / l of the state.
template <class T>
void observe_epilogue(const Pipeline& p, const TileIndex& ti, int rows, const TileState<T>& state,
                      const double* o, StageCounters& c);

// The largest finite value of an encoding (integers: int_max).
double encoding_max_finite(Encoding e);

}  // namespace attnsim
