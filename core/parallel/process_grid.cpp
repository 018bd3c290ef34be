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
  if (shard.dtype != full.dtype) {
    throw std::invalid_argument(fmt::format("all_gather: a {} shard into a {} tensor", to_string(shard.dtype),
                                            to_string(full.dtype)));
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (shard.is_bf16() && shard.bytes() % sizeof(float) == 0) {  // a bf16 shard travels as its bytes, in floats' place
    comm_.all_gather(shard.data, full.data, shard.bytes() / sizeof(float));
  } else if (shard.is_bf16()) {
    comm_.all_gather(shard.as<bf16>(), full.as<bf16>(), static_cast<size_t>(shard.numel()));
  } else {
    comm_.all_gather(shard.data, full.data, static_cast<size_t>(shard.numel()));
  }
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

double CommRing::tree_sum(double x) {
  const int n = comm_.size(), me = comm_.rank();
  if ((n & (n - 1)) != 0) throw std::invalid_argument(fmt::format("tree_sum: a group of {} (a power of two)", n));
  const auto t0 = std::chrono::steady_clock::now();
  for (int bit = 1; bit < n; bit <<= 1) {
    double theirs = 0;
    comm_.send_recv(&x, 1, me ^ bit, &theirs, 1, me ^ bit);
    x = x + theirs;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return x;
}

void CommRing::start_shift(Tensor send, Tensor recv) {
  if (in_flight_) throw std::logic_error("CommRing: a step is already in flight");
  const auto t0 = std::chrono::steady_clock::now();
  const int n = comm_.size();
  recv_ = comm_.start_recv(recv.data, static_cast<size_t>(recv.numel()), (comm_.rank() + n - 1) % n);
  send_ = comm_.start_send(send.data, static_cast<size_t>(send.numel()), (comm_.rank() + 1) % n);
  in_flight_ = true;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommRing::finish_shift() {
  if (!in_flight_) throw std::logic_error("CommRing: no step in flight");
  const auto t0 = std::chrono::steady_clock::now();
  comm_.wait_recv(recv_);
  comm_.wait_send(send_);
  in_flight_ = false;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_grid(int ranks, int tp, int pp, int cp) {
  if (tp < 1 || pp < 1 || cp < 1 || ranks % (tp * pp * cp) != 0) {
    std::string keys = fmt::format("parallel.tp {}", tp), names = "parallel.tp";
    if (cp > 1) {
      keys += fmt::format(" x parallel.cp {}", cp);
      names += " x parallel.cp";
    }
    if (pp > 1) {
      keys += fmt::format(" x parallel.pp {}", pp);
      names += " x parallel.pp";
    }
    throw std::invalid_argument(
        cp == 1 && pp == 1
            ? fmt::format("parallel.tp {} does not divide the {} ranks: ranks = data-parallel size x parallel.tp",
                          tp, ranks)
            : fmt::format("{} = {} does not divide the {} ranks: ranks = data-parallel size x {}", keys,
                          tp * pp * cp, ranks, names));
  }
}

GridCoords grid_coords(int rank, int tp, int pp, int cp) {
  return {rank % tp, rank / (tp * cp) % pp, rank / (tp * cp * pp), rank / tp % cp};
}

namespace {
Communicator& checked(Communicator& world, int tp, int pp, int cp) {
  check_grid(world.size(), tp, pp, cp);
  return world;
}
}  // namespace

// The groups' colours (the formula in process_grid.h): ranks sharing one are a group, ranked by world rank.
ProcessGrid::ProcessGrid(Communicator& world, int tp, int pp, int cp)
    : world_(checked(world, tp, pp, cp)),
      tp_owned_(world.split(world.rank() / tp, world.rank())),
      cp_owned_(world.split(world.rank() / (tp * cp) * tp + world.rank() % tp, world.rank())),
      pp_owned_(world.split(world.rank() / (tp * cp * pp) * (tp * cp) + world.rank() % (tp * cp), world.rank())),
      dp_owned_(tp * pp > 1 ? world.split(world.rank() / (tp * cp) % pp * tp + world.rank() % tp, world.rank())
                            : nullptr),
      replicas_owned_(cp > 1 ? world.split(world.rank() % (tp * cp * pp), world.rank()) : nullptr),
      aux_(world.split(0, world.rank())),
      tp_(tp_owned_.get()),
      cp_(cp_owned_.get()),
      pp_(pp_owned_.get()),
      dp_(tp * pp > 1 ? dp_owned_.get() : &world),
      replicas_(cp > 1 ? replicas_owned_.get() : dp_),
      group_(*tp_),
      pp_group_(*pp_),
      dp_group_(*dp_),
      ring_(*cp_) {}

TpPlace ProcessGrid::layout(std::vector<BlockType> blocks, bool vocab) {
  return TpPlace{tp(), tp_->rank(), std::move(blocks), tp() > 1 ? &group_ : nullptr, vocab};
}

void ProcessGrid::reset_stats() {
  tp_->reset_stats();
  cp_->reset_stats();
  ring_.reset_seconds();
  pp_->reset_stats();
  dp_->reset_stats();
  if (replicas_ != dp_) replicas_->reset_stats();
  group_.reset_seconds();
  pp_group_.reset_seconds();
  dp_group_.reset_seconds();
}

}  // namespace gpt2
