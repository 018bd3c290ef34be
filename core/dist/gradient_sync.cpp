#include "dist/gradient_sync.h"

#include <chrono>

namespace gpt2 {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

GradientSync::GradientSync(Communicator& comm, float* grads, size_t count, size_t bucket_floats)
    : comm_(comm), grads_(grads), count_(count), bucket_(bucket_floats), pending_end_(count) {}

void GradientSync::start_grad_sync() {
  pending_end_ = count_;
  seconds_ = 0;
}

void GradientSync::ready(size_t offset) {
  if (bucket_ == 0 || comm_.size() == 1) return;
  const auto t0 = Clock::now();
  if (pending_end_ - offset >= bucket_) {  // a complete bucket: [offset, pending_end_)
    comm_.start_allreduce_sum(grads_ + offset, pending_end_ - offset);
    pending_end_ = offset;
  } else {
    comm_.progress();
  }
  seconds_ += since(t0);
}

void GradientSync::finish_grad_sync() {
  if (comm_.size() == 1) return;
  const auto t0 = Clock::now();
  if (bucket_ == 0) {
    comm_.allreduce_sum(grads_, count_);
  } else {
    if (pending_end_ > 0) comm_.start_allreduce_sum(grads_, pending_end_);
    comm_.wait_all();
    pending_end_ = 0;
  }
  seconds_ += since(t0);
}

ContiguousShardSync::ContiguousShardSync(Communicator& comm, float* params, float* grads, size_t chunk)
    : comm_(comm), params_(params), grads_(grads), chunk_(chunk), begin_(static_cast<size_t>(comm.rank()) * chunk) {}

void ContiguousShardSync::finish_grad_sync() {
  const auto t0 = Clock::now();
  seconds_ = 0;
  comm_.reduce_scatter_sum(grads_, grads_ + begin_, chunk_);
  seconds_ += since(t0);
}

void ContiguousShardSync::finish_update(Backend& be) {
  be.synchronize();  // a device backend's update of the shard is still running
  const auto t0 = Clock::now();
  comm_.all_gather(params_ + begin_, params_, chunk_);
  seconds_ += since(t0);
}

}  // namespace gpt2
