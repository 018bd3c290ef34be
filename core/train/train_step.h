// One training step, the one definition the stages, bench/train_step and the
// tests all call (Megatron's forward_backward_func, reduced to what data
// parallelism needs):
//   zero the gradients
//   forward on this rank's rows of the global batch
//   start the gradient sync (dist/gradient_sync.h)
//   backward, whose finished gradient buckets start their allreduce
//   finish the gradient sync: every rank holds the sum over ranks
//   the loss: the mean over the global batch (one scalar allreduce)
//   the optimizer update (clipping and Adam), unless the loss is not finite
//   or above the bound (then the step throws: the run diverged)
// With one process the communicator and the sync are no-ops.
//
// Pipeline stages and microbatches (`pipe`, train/pipeline.h) replace the
// forward and backward by the schedule's; the replica's loss comes from the
// last stage (a sum over the pipeline group). ZeRO-1 (`zero`) replaces the
// gradient allreduce by a reduce-scatter over the data-parallel group, the
// update by this rank's shard's, and ends with an all-gather of the
// parameters. Neither overlaps the gradient sum with the backward pass.
#pragma once

#include <vector>

#include <cstdint>
#include <memory>

#include "dist/comm.h"
#include "dist/gradient_sync.h"
#include "kernels/backend.h"
#include "model/activations.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "train/pipeline.h"

namespace gpt2 {

struct ZeroShard;

// What a step works on; all owned elsewhere, bound once per run.
struct StepContext {
  Backend& be;
  Gpt2& model;
  Optimizer& opt;
  Activations& acts;   // (rows, T) of this rank
  GradientSync& sync;  // over `comm`
  Communicator& comm;
  int batch_size;      // global rows per step (rows * ranks)
  double max_loss = 0;  // a loss above it (or not finite) stops training: diverged; 0 = no bound
  PipelineEngine* pipe = nullptr;   // pipeline stages or microbatches; null: one forward and backward
  Communicator* pp = nullptr;       // the pipeline group (with pipe)
  const ZeroShard* zero = nullptr;  // ZeRO-1's shard over `comm`; null: the gradient allreduce
  bool layer_norms = false;         // fill StepResult::layer_grad_norms (a whole model only)
};

struct StepResult {
  double loss = 0;    // mean over the global batch, before the update
  StepStats update;   // learning rate, gradient norm, clip factor
  double comm_s = 0;  // seconds inside the gradient and loss collectives
  std::vector<double> layer_grad_norms;  // with layer_norms: embeddings, layer 0 .. L-1, head (before clipping)
};

// The 2-norm of the gradient per group of a whole model: the embeddings,
// each layer, then the final norm and head; L + 2 values.
std::vector<double> layer_grad_norms(Backend& be, const Gpt2& model);

// Trains one step on `inputs` and `targets` (host arrays of acts.B rows of
// acts.T tokens: this rank's rows). Throws std::runtime_error naming the
// step when the loss is not finite (the update is then not applied).
StepResult train_step(const StepContext& s, const int32_t* inputs, const int32_t* targets);

// The mean loss of `batches` batches from `next` (each fills inputs and
// targets), forward only, over the global batch: the validation loss.
template <typename NextBatch>
double evaluate(const StepContext& s, int batches, int32_t* inputs, int32_t* targets, NextBatch&& next);

// The global mean of a per-rank mean over `rows` of `batch_size` rows.
double global_mean(Communicator& comm, double local_mean, int rows, int batch_size);

// The step of one process, with its own local communicator and gradient
// sync (both no-ops): what tools and tests train with outside a stage.
class LocalTrainStep {
 public:
  LocalTrainStep(Backend& be, Gpt2& model, Optimizer& opt, Activations& acts);
  // The context refers to the members: not copyable or movable.
  LocalTrainStep(const LocalTrainStep&) = delete;
  LocalTrainStep& operator=(const LocalTrainStep&) = delete;
  StepResult operator()(const int32_t* inputs, const int32_t* targets) { return train_step(ctx_, inputs, targets); }

 private:
  std::unique_ptr<Communicator> comm_;
  GradientSync sync_;
  StepContext ctx_;
};

template <typename NextBatch>
double evaluate(const StepContext& s, int batches, int32_t* inputs, int32_t* targets, NextBatch&& next) {
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    next(inputs, targets);
    if (s.pipe) {
      const double local = s.pipe->forward_loss(inputs, targets);
      sum += s.pp && s.pp->size() > 1 ? s.pp->allreduce_sum(local) : local;
    } else {
      sum += gpt2_forward(s.be, s.model, s.acts, inputs, targets);
    }
  }
  return global_mean(s.comm, sum / batches, s.pipe ? s.pipe->rows() : s.acts.B, s.batch_size);
}

}  // namespace gpt2
