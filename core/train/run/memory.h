// What a rank holds, by kind, as a run allocated it (RankMemory,
// train/resolve/plan.h), and every rank's gathered for the summary.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/comm.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "train/resolve/plan.h"
#include "train/run/run_state.h"
#include "train/schedule/pipeline.h"
#include "util/json.h"

namespace gpt2 {

// This rank's memory by kind (bytes), as allocated (RankMemory, train/resolve/plan.h).
RankMemory rank_memory(const RunState& st, const PipelineEngine* pipe, const ActivationArena* arena, int dp);

// Each rank's RankMemory, gathered to rank 0 for the summary, with the
// rank's peak resident set so far (the process as the system counts it:
// libraries, communication buffers and transients included).
Json memory_per_rank(ProcessGrid& grid, const RankMemory& mem, int zero_stage);

// Collective: every rank's `bytes` in MB, "a b c d" (rank 0's text; 0: unknown).
std::string per_rank_mb(Communicator& comm, uint64_t bytes);

}  // namespace gpt2
