// One training step per layout, chosen once when the run is laid out
// (Megatron's get_forward_backward_func): the step functions below are the
// one definition the stages, bench/train_step and the tests call.
//
//   data_parallel_step  one forward and backward on this rank's rows; the
//                       reducer's collective overlaps the backward (bucketed
//                       allreduce, parallel/gradient_sync.h) or follows it
//                       (ZeRO-1's reduce-scatter, then an all-gather of the
//                       parameters after the update). One process: no-ops.
//   pipelined_step      pipeline stages or microbatches (train/schedule/pipeline.h):
//                       the schedule's forwards and backwards, then the
//                       reducer (allreduce or ZeRO-1), no overlap; the
//                       replica's loss comes from the last stage.
//   sharded_step        ZeRO-2/3 (parallel/zero.h): the passes acquire and
//                       release each unit; gradients are reduce-scattered
//                       unit by unit as the backward finishes them; the
//                       update works on this rank's shard.
//   deterministic_step  train.deterministic (docs/determinism.md): the
//                       canonical chunks one at a time, each gradient in its
//                       own buffer, added in one tree, then the replicas'
//                       canonical sum (or scatter into ZeRO's shards).
//   deterministic_pipelined_step  the same under a schedule: the engine's
//                       microbatches are the chunks (MicrobatchSum::kTree).
// Every step: the loss is the mean over the global batch (one scalar
// allreduce); the update (clipping and Adam) is skipped and the step throws
// when the loss is not finite or above the bound (the run diverged).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "parallel/gradient_sync.h"
#include "parallel/zero.h"
#include "kernels/backend.h"
#include "model/activations.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "train/schedule/pipeline.h"

namespace gpt2 {

// What every step function works with; all owned elsewhere, bound once per run.
struct StepParts {
  Backend& be;
  Gpt2& model;
  Optimizer& opt;
  Communicator& dp;      // the data-parallel group: the gradients' and the loss's sums
  int batch_size;        // global rows per step (rows x data-parallel ranks)
  double max_loss = 0;   // a loss above it (or not finite) stops training: diverged; 0 = no bound
  bool layer_norms = false;  // fill StepResult::layer_grad_norms (a whole model only)
  // Asked at the step's stop points (StepSpec::stop_in_step; null: never): a stop abandons the step
  // with StepAbandoned, nothing updated.
  StepInterrupt* interrupt = nullptr;
};

struct StepResult {
  double loss = 0;    // mean over the global batch, before the update
  StepStats update;   // learning rate, gradient norm, clip factor
  double comm_s = 0;  // seconds inside the gradient, parameter and loss collectives
  std::vector<double> layer_grad_norms;  // with layer_norms: embeddings, layer 0 .. L-1, head (before clipping)
};

class StepFunction {
 public:
  explicit StepFunction(const StepParts& parts) : parts_(parts) {}
  virtual ~StepFunction() = default;
  StepFunction(const StepFunction&) = delete;
  StepFunction& operator=(const StepFunction&) = delete;

  // Trains one step on `inputs` and `targets` (host arrays of rows() rows of
  // seq_len() tokens: this rank's rows). Collective over every group of the
  // layout. Throws std::runtime_error naming the step when the loss is not
  // finite or above the bound (the update is then not applied).
  virtual StepResult step(const int32_t* inputs, const int32_t* targets) = 0;
  // Forward only: this replica's mean loss over its rows (validation); a
  // step whose global_forward() is true returns the global batch's loss itself.
  virtual double forward_loss(const int32_t* inputs, const int32_t* targets) = 0;
  virtual bool global_forward() const { return false; }
  virtual int rows() const = 0;
  virtual int seq_len() const = 0;
  const StepParts& parts() const { return parts_; }

 protected:
  StepParts parts_;
};

std::unique_ptr<StepFunction> data_parallel_step(const StepParts& parts, Activations& acts, GradReducer& reducer);
std::unique_ptr<StepFunction> pipelined_step(const StepParts& parts, PipelineEngine& pipe, Communicator& pp,
                                             GradReducer& reducer);
std::unique_ptr<StepFunction> sharded_step(const StepParts& parts, Activations& acts, ZeroShards& shards);
// train.deterministic (docs/determinism.md): the global batch is cut into
// `chunks` canonical chunks of acts.B rows (this rank holds `chunks /
// parts.dp.size()` consecutive ones). Each chunk's forward and backward runs
// alone; the chunks' gradients and losses are added in one balanced binary
// tree, this rank's subtree first, then across the data-parallel ranks by
// recursive doubling over send_recv (parallel/gradient_sync.h,
// canonical_allreduce: partners rank ^ 1, rank ^ 2, ...; each pair adds the
// same two values, and addition commutes). Any power-of-two
// data-parallel size that divides `chunks` gives the bits of one rank.
// With ZeRO (`shards`) the tree's last levels are a reduce-scatter
// (canonical_reduce_scatter, the same sums) into this rank's shard, and the
// update covers the shard: the gradient norm's exact sum
// (UpdateScope::exact_norm) makes the clipping serial's.
struct TreeShards {
  size_t chunk = 0;                     // ZeRO-1 (and 2): the contiguous shard's floats; 0 without
  GradReducer* after_update = nullptr;  // with `chunk`: its all-gather of the updated parameters
  ZeroShards* zero3 = nullptr;          // ZeRO-3: the units' gathers, and the gradient shard
};
std::unique_ptr<StepFunction> deterministic_step(const StepParts& parts, Activations& acts, int chunks,
                                                const TreeShards& shards = {});
// Under a pipeline: `pipe` built with its tree (PipelineEngine, `tree`), its
// microbatches this rank's chunks / dp.size() canonical chunks; each stage's
// gradient is the tree's over them, then the data-parallel ranks' recursive
// doubling; the loss likewise (from the last stage).
// With ZeRO-1 or 2 (`shards`, contiguous) the stage's gradient is then
// scattered into the shards as deterministic_step's.
std::unique_ptr<StepFunction> deterministic_pipelined_step(const StepParts& parts, PipelineEngine& pipe,
                                                          Communicator& pp, int chunks, const TreeShards& shards = {});
// The floats of its working buffers: the tree's gradient-sized buffers (one
// per level of a rank's subtree of chunks / dp leaves, and its sum unless
// `root_in_model`: the model's own gradient, as everywhere but ZeRO-3) for a
// model of `n` parameters, and the buffer a partner's gradient (or, with a
// contiguous ZeRO shard of `shard_chunk` floats, a block) is received into.
uint64_t deterministic_buffer_floats(size_t n, int chunks, int dp, size_t shard_chunk, bool root_in_model);

// The 2-norm of the gradient per unit of a whole model: the embeddings,
// each layer, then the final norm and head; L + 2 values.
std::vector<double> layer_grad_norms(Backend& be, const Gpt2& model);

// The mean loss of `batches` batches from `next` (each fills inputs and
// targets), forward only, over the global batch: the validation loss.
template <typename NextBatch>
double evaluate(StepFunction& f, int batches, int32_t* inputs, int32_t* targets, NextBatch&& next);

// The global mean of a per-rank mean over `rows` of `batch_size` rows.
double global_mean(Communicator& comm, double local_mean, int rows, int batch_size);

// The step of one process, with its own local communicator and gradient
// sync (both no-ops): what tools and tests train with outside a stage.
class LocalTrainStep {
 public:
  LocalTrainStep(Backend& be, Gpt2& model, Optimizer& opt, Activations& acts);
  LocalTrainStep(const LocalTrainStep&) = delete;
  LocalTrainStep& operator=(const LocalTrainStep&) = delete;
  StepResult operator()(const int32_t* inputs, const int32_t* targets) { return step_->step(inputs, targets); }

 private:
  std::unique_ptr<Communicator> comm_;
  GradientSync sync_;
  std::unique_ptr<StepFunction> step_;
};

template <typename NextBatch>
double evaluate(StepFunction& f, int batches, int32_t* inputs, int32_t* targets, NextBatch&& next) {
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    next(inputs, targets);
    sum += f.forward_loss(inputs, targets);
  }
  if (f.global_forward()) return sum / batches;
  return global_mean(f.parts().dp, sum / batches, f.rows(), f.parts().batch_size);
}

}  // namespace gpt2
