#include "dist/process_grid.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

namespace gpt2 {

void CommTpGroup::allreduce_sum(Tensor x) {
  const auto t0 = std::chrono::steady_clock::now();
  comm_.allreduce_sum(x.data, static_cast<size_t>(x.numel()));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CommTpGroup::allreduce_sum(double x) {
  const auto t0 = std::chrono::steady_clock::now();
  const double sum = comm_.allreduce_sum(x);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

namespace {
Communicator& checked(Communicator& world, int tp) {
  if (tp < 1 || world.size() % tp != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.tp {} does not divide the {} ranks: ranks = data-parallel size x parallel.tp", tp, world.size()));
  }
  return world;
}
}  // namespace

ProcessGrid::ProcessGrid(Communicator& world, int tp)
    : world_(checked(world, tp)),
      tp_owned_(world.split(world.rank() / tp, world.rank())),
      dp_owned_(tp > 1 ? world.split(world.rank() % tp, world.rank()) : nullptr),
      tp_(tp_owned_.get()),
      dp_(tp > 1 ? dp_owned_.get() : &world),
      group_(*tp_) {}

TpLayout ProcessGrid::layout(std::vector<BlockType> blocks) {
  return TpLayout{tp(), tp_->rank(), std::move(blocks), tp() > 1 ? &group_ : nullptr};
}

void ProcessGrid::reset_stats() {
  tp_->reset_stats();
  dp_->reset_stats();
  group_.reset_seconds();
}

}  // namespace gpt2
