// The schedules' action lists (train/schedule/pipeline.h runs them): what
// each pipeline stage does, in order, over a step's microbatches (F, B and
// W of each), where a step may stop, and the microbatches a list holds at
// once. One chunk a rank here; several (virtual stages) in
// train/schedule/virtual_schedule.h, which builds on these.
#pragma once

#include <cstdint>
#include <vector>

#include "train/config/run_config.h"

namespace gpt2 {

enum class PipeOp : uint8_t {
  kForward,         // F
  kBackward,        // B and W together (gpipe, 1f1b)
  kBackwardInput,   // B (zb-h1)
  kBackwardWeight,  // W (zb-h1)
};
enum class PipePhase : uint8_t { kWarmup, kSteady, kCooldown };
const char* to_string(PipeOp op);     // "F", "BW", "B", "W"
const char* to_string(PipePhase ph);  // "warm-up", "steady", "cool-down"

struct PipeAction {
  PipeOp op;
  int mb;  // microbatch 0 .. m-1
  PipePhase phase;
  bool operator==(const PipeAction&) const = default;
};

// One action of a rank over virtual stages (train/schedule/virtual_schedule.h): F,
// BW (B and W), B or W on microbatch `mb` and the rank's chunk `chunk` (0 ..
// v-1, in layer order); one chunk a rank: chunk 0, a PipeAction.
struct ChunkAction {
  PipeOp op;
  int mb;
  int chunk;
  bool operator==(const ChunkAction&) const = default;
};

// The actions of stage `stage` of `stages` over `m` microbatches, in order.
std::vector<PipeAction> stage_schedule(ScheduleKind kind, int stages, int stage, int m);

// The most microbatches a list holds at once (forward done, weight gradient
// not yet): the activation arenas the stage needs.
int max_in_flight(const std::vector<PipeAction>& actions);

// Where a step of this schedule may stop (a stop signal agreed by every
// rank, train/schedule/preemption.h): before action k (1 <= k < the actions per
// stage) when, on every stage, no message between stages is in flight
// there (each one sent before action k is also received before it, and
// none received before it is sent after it) and no stage has begun its last
// whole backward (its gradients' sum may have started). Entry k of the
// result; entry 0 is false. Every action under gpipe; every other one under
// 1f1b on 2 stages; fewer on deeper pipelines; all but the first with one
// stage (no messages).
std::vector<bool> stop_points(ScheduleKind kind, int stages, int m);

}  // namespace gpt2
