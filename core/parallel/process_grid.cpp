#include "parallel/process_grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace gpt2 {

void CommGroup::allreduce_sum(Tensor x) {
  const auto t0 = std::chrono::steady_clock::now();
  comm_.allreduce_sum(x.data, static_cast<size_t>(x.numel()));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CommGroup::allreduce_sum(double x) {
  const auto t0 = std::chrono::steady_clock::now();
  const double sum = comm_.allreduce_sum(x);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

void CommGroup::all_gather(Tensor shard, Tensor full) {
  const auto t0 = std::chrono::steady_clock::now();
  comm_.all_gather(shard.data, full.data, static_cast<size_t>(shard.numel()));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommGroup::reduce_scatter_sum(Tensor full, Tensor shard) {
  const auto t0 = std::chrono::steady_clock::now();
  comm_.reduce_scatter_sum(full.data, shard.data, static_cast<size_t>(shard.numel()));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommGroup::tree_reduce_scatter(Tensor full, Tensor shard) {
  const int n = comm_.size(), me = comm_.rank();
  if ((n & (n - 1)) != 0) {
    throw std::invalid_argument(fmt::format("tree_reduce_scatter: a group of {} (a power of two)", n));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const size_t chunk = static_cast<size_t>(shard.numel());
  float* blocks = full.data;
  partner_.resize(static_cast<size_t>(n) * chunk);  // the first level's exchange, the largest (n/2 blocks each way)
  for (int bit = 1; bit < n; bit <<= 1) {
    // The owners still in play share my bits below `bit`; I keep those that share this one too, in owner order,
    // and send my partner the others (the ones it keeps), in the same order.
    const auto in_play = [&](int o) { return (o & (bit - 1)) == (me & (bit - 1)); };
    const size_t count = static_cast<size_t>(n / (2 * bit)) * chunk;
    float* send = partner_.data();
    float* recv = send + count;
    for (int o = 0, i = 0; o < n; ++o) {
      if (in_play(o) && (o & bit) != (me & bit)) std::copy_n(blocks + static_cast<size_t>(o) * chunk, chunk, send + chunk * i++);
    }
    comm_.send_recv(send, count, me ^ bit, recv, count, me ^ bit);
    for (int o = 0, i = 0; o < n; ++o) {
      if (!in_play(o) || (o & bit) != (me & bit)) continue;
      float* mine = blocks + static_cast<size_t>(o) * chunk;
      const float* theirs = recv + chunk * i++;
      for (size_t j = 0; j < chunk; ++j) mine[j] = mine[j] + theirs[j];
    }
  }
  std::copy_n(blocks + static_cast<size_t>(me) * chunk, chunk, shard.data);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommGroup::tree_sum(Tensor x) {
  const int n = comm_.size(), me = comm_.rank();
  if ((n & (n - 1)) != 0) throw std::invalid_argument(fmt::format("tree_sum: a group of {} (a power of two)", n));
  const auto t0 = std::chrono::steady_clock::now();
  const size_t count = static_cast<size_t>(x.numel());
  partner_.resize(count);
  for (int bit = 1; bit < n; bit <<= 1) {
    comm_.send_recv(x.data, count, me ^ bit, partner_.data(), count, me ^ bit);
    for (size_t i = 0; i < count; ++i) x.data[i] = x.data[i] + partner_[i];
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_grid(int ranks, int tp, int pp) {
  if (tp < 1 || pp < 1 || ranks % (tp * pp) != 0) {
    throw std::invalid_argument(
        pp == 1 ? fmt::format("parallel.tp {} does not divide the {} ranks: ranks = data-parallel size x parallel.tp",
                              tp, ranks)
                : fmt::format("parallel.tp {} x parallel.pp {} = {} does not divide the {} ranks: ranks = "
                              "data-parallel size x parallel.tp x parallel.pp", tp, pp, tp * pp, ranks));
  }
}

GridCoords grid_coords(int rank, int tp, int pp) { return {rank % tp, rank / tp % pp, rank / (tp * pp)}; }

namespace {
Communicator& checked(Communicator& world, int tp, int pp) {
  check_grid(world.size(), tp, pp);
  return world;
}
}  // namespace

ProcessGrid::ProcessGrid(Communicator& world, int tp, int pp)
    : world_(checked(world, tp, pp)),
      tp_owned_(world.split(world.rank() / tp, world.rank())),
      pp_owned_(world.split(world.rank() / (tp * pp) * tp + world.rank() % tp, world.rank())),
      dp_owned_(tp * pp > 1 ? world.split(world.rank() % (tp * pp), world.rank()) : nullptr),
      aux_(world.split(0, world.rank())),
      tp_(tp_owned_.get()),
      pp_(pp_owned_.get()),
      dp_(tp * pp > 1 ? dp_owned_.get() : &world),
      group_(*tp_),
      pp_group_(*pp_),
      dp_group_(*dp_) {}

TpLayout ProcessGrid::layout(std::vector<BlockType> blocks, bool vocab) {
  return TpLayout{tp(), tp_->rank(), std::move(blocks), tp() > 1 ? &group_ : nullptr, vocab};
}

void ProcessGrid::reset_stats() {
  tp_->reset_stats();
  pp_->reset_stats();
  dp_->reset_stats();
  group_.reset_seconds();
  pp_group_.reset_seconds();
  dp_group_.reset_seconds();
}

}  // namespace gpt2
