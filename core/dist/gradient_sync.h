// GradientSync: data parallelism's one collective per step, the sum of the
// flat gradient buffer over the ranks, started as the backward pass finishes
// each suffix of the buffer (model/model.h, GradReadyHook).
#pragma once

#include <cstddef>

#include "dist/comm.h"
#include "model/model.h"

namespace gpt2 {

// Sums the flat gradient buffer over ranks, in place, without packing copies.
// bucket_floats == 0: one blocking allreduce in finish_grad_sync().
// bucket_floats > 0: as backward finishes each suffix, complete buckets of at
// least that many floats are started non-blocking, overlapping the rest of
// the backward pass; finish_grad_sync() starts the remainder and waits.
class GradientSync final : public GradReadyHook {
 public:
  GradientSync(Communicator& comm, float* grads, size_t count, size_t bucket_floats);
  void start_grad_sync();   // before backward: nothing is in flight
  void ready(size_t offset) override;
  void finish_grad_sync();  // after backward: grads hold the sum over ranks
  double seconds() const { return seconds_; }  // time inside communication calls this step
  size_t bytes() const { return count_ * sizeof(float); }

 private:
  Communicator& comm_;
  float* grads_;
  size_t count_, bucket_;
  size_t pending_end_ = 0;  // grads[pending_end_, count_) are already started
  double seconds_ = 0;
};

}  // namespace gpt2
