// The process grid of a run (DESIGN.md "Parallel layouts"): ranks = dp x pp x tp.
// Tensor-parallel groups are tp consecutive ranks (they talk most: several
// activation sums per layer), then pipeline stages, then data-parallel
// replicas. World rank r has
//   tp rank r % tp, pipeline stage (r / tp) % pp, dp rank r / (tp x pp);
// its pipeline group joins the ranks of its replica and tp rank (one per
// stage), its data-parallel group the ranks of its stage and tp rank (one
// per replica: they hold the same part of the model).
// The groups are Communicators split from the world, with its verbs and its
// accounting (CommStats); with tp = pp = 1 the data-parallel group is the
// world itself and the others one-rank communicators.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "model/tensor_parallel.h"

namespace gpt2 {

// A Communicator as a group the model and the update talk to through
// model/tensor_parallel.h's TpGroup interface: the tensor-parallel group, the
// pipeline's stages (the norm's sum) and the data-parallel shards (ZeRO's
// norm). Times its calls: that group's share of a step's communication time.
class CommGroup final : public TpGroup {
 public:
  explicit CommGroup(Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void allreduce_sum(Tensor x) override;
  double allreduce_sum(double x) override;
  void tree_sum(Tensor x) override;
  void all_gather(Tensor shard, Tensor full) override;
  void reduce_scatter_sum(Tensor full, Tensor shard) override;
  void tree_reduce_scatter(Tensor full, Tensor shard) override;
  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

 private:
  Communicator& comm_;
  double seconds_ = 0;
  std::vector<float> partner_;  // tree_sum: the partner's values (tree_reduce_scatter: the blocks sent, then received)
};

// A world rank's place in the grid of `tp` x `pp` (the formula above), and
// the grid's check: throws std::invalid_argument naming parallel.tp and
// parallel.pp when tp x pp does not divide `ranks` (ProcessGrid's check,
// and a plan's, train/plan.h).
struct GridCoords {
  int tp_rank = 0, stage = 0, dp_rank = 0;
};
GridCoords grid_coords(int rank, int tp, int pp);
void check_grid(int ranks, int tp, int pp);

class ProcessGrid {
 public:
  // Collective over `world`. Throws std::invalid_argument naming parallel.tp
  // and parallel.pp when tp x pp does not divide the rank count.
  ProcessGrid(Communicator& world, int tp, int pp = 1);
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int tp() const { return tp_->size(); }
  int pp() const { return pp_->size(); }
  int dp() const { return dp_->size(); }
  int stage() const { return pp_->rank(); }
  Communicator& world() const { return world_; }
  Communicator& tp_comm() const { return *tp_; }
  Communicator& pp_comm() const { return *pp_; }
  Communicator& dp_comm() const { return *dp_; }
  // A world-wide group outside the accounting: metrics and timelines gathered
  // to rank 0 do not count as the step's communication.
  Communicator& aux_comm() const { return *aux_; }
  CommGroup& tp_group() { return group_; }
  // The pipeline and data-parallel groups as sums of the gradient norm's parts.
  CommGroup& pp_group() { return pp_group_; }
  CommGroup& dp_group() { return dp_group_; }
  // The model's layout on this rank with these block types.
  TpLayout layout(std::vector<BlockType> blocks, bool vocab = false);
  void reset_stats();

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> tp_owned_, pp_owned_, dp_owned_, aux_;
  Communicator* tp_ = nullptr;
  Communicator* pp_ = nullptr;
  Communicator* dp_ = nullptr;
  CommGroup group_, pp_group_, dp_group_;
};

}  // namespace gpt2
