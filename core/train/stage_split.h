// The pipeline's stage split (parallel.stage_layers; docs/pipeline.md,
// "Stage balance"): how many of the model's layers each stage holds,
// resolved once from the configuration. Empty, the default rule
// (StageLayers::of: L / p each, the first L % p stages one more); counts as
// given; or "auto", placed by counted cost so that the last stage, which
// carries the head and the loss, is not the slowest by construction.
#pragma once

#include <vector>

#include "model/config.h"
#include "train/run_config.h"

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

// parallel.stage_layers resolved for `c` (its parallel.pp stages over
// model.n_layer layers): one count per stage. Throws std::invalid_argument
// naming parallel.stage_layers for counts that are not pp positive numbers
// summing to model.n_layer.
std::vector<int> stage_layer_counts(const RunConfig& c);

// Each stage's counted cost under `counts` (stage_costs'), for the plan and the log.
std::vector<double> stage_split_costs(const std::vector<int>& counts, const StageCosts& k);

}  // namespace gpt2
