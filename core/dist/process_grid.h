// The process grid of a run (DESIGN.md "Parallel layouts"): ranks = dp x tp.
// Tensor-parallel groups are tp consecutive ranks (they talk most: several
// activation sums per layer), data-parallel groups join the ranks that hold
// the same shard, one from each tensor-parallel group:
//   world rank r: tp group r / tp, tp rank r % tp; dp group r % tp, dp rank r / tp.
// Both groups are Communicators split from the world, with its verbs and
// its accounting (CommStats); with tp = 1 the data-parallel group is the
// world itself and the tensor-parallel group a one-rank communicator.
#pragma once

#include <memory>

#include "dist/comm.h"
#include "model/tensor_parallel.h"

namespace gpt2 {

// A Communicator as the model's tensor-parallel group (model/tensor_parallel.h).
// Times its calls: the tensor-parallel share of a step's communication time.
class CommTpGroup final : public TpGroup {
 public:
  explicit CommTpGroup(Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void allreduce_sum(Tensor x) override;
  double allreduce_sum(double x) override;
  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

 private:
  Communicator& comm_;
  double seconds_ = 0;
};

class ProcessGrid {
 public:
  // Collective over `world`. Throws std::invalid_argument naming parallel.tp
  // when tp does not divide the rank count.
  ProcessGrid(Communicator& world, int tp);
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int tp() const { return tp_->size(); }
  int dp() const { return dp_->size(); }
  Communicator& world() const { return world_; }
  Communicator& tp_comm() const { return *tp_; }
  Communicator& dp_comm() const { return *dp_; }
  CommTpGroup& tp_group() { return group_; }
  // The model's layout on this rank with these block types.
  TpLayout layout(std::vector<BlockType> blocks);
  void reset_stats();

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> tp_owned_, dp_owned_;
  Communicator* tp_ = nullptr;
  Communicator* dp_ = nullptr;
  CommTpGroup group_;
};

}  // namespace gpt2
