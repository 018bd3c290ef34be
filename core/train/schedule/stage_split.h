// The pipeline's stage split (parallel.stage_layers; docs/pipeline.md,
// "Stage balance"): how many of the model's layers each stage holds,
// resolved once from the configuration. Empty, the default rule
// (StageLayers::of: L / p each, the first L % p stages one more); counts as
// given; or "auto", placed by counted cost so that the last stage, which
// carries the head and the loss, is not the slowest by construction.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace gpt2 {

// What one training step costs per unit of the model, counted with the op
// table's costs (kernels/ops/op_costs.h: each op's forward and backward at
// the step's shapes), as FLOPs plus bytes at kFlopsPerByte: a layer (every
// layer has the same shapes), the embedding (with the first stage) and the
// head with its final norm and the loss (with the last).
struct StageCosts {
  double layer = 0, embed = 0, head = 0;
};
// A CPU core's balance of arithmetic to memory traffic: the bytes of a
// memory-bound op (a norm, the softmax, the loss) count as this many FLOPs.
inline constexpr double kFlopsPerByte = 8.0;
StageCosts stage_costs(const Gpt2Config& model, int rows, int T);

// The contiguous split of `layers` layers into `stages` stages (each at
// least one) that minimises the costliest stage, the embedding's cost on
// the first and the head's on the last; among equals, the one nearest the
// default rule's (the least moved layers), then the earliest.
std::vector<int> balance_stages(int layers, int stages, const StageCosts& k);

// The times of a chunk's passes, relative: F, B (the input gradients), W
// (the weight gradients); a whole backward (BW) takes B + W.
struct PassTimes {
  double forward = 1, input = 1, weight = 1;
};
// A layer's passes as counted by the op table (stage_costs' measure): F
// the forward's ops, W the weight-gradient products (each a forward
// product's FLOPs and bytes), B the rest of the backward; scaled so that F
// is 1.
PassTimes layer_pass_costs(const Gpt2Config& model, int rows, int T);

// Where chunk `chunk` of rank `rank` of `stages` sits among the virtual
// stages. Interleaved: stage chunk x p + rank (rank r holds stages r, r + p,
// ...). ZB-V's V shape (chunk 0 or 1): rank r holds stages r and 2 p - 1 -
// r, so the forward runs down the ranks and back up, and rank 0 holds the
// first stage and the last. Layers run through the virtual stages in order.
int interleaved_stage(int stages, int rank, int chunk);
int v_shape_stage(int stages, int rank, int chunk);
using StageOf = int (*)(int stages, int rank, int chunk);

// Where the (virtual) stages sit on the pipeline's ranks, resolved once
// (RunState, RunLayout): with v chunks a rank, interleaved (Megatron's
// placement: rank r holds stages r, r + p, ..., r + (v - 1) p) or, under
// zb-v, in the V shape (rank r holds stages r and 2 p - 1 - r, so rank 0
// holds the first and the last). A rank's chunk c is its c-th stage in
// layer order: the schedules' ChunkAction::chunk (train/schedule/virtual_schedule.h).
struct StageSplit {
  std::vector<int> counts;  // layers per stage, in layer order: ranks x chunks() of them
  int ranks = 1;            // parallel.pp
  bool v_shape = false;
  PassTimes passes;         // zb-v: the times its lists are built for (layer_pass_costs at a microbatch)

  int chunks() const { return counts.empty() ? 1 : static_cast<int>(counts.size()) / ranks; }
  StageOf placement() const { return v_shape ? v_shape_stage : interleaved_stage; }
  std::vector<int> stages_of(int rank) const;  // placement()'s, chunk by chunk: ascending
  int rank_of(int stage) const;
  int chunk_of(int stage) const;  // its index among stages_of(rank_of(stage))
  // The layers rank `rank` holds (StageLayers::of_stages); the whole model without counts.
  StageLayers held(int rank) const;
};

// Each stage's counted cost under `counts` (stage_costs'), for the plan and the log.
std::vector<double> stage_split_costs(const std::vector<int>& counts, const StageCosts& k);

}  // namespace gpt2
