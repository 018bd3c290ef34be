// Gradient reducers: data parallelism's collectives over the flat gradient
// buffer, one object per form (Megatron's param_and_grad_buffer:
// start_grad_sync / finish_grad_sync). A step calls
//   start_grad_sync()            before the backward: nothing in flight
//   ready(offset)                from the backward (model/model.h,
//                                GradReadyHook): a suffix is final
//   finish_grad_sync()           after the backward
//   (the optimizer's update, over scope() of the buffer)
//   finish_update(be)            after the update
// GradientSync sums the whole buffer over the ranks (allreduce in buckets);
// ContiguousShardSync is ZeRO-1's reduce-scatter of equal contiguous shards
// and all-gather of the updated parameters. ZeRO-2/3's unit-aligned shards
// are parallel/zero.h.
#pragma once

#include <cstddef>
#include <utility>

#include "parallel/comm.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace gpt2 {

class GradReducer : public GradReadyHook {
 public:
  void ready(size_t) override {}
  virtual void start_grad_sync() {}
  virtual void finish_grad_sync() = 0;
  virtual void finish_update(Backend&) {}
  // Seconds inside communication calls since start_grad_sync().
  double seconds() const { return seconds_; }

 protected:
  double seconds_ = 0;
};

// Sums the flat gradient buffer over ranks, in place, without packing copies.
// bucket_floats == 0: one blocking allreduce in finish_grad_sync().
// bucket_floats > 0: as backward finishes each suffix, complete buckets of at
// least that many floats are started non-blocking, overlapping the rest of
// the backward pass; finish_grad_sync() starts the remainder and waits.
class GradientSync final : public GradReducer {
 public:
  GradientSync(Communicator& comm, float* grads, size_t count, size_t bucket_floats);
  void start_grad_sync() override;   // before backward: nothing is in flight
  void ready(size_t offset) override;
  void finish_grad_sync() override;  // after backward: grads hold the sum over ranks
  size_t bytes() const { return count_ * sizeof(float); }

 private:
  Communicator& comm_;
  float* grads_;
  size_t count_, bucket_;
  size_t pending_end_ = 0;  // grads[pending_end_, count_) are already started
};

// ZeRO-1 over `comm` (the data-parallel group): the buffers are padded to
// size() x chunk floats; rank r's shard is [r x chunk, (r+1) x chunk).
// finish_grad_sync() reduce-scatters the gradient in place (rank r's chunk
// holds the sum; the rest is stale), finish_update() all-gathers the
// parameters every rank updated in its chunk.
class ContiguousShardSync final : public GradReducer {
 public:
  ContiguousShardSync(Communicator& comm, float* params, float* grads, size_t chunk);
  void finish_grad_sync() override;
  void finish_update(Backend& be) override;

 private:
  Communicator& comm_;
  float *params_, *grads_;
  size_t chunk_, begin_;
};

// train.deterministic's reduce-scatter (docs/determinism.md): [base, base +
// count) is this rank's part of a sum, cut into comm.size() (a power of
// two) blocks of `chunk` floats, block p at p chunk, the last ones cut short
// at `count` (possibly empty). On return this rank's block, {offset from
// base, length}, holds the sum over the ranks, in the canonical tree's
// order; the other blocks are spent. Recursive halving with partners rank
// ^ 1, rank ^ 2, ...: at each level a rank keeps the blocks whose bit
// matches its own and adds the partner's copy of them, so level k adds the
// sums of two aligned groups of 2^k ranks, as recursive doubling and the
// serial tree do (a + b == b + a: both partners agree). `scratch` holds a
// chunk. Allocates nothing.
std::pair<size_t, size_t> canonical_reduce_scatter(Communicator& comm, float* base, size_t count, size_t chunk,
                                                   float* scratch);

// train.deterministic's allreduce (docs/determinism.md): recursive doubling
// over `comm` (a power of two ranks; partners rank ^ 1, rank ^ 2, ...), each
// pair adding the same two values (a + b == b + a), so every rank ends with
// the canonical tree's sum: of the loss sums (returned, as a double), and,
// when `grads` is given, of the n floats there (in place; `recv` holds n
// floats, the partner's).
double canonical_allreduce(Backend& be, Communicator& comm, double loss_sum, float* grads, size_t n, float* recv);

}  // namespace gpt2
