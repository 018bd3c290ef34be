// The process grid of a run (DESIGN.md "Parallel layouts"): ranks = dp x pp
// x cp x tp. Tensor-parallel groups are tp consecutive ranks (they talk
// most: several activation sums per layer), then context-parallel groups
// (a ring of key/value blocks per layer), then pipeline stages, then
// data-parallel replicas. World rank r has
//   tp rank r % tp, cp rank (r / tp) % cp, pipeline stage (r / (tp cp)) % pp,
//   dp rank r / (tp cp pp);
// its context-parallel group joins the ranks of its replica, stage and tp
// rank (one per cp rank: they share the batch's rows, each holding 2 of
// their 2 cp chunks, model/context_parallel.h); its pipeline group the ranks
// of its replica, cp and tp rank (one per stage); its data-parallel group
// the ranks of its stage and tp rank (one per replica and cp rank: they hold
// the same part of the model, and their gradients and losses add up: the
// gradient group is dp x cp, ranked by (dp rank, cp rank)).
// The groups are Communicators split from the world, with its verbs and its
// accounting (CommStats); with tp = pp = 1 the data-parallel (gradient)
// group is the world itself, and so is the ring with cp = ranks.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "model/context_parallel.h"
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

// The ring of a context-parallel group (model/context_parallel.h's CpGroup)
// over a Communicator: a non-blocking send to the next rank, the receive
// from the previous one when the step finishes. Times its calls.
class CommRing final : public CpGroup {
 public:
  explicit CommRing(Communicator& comm) : comm_(comm), sums_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void start_shift(Tensor send, Tensor recv) override;
  void finish_shift() override;
  void progress() override { comm_.progress(); }
  // train.sequence_pieces' collectives: CommGroup's, and the loss's sum in double by recursive doubling.
  void all_gather(Tensor shard, Tensor full) override { sums_.all_gather(shard, full); }
  void tree_reduce_scatter(Tensor full, Tensor shard) override { sums_.tree_reduce_scatter(full, shard); }
  void tree_sum(Tensor x) override { sums_.tree_sum(x); }
  double tree_sum(double x) override;
  double seconds() const { return seconds_ + sums_.seconds(); }
  void reset_seconds() {
    seconds_ = 0;
    sums_.reset_seconds();
  }

 private:
  Communicator& comm_;
  CommGroup sums_;
  uint64_t send_ = 0, recv_ = 0;  // the step's tickets
  bool in_flight_ = false;
  double seconds_ = 0;
};

// A world rank's place in the grid of `tp` x `cp` x `pp` (the formula
// above), and the grid's check: throws std::invalid_argument naming
// parallel.tp, parallel.cp and parallel.pp when their product does not
// divide `ranks` (ProcessGrid's check, and a plan's, train/resolve/plan.h).
struct GridCoords {
  int tp_rank = 0, stage = 0, dp_rank = 0, cp_rank = 0;
};
GridCoords grid_coords(int rank, int tp, int pp, int cp = 1);
void check_grid(int ranks, int tp, int pp, int cp = 1);

class ProcessGrid {
 public:
  // Collective over `world`. Throws std::invalid_argument naming parallel.tp,
  // parallel.cp and parallel.pp when tp x cp x pp does not divide the rank count.
  ProcessGrid(Communicator& world, int tp, int pp = 1, int cp = 1);
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int tp() const { return tp_->size(); }
  int pp() const { return pp_->size(); }
  // The gradient group's size: data-parallel replicas x cp.
  int dp() const { return dp_->size(); }
  int cp() const { return cp_->size(); }
  int stage() const { return pp_->rank(); }
  // This rank's data-parallel replica (which rows of the batch it holds), 0 .. dp() / cp() - 1.
  int replica() const { return dp_->rank() / cp_->size(); }
  Communicator& world() const { return world_; }
  Communicator& tp_comm() const { return *tp_; }
  Communicator& pp_comm() const { return *pp_; }
  Communicator& dp_comm() const { return *dp_; }
  Communicator& cp_comm() const { return *cp_; }
  // The data-parallel replicas alone: the ranks of this stage, tp rank and
  // cp rank (dp_comm() without the cp ranks; dp_comm() itself when cp is 1).
  // train.deterministic's tree over the replicas runs here, the cp ranks
  // having finished each chunk's gradient among themselves.
  Communicator& replica_comm() const { return *replicas_; }
  // A world-wide group outside the accounting: metrics and timelines gathered
  // to rank 0 do not count as the step's communication.
  Communicator& aux_comm() const { return *aux_; }
  CommGroup& tp_group() { return group_; }
  // The pipeline and data-parallel groups as sums of the gradient norm's parts.
  CommGroup& pp_group() { return pp_group_; }
  CommGroup& dp_group() { return dp_group_; }
  // The model's layout on this rank with these block types.
  TpPlace layout(std::vector<BlockType> blocks, bool vocab = false);
  // This rank's place in its context-parallel ring (size 1: no cut).
  ContextCut context() { return {cp(), cp_->rank(), cp() > 1 ? &ring_ : nullptr}; }
  CommRing& ring() { return ring_; }
  void reset_stats();

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> tp_owned_, cp_owned_, pp_owned_, dp_owned_, replicas_owned_, aux_;
  Communicator* tp_ = nullptr;
  Communicator* cp_ = nullptr;
  Communicator* pp_ = nullptr;
  Communicator* dp_ = nullptr;
  Communicator* replicas_ = nullptr;
  CommGroup group_, pp_group_, dp_group_;
  CommRing ring_;
};

}  // namespace gpt2
