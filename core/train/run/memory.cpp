#include "train/run/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <thread>

#include "parallel/gradient_sync.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/flops.h"
#include "train/run/run_state.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/train_step.h"
#include "train/run/metrics.h"
#include "util/console.h"
#include "util/provenance.h"

namespace gpt2 {

// This rank's memory by kind (bytes), as allocated (RankMemory, train/resolve/plan.h).
RankMemory rank_memory(const RunState& st, const PipelineEngine* pipe, const ActivationArena* arena, int dp) {
  RankMemory m;
  const Gpt2& model = *st.model;
  const uint64_t whole = model.padded_params() * sizeof(float);
  m.params = model.residency() == Residency::kNone ? st.homes.units->param_shard_bytes() : whole;
  m.grads = model.residency() == Residency::kWhole ? whole : st.homes.units->grad_shard_bytes();
  m.moments = st.opt->state_bytes();
  set_arena(m, pipe ? pipe->arena_kinds() : arena->kinds());  // as the arenas carved themselves
  m.arena = pipe ? pipe->arena_bytes() : arena->bytes();        // as allocated
  m.arenas = static_cast<uint64_t>(pipe ? pipe->arenas() : 1);
  if (pipe && pipe->chunks() > 1) m.chunk_arenas = pipe->activation_bytes();  // the chunks' arenas differ
  if (st.homes.units) {
    m.gathered = st.homes.units->param_slot_bytes();
    m.comm_buffers = st.homes.units->grad_slot_bytes();
  }
  m.count = model.num_params();
  m.formula = zero_formula_bytes(m.count, dp, st.homes.zero.zero_stage, st.homes.contiguous.has_value());
  return m;
}

// Each rank's RankMemory, gathered to rank 0 for the summary, with the
// rank's peak resident set so far (the process as the system counts it:
// libraries, communication buffers and transients included).
Json memory_per_rank(ProcessGrid& grid, const RankMemory& mem, int zero_stage) {
  // One record per rank, gathered as it is (the Communicator moves trivially copyable host values as bytes).
  struct Record {
    RankMemory mem;
    uint64_t stage = 0, peak_rss = 0;
  };
  static_assert(std::is_trivially_copyable_v<Record>);
  Communicator& aux = grid.aux_comm();
  const Record mine{mem, static_cast<uint64_t>(grid.stage()),
                    static_cast<uint64_t>(peak_rss_mb() * 1024.0 * 1024.0)};
  std::vector<Record> all(static_cast<size_t>(aux.size()));
  aux.all_gather(&mine, all.data(), 1);
  Json out = Json::array();
  for (int r = 0; r < aux.size(); ++r) {
    const RankMemory& m = all[static_cast<size_t>(r)].mem;
    auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
    out.push_back(Json{{"rank", r}, {"stage", i64(all[static_cast<size_t>(r)].stage)}, {"zero", zero_stage},
                       {"params_bytes", i64(m.params)}, {"grads_bytes", i64(m.grads)},
                       {"moments_bytes", i64(m.moments)}, {"arena_bytes", i64(m.arena)}, {"arenas", i64(m.arenas)},
                       {"activations_bytes", i64(m.activations())}, {"gathered_bytes", i64(m.gathered)},
                       {"comm_buffer_bytes", i64(m.comm_buffers)},
                       {"model_state_bytes", i64(m.params) + i64(m.grads) + i64(m.moments)},
                       {"formula_bytes", i64(m.formula)}, {"params", i64(m.count)},
                       {"arena_embed_bytes", i64(m.arena_embed)}, {"arena_layers_bytes", i64(m.arena_layers)},
                       {"arena_head_bytes", i64(m.arena_head)}, {"arena_scratch_bytes", i64(m.arena_scratch)},
                       {"peak_rss_bytes", i64(all[static_cast<size_t>(r)].peak_rss)}});
  }
  return out;
}

// Collective: every rank's `bytes` in MB, "a b c d" (rank 0's text; 0: unknown).
std::string per_rank_mb(Communicator& comm, uint64_t bytes) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&bytes, all.data(), 1);
  std::string text;
  for (uint64_t b : all) text += fmt::format("{}{:.0f}", text.empty() ? "" : " ", static_cast<double>(b) / 1e6);
  return text;
}

}  // namespace gpt2
