// The stage programs' two entry points, shared by every stage: train (with
// evaluation, checkpoints, the metrics stream and a final generation) and
// generate (from a checkpoint). A stage supplies its backend kind and its
// communicator; everything else is here, once.
#pragma once

#include <string>

#include "parallel/comm.h"
#include "kernels/backend.h"
#include "train/config/run_config.h"
#include "train/run/requests.h"
#include "train/config/threads.h"

namespace gpt2 {

// Both throw std::invalid_argument for bad input (configuration, files) and
// std::runtime_error for failures while running; nothing already written is
// lost: results appear under their final names only when complete.
void run_train(const TrainRequest& req, const ProgramContext& ctx);
void run_generate(const GenerateRequest& req, const ProgramContext& ctx);
// Prints one JSON object on stdout (rank 0): the loss over `data` on the
// configured layout (any layout: the training step's forward, its mean over
// the global batch, as the training loop's validation computes it) and
// the multiple-choice result (on rank 0 alone with the whole model, as
// generate runs; the other ranks wait).
void run_evaluate(const EvaluateRequest& req, const ProgramContext& ctx);
// Writes the initial weights as a model checkpoint (the `init` command):
// computed by every rank in its backend's memory, read back, checked equal
// across ranks, written by rank 0.
void run_init(const InitRequest& req, const ProgramContext& ctx);

}  // namespace gpt2
