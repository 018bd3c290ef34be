// The pipeline's keys resolved (parallel.pp, virtual_stages, stage_layers,
// schedule, pass_times): the layer counts per (virtual) stage and the
// StageSplit the schedule runs (train/schedule/stage_split.h). Called by the
// resolver alone (train/resolve/layout.cpp), once per start.
#pragma once

#include <vector>

#include "train/config/run_config.h"
#include "train/schedule/stage_split.h"

namespace gpt2 {

// parallel.stage_layers resolved for `c` (its parallel.pp x
// parallel.virtual_stages stages over model.n_layer layers): one count per
// (virtual) stage, in layer order. Throws std::invalid_argument naming
// parallel.stage_layers for counts that are not that many positive numbers
// summing to model.n_layer, and naming parallel.virtual_stages when the
// default rule's equal chunks do not divide the layers.
std::vector<int> stage_layer_counts(const RunConfig& c);

// From `counts`, stage_layer_counts(c)'s (checked once: train/resolve/layout.h checked_stage_counts).
StageSplit stage_split(const RunConfig& c, std::vector<int> counts);

}  // namespace gpt2
