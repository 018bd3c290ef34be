// Pipeline schedules over virtual stages (issue 48; docs/pipeline.md,
// "Virtual stages: the schedules"): each rank holds v chunks of layers, and
// a schedule is a list of actions per rank, each on one microbatch and one
// of the rank's chunks. Here: the lists of interleaved 1F1B (Narayanan et
// al. 2021, Megatron-LM's interleaved schedule) and a simulator that runs
// any such lists with given pass times and reports whether they complete,
// their makespan, each rank's bubble and the microbatches each holds. The
// engine (train/schedule/pipeline.h) runs these lists, every schedule's: gpipe's,
// 1f1b's and zb-h1's as one chunk a rank.
#pragma once

#include <string>
#include <vector>

#include "train/schedule/lists.h"
#include "train/schedule/stage_split.h"

namespace gpt2 {

// The placements, interleaved_stage and v_shape_stage, are train/schedule/stage_split.h's.

// Interleaved 1F1B on rank `rank` of `stages` with `v` chunks a rank and
// `m` microbatches (m a multiple of stages when v > 1): forwards in groups
// of p microbatches per chunk, chunk 0 first; backwards the same with the
// chunks reversed; (p - rank - 1) x 2 + (v - 1) x p warm-up forwards, then
// one forward and one backward in turn. v 1 is 1f1b's list. Throws
// std::invalid_argument naming parallel.virtual_stages or
// parallel.microbatches for what it cannot form.
std::vector<ChunkAction> interleaved_1f1b(int stages, int v, int rank, int m);


// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 2 chunks a
// rank in the V shape, the backward split into B and W; every rank's list,
// built by a greedy list scheduler on passes of times `t` (a chunk's F, B
// and W): whenever a rank is free it runs a ready B (the critical path)
// before a ready F (while it holds fewer than `cap` microbatch-chunks: 2 p,
// 1F1B's peak activation memory, each chunk half a stage), and otherwise a
// pending W, which fills what would be bubbles. With unit passes and m >=
// 2p a step takes 6 m + p - 1 units, the p - 1 of the forwards' first
// descent alone idle. The engine builds them with the counted times
// (StageSplit::passes): lists built for equal passes lose much of that when
// B takes longer than F and W less (measured: docs/pipeline.md). Throws
// std::invalid_argument for fewer microbatches than 1 or stages than 1.
std::vector<std::vector<ChunkAction>> zb_v_lists(int stages, int m, int cap = 0, const PassTimes& t = {});

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

// Every rank's list under `kind` on `stages` ranks with `v` chunks a rank
// and `m` microbatches: stage_schedule's as chunk 0 (gpipe, 1f1b, zb-h1;
// v 1), interleaved_1f1b's, or zb_v_lists' (v 2). Throws
// std::invalid_argument for what the schedule cannot form.
// `t`: zb-v's pass times (zb_v_lists).
std::vector<std::vector<ChunkAction>> schedule_lists(ScheduleKind kind, int stages, int v, int m,
                                                     const PassTimes& t = {});
// The placement of `kind`'s chunks: v_shape_stage under zb-v, else interleaved_stage.
StageOf stage_placement(ScheduleKind kind);
// Per chunk of a rank's list: the most microbatches it holds at once (F done,
// W or BW not yet): that chunk's activation arenas.
std::vector<int> chunk_in_flight(const std::vector<ChunkAction>& actions, int v);
// stop_points for lists over virtual stages: before action k when no
// message between ranks is in flight there (a chunk's hand-over to the
// same rank is a copy, not a message). Every rank's list has one length.
std::vector<bool> chunk_stop_points(const std::vector<std::vector<ChunkAction>>& lists, StageOf stage_of, int stages);

}  // namespace gpt2
