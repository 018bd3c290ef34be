// Pipeline schedules over virtual stages (issue 48; docs/pipeline.md,
// "Virtual stages: the schedules"): each rank holds v chunks of layers, and
// a schedule is a list of actions per rank, each on one microbatch and one
// of the rank's chunks. Here: the lists of interleaved 1F1B (Narayanan et
// al. 2021, Megatron-LM's interleaved schedule) and a simulator that runs
// any such lists with given pass times and reports whether they complete,
// their makespan, each rank's bubble and the microbatches each holds. The
// engine (train/pipeline.h) runs one chunk per rank so far; these are the
// schedules it will run, checked first as data.
#pragma once

#include <string>
#include <vector>

#include "train/pipeline.h"

namespace gpt2 {

// One action of a rank over virtual stages: F, BW (B and W), B or W on
// microbatch `mb` and the rank's chunk `chunk` (0 .. v-1).
struct ChunkAction {
  PipeOp op;
  int mb;
  int chunk;
  bool operator==(const ChunkAction&) const = default;
};

// Where chunk `chunk` of rank `rank` sits in the model: interleaved
// placement, virtual stage chunk x p + rank (rank r holds stages r, r + p,
// ...); layers run through the virtual stages in order.
int interleaved_stage(int stages, int rank, int chunk);

// Interleaved 1F1B on rank `rank` of `stages` with `v` chunks a rank and
// `m` microbatches (m a multiple of stages when v > 1): forwards in groups
// of p microbatches per chunk, chunk 0 first; backwards the same with the
// chunks reversed; (p - rank - 1) x 2 + (v - 1) x p warm-up forwards, then
// one forward and one backward in turn. v 1 is 1f1b's list. Throws
// std::invalid_argument naming parallel.virtual_stages or
// parallel.microbatches for what it cannot form.
std::vector<ChunkAction> interleaved_1f1b(int stages, int v, int rank, int m);

// Where chunk `chunk` (0 or 1) of rank `rank` sits under ZB-V's V shape:
// rank r holds virtual stages r and 2 p - 1 - r, so the forward runs down
// the ranks and back up, and rank 0 holds the first stage and the last.
int v_shape_stage(int stages, int rank, int chunk);

// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 2 chunks a
// rank in the V shape, the backward split into B and W; every rank's list,
// built by a greedy list scheduler on unit passes (F = B = W = 1): at each
// time a free rank runs a ready B (the critical path) before a ready F
// (while it holds fewer than `cap` microbatch-chunks: 2 p, 1F1B's peak
// activation memory, each chunk half a stage), and otherwise a pending W,
// which fills what would be bubbles. With m >= 2p a step takes 6 m + p - 1
// units, the p - 1 of the forwards' first descent alone idle. Throws std::invalid_argument for
// fewer microbatches than 1 or stages than 1.
std::vector<std::vector<ChunkAction>> zb_v_lists(int stages, int m, int cap = 0);

// Unit times of the passes (of one chunk): F, B (the input gradients), W (the
// weight gradients); a whole backward (BW) takes B + W.
struct PassTimes {
  double forward = 1, input = 1, weight = 1;
};

struct ScheduleRun {
  bool complete = false;       // every action ran (false: the lists wait on each other: a deadlock)
  std::string stuck;           // where, when not complete
  double makespan = 0;         // the step's time
  std::vector<double> bubble;  // per rank: the share of the makespan it idles
  std::vector<int> peak;       // per rank: the most microbatch-chunks held at once (F done, W not yet)
};

// Runs the ranks' lists (lists[r], each rank in its order, an action
// starting once its rank is free and its inputs are ready): F of virtual
// stage s after F of stage s - 1 (same microbatch); B (or BW) of stage s
// after B of stage s + 1 and F of stage s; W after B. `stage_of(rank,
// chunk)` places the chunks; `stages_total` virtual stages in all.
ScheduleRun simulate_schedule(const std::vector<std::vector<ChunkAction>>& lists, int stages_total,
                              int (*stage_of)(int stages, int rank, int chunk), int stages, const PassTimes& t);

}  // namespace gpt2
