#include "dist/gradient_sync.h"

#include <chrono>

namespace gpt2 {

GradientSync::GradientSync(Communicator& comm, float* grads, size_t count, size_t bucket_floats)
    : comm_(comm), grads_(grads), count_(count), bucket_(bucket_floats), pending_end_(count) {}

void GradientSync::start_grad_sync() {
  pending_end_ = count_;
  seconds_ = 0;
}

void GradientSync::ready(size_t offset) {
  if (bucket_ == 0 || comm_.size() == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (pending_end_ - offset >= bucket_) {  // a complete bucket: [offset, pending_end_)
    comm_.start_allreduce_sum(grads_ + offset, pending_end_ - offset);
    pending_end_ = offset;
  } else {
    comm_.progress();
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradientSync::finish_grad_sync() {
  if (comm_.size() == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (bucket_ == 0) {
    comm_.allreduce_sum(grads_, count_);
  } else {
    if (pending_end_ > 0) comm_.start_allreduce_sum(grads_, pending_end_);
    comm_.wait_all();
    pending_end_ = 0;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace gpt2
