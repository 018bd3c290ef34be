// The step-time model (docs/prediction.md): a run's step on a machine,
// predicted from the same RunLayout the run is built from and the plan's
// counts, with the machine's measured kernels and links (machine.h).
//
// Each rank's work in one step, at the shapes it runs them: the forward, the
// backward (input and weight gradients, the forward again under full
// recomputation) of its layers at its arena's rows, cut by tensor
// parallelism; the embedding on the first stage and the head and loss on the
// last; the optimizer over the parameters it updates and the gradient norm;
// train.deterministic's tree adds. Each op's time is the machine's measured
// time of the same op at its nearest measured shape, scaled by the op
// table's count (FLOPs for products and attention, bytes for the rest). Each
// group's messages (the plan's calls and bytes) cost alpha + beta over the
// node's link with the collective's factor. Under a pipeline schedule the
// engine's own action lists run through the schedule simulator
// (train/schedule/virtual_schedule.h) with the slowest stage's pass times.
// No overlap of communication with compute is modelled: the CPU stages
// send while they wait.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/resolve/layout.h"
#include "train/resolve/machine.h"
#include "train/schedule/lists.h"
#include "util/json.h"

namespace gpt2 {

// What the plan says one rank holds and sends, as the model reads it
// (make_plan fills it from each RankPlan).
struct Messages {
  uint64_t calls = 0, bytes = 0;
};
struct RankWork {
  int rank = 0, stage = 0;
  uint64_t params = 0;          // its model's parameters (its tp shard of its stage)
  uint64_t updated_params = 0;  // the parameters its optimizer updates (its moments' floats)
  Messages tp, dp, pp, cp;      // per group, one step's
};

struct RankTime {
  int rank = 0, stage = 0;
  double compute_s = 0;  // its kernels: forward, backward, optimizer
  double comm_s = 0;     // its messages and collectives
  double idle_s = 0;     // the rest of the step: the pipeline's bubble, waits for slower ranks
};

struct StepTime {
  std::string machine;
  int threads = 1;  // per rank
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;                  // of the machine's peak over every rank; 0 without a peak
  double bubble = 0;               // the simulated schedule's idle share per stage (pipelines), else 0
  std::vector<RankTime> ranks;     // the plan's ranks, in its order
  std::vector<std::string> notes;  // what the model leaves out for this layout
};

// Throws std::invalid_argument naming what the machine lacks (an op it has
// no timing of at any thread count, a link without a bandwidth).
// `lists`: every pipeline rank's action list (schedule_lists, made once by
// the plan); empty without a pipeline.
StepTime predict_step(const RunLayout& run, const std::vector<RankWork>& ranks,
                      const std::vector<std::vector<ChunkAction>>& lists, double flops_per_step,
                      const MachineModel& machine);

// The plan's "time" object (docs/plan.md).
Json step_time_json(const StepTime& t);

}  // namespace gpt2
