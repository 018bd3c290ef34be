#include "parallel/gradient_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

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

std::pair<size_t, size_t> canonical_reduce_scatter(Communicator& comm, float* base, size_t count, size_t chunk,
                                                   float* scratch) {
  const int n = comm.size(), me = comm.rank();
  if ((n & (n - 1)) != 0) {
    throw std::invalid_argument(fmt::format("canonical_reduce_scatter: {} ranks (a power of two)", n));
  }
  const auto lo = [&](int p) { return std::min(static_cast<size_t>(p) * chunk, count); };
  const auto len = [&](int p) { return std::min(lo(p) + chunk, count) - lo(p); };
  for (int bit = 1; bit < n; bit <<= 1) {
    const int partner = me ^ bit;
    // The blocks still held agree with this rank in the bits below `bit`; keep those agreeing in `bit` too.
    for (int p = me & (bit - 1); p < n; p += bit) {
      if ((p & bit) != (me & bit)) continue;
      const int q = p ^ bit;
      comm.send_recv(base + lo(q), len(q), partner, scratch, len(p), partner);
      float* mine = base + lo(p);
      for (size_t i = 0; i < len(p); ++i) mine[i] = mine[i] + scratch[i];
    }
  }
  return {lo(me), len(me)};
}

double canonical_allreduce(Backend& be, Communicator& comm, double loss_sum, float* grads, size_t n, float* recv) {
  const Tensor g(grads, {static_cast<int64_t>(n)}), other_g(recv, {static_cast<int64_t>(n)});
  for (int bit = 1; bit < comm.size(); bit <<= 1) {
    const int partner = comm.rank() ^ bit;
    double other = 0;
    comm.send_recv(&loss_sum, 1, partner, &other, 1, partner);
    loss_sum = loss_sum + other;
    if (grads != nullptr) {
      comm.send_recv(grads, n, partner, recv, n, partner);
      be.residual_forward(g, g, other_g);
    }
  }
  return loss_sum;
}

}  // namespace gpt2
