// A run's plan: what each rank of a layout will hold and do, stated by the
// engine before anything runs (`<stage> plan`, docs/plan.md), from the same
// functions the run itself calls: the configuration's checks and the grid's
// (ProcessGrid), the rows per replica (init_or_resume), ZeRO's layout, the
// parameter layout and its units (model/params.h), the optimizer's moment
// sizes, the activation arenas (model/activations.h) and the pipeline's
// schedules (train/schedule/pipeline.h). The harness formats it; it re-derives none
// of it.
//
// Per rank: its grid coordinates and pipeline stage's layers; its memory by
// kind (RankMemory, as a run counts it from the buffers it allocated); the
// calls and bytes each of its groups (tp, dp, pp) moves in one training step,
// as the communicators count them (parallel/comm.h: each call's buffer once).
// Per run: the grid, the ZeRO stage in force, the rows, the FLOPs of a step
// and the schedule's bubble when F, B and W take equal time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/params.h"
#include "train/config/run_config.h"
#include "train/formats/model_source.h"  // CheckpointBytes: the format counts a rank's checkpoint
#include "train/resolve/layout.h"
#include "train/resolve/machine.h"
#include "train/resolve/step_time.h"
#include "util/json.h"

namespace gpt2 {

// One rank's memory by kind (bytes): parameters and gradients held (ZeRO
// pads them; ZeRO-2/3 hold shards), optimizer moments, one activation arena
// and the most arenas in use at once, ZeRO-3's gathered parameter slots and
// ZeRO-2/3's gradient slots; and ZeRO's formula for the model state.
struct RankMemory {
  uint64_t params = 0, grads = 0, moments = 0, arena = 0, arenas = 1, gathered = 0, comm_buffers = 0, formula = 0;
  uint64_t count = 0;  // the rank's parameters (its tp shard of its stage): the formula's Ψ
  // One arena's bytes by kind (model/activations.h ArenaKinds): embed, layers, head, scratch.
  uint64_t arena_embed = 0, arena_layers = 0, arena_head = 0, arena_scratch = 0;
  // Virtual stages: the arenas differ by chunk (arena is then the largest's): all of them, exactly. 0: arena x arenas.
  uint64_t chunk_arenas = 0;
  uint64_t activations() const { return chunk_arenas > 0 ? chunk_arenas : arena * arenas; }
  uint64_t model_state() const { return params + grads + moments; }
};

// Rajbhandari et al. (2020), fp32 Adam over N data-parallel ranks, per
// parameter: stage 0 16 bytes, 1 8 + 8/N, 2 4 + 12/N, 3 16/N. ZeRO-2 under a
// pipeline schedule keeps the stage's gradient: stage 1's.
uint64_t zero_formula_bytes(size_t params, int N, int zero_stage, bool contiguous);

// The arena's kinds into `m` (bytes), and its total as m.arena.
void set_arena(RankMemory& m, const ArenaKinds& k);

// What one group's communicator counts in a step. `calls` is unknown (none)
// where it depends on timing: never, today.
struct GroupTraffic {
  std::optional<uint64_t> calls = 0;
  uint64_t bytes = 0;
};

struct RankPlan {
  int rank = 0, tp_rank = 0, stage = 0, dp_rank = 0;
  int first_layer = 0, end_layer = 0;  // the stage's layers [first, end)
  RankMemory mem;
  CheckpointBytes checkpoint;
  GroupTraffic tp, dp, pp, cp;
};

struct Plan {
  std::string program;  // the stage program the plan is for
  int ranks = 1, dp = 1, tp = 1, pp = 1, cp = 1, microbatches = 1;
  std::string schedule;
  int virtual_stages = 1;  // chunks of layers a pipeline rank holds
  std::string pass_times;  // zb-v: parallel.pass_times as given ("1,1.3,0.5"); "" when counted
  std::string checkpoint_format;  // train.checkpoint_format
  // The architecture keys that differ from the default GPT-2 as given (not
  // resolved), "key=value" words ("arch=llama n_kv_head=2"); "" for GPT-2.
  std::string variant;
  int zero = 0;              // the ZeRO stage in force (0 with one data-parallel rank)
  bool zero_contiguous = false;
  int rows = 0;              // per replica per step
  std::string corpus, tokenizer;  // data.corpus and data.tokenizer (plan_run)
  int64_t corpus_tokens = 0;      // its tokens, [EOS] included
  int64_t vocab = 0, params_total = 0;
  double flops_per_step = 0;  // the whole model, forward and backward, every rank together
  double bubble = 0;          // the schedule's idle share of a step per stage, F = B = W
  std::string bubble_formula;  // that share as a formula in p and m ("" without a pipeline)
  int peak_in_flight = 0;      // the most microbatches a stage holds at once (activation memory in arenas); 0: none
  std::vector<RankPlan> rank;  // every rank's, or above kPlanRankRecords ranks planned_ranks()
  int ranks_omitted = 0;       // the ranks not in `rank`
  std::optional<StepTime> time;  // with a machine, on the CPU stages: the step-time model's prediction (step_time.h)
};

// The most ranks a plan (and a run) takes, and the most per-rank records a
// plan holds: above kPlanRankRecords ranks it holds the ranks of the first
// and the last data-parallel replica (at most kPlanRankRecords / 2 of each,
// in rank order) and counts the others as omitted, so that a plan of any
// rank count takes milliseconds and bounded memory.
inline constexpr int kMaxRanks = 1 << 20;
inline constexpr int kPlanRankRecords = 1024;
// The ranks a plan of `ranks` ranks, `replica` to a data-parallel replica, holds records of.
std::vector<int> planned_ranks(int ranks, int replica);

// The plan of `c` (its model's vocabulary resolved: resolve_vocab) on
// `ranks` ranks of `stage`, or the refusal a run would give (the same
// std::invalid_argument).
// With `machine`, also the step's predicted time (Plan::time).
Plan make_plan(const RunConfig& c, int ranks, const std::string& program, const MachineModel* machine = nullptr);

// The same for a configuration as given: its vocabulary resolved first from
// data.corpus as a run resolves it (read and tokenized; model.vocab_size 0
// takes the tokenizer's).
Plan plan_run(const RunConfig& c, int ranks, const std::string& program, const MachineModel* machine = nullptr);

// `c`'s architecture keys that differ from the default GPT-2 (Plan::variant).
std::string variant_label(const RunConfig& c);

// The plan as JSON (docs/plan.md: schema "gpt2-plan/1"), and a refusal's.
Json plan_json(const Plan& p);
Json refusal_json(const std::string& program, int ranks, const std::string& error);

}  // namespace gpt2
