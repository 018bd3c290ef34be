// ZeRO stages 2 and 3 over the data-parallel group (Rajbhandari et al.,
// 2020; DESIGN.md "Memory"): the gradient (stage 2) and also the parameters
// (stage 3) held as 1/N shards, a unit (model/params.h: the embeddings, a
// layer, the head) at a time in full only while a pass uses it.
//
// The shard: every unit of this rank's flat buffer [offset, offset + count)
// is cut into N pieces of chunk = ceil(count / N) floats (the last padded with
// zeros); data-parallel rank r holds piece r of every unit, packed one after
// another in buffer order. So every collective is one unit's: a
// reduce-scatter of its padded gradient (N x chunk floats) and an all-gather
// of its weights, with equal counts on every rank (the verbs of
// parallel/comm.h, as NCCL has them too).
//
//   stage 2  The model keeps its parameters (Residency::kParams). The
//            backward's acquire(unit) binds the unit's gradient views to a
//            zeroed working slot; its release starts the reduce-scatter of
//            that slot into the gradient shard, which runs while the next
//            unit's backward computes (two slots: one computing, one in
//            flight). The optimizer updates this rank's pieces of the
//            model's parameters in place; finish_update() all-gathers every
//            unit's pieces back into the model.
//   stage 3  The model keeps nothing (Residency::kNone): the parameter shard
//            is this object's. acquire(unit) all-gathers the unit's weights
//            into a working slot and binds them (the gather of the next
//            unit in pass order is started at once, so it overlaps this
//            unit's compute: two slots); release unbinds. The backward gathers
//            again; gradients as stage 2. The optimizer updates the shard.
//
// Working memory, counted: stage 2 holds 2 gradient slots of the largest
// padded unit; stage 3 also 2 parameter slots. Host memory only for now
// (the mpi stage): the constructor refuses device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <functional>

#include "parallel/comm.h"

#include "kernels/buffer.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"

namespace gpt2 {

// Unit-aligned shards of a model's flat buffer over `ranks` ranks, for
// `rank`: the ranges of the flat buffer it holds, each with its place in the
// packed shard (ShardRange::pos), and each unit's chunk.
struct UnitShards {
  struct Piece {
    ParamUnit unit;
    size_t chunk = 0;  // floats per rank for this unit
    size_t pos = 0;    // where this rank's piece starts in the packed shard
  };
  std::vector<Piece> pieces;   // one per unit, in buffer order
  std::vector<ShardRange> ranges;  // this rank's part of each unit (may be empty), for UpdateScope
  size_t shard_floats = 0;     // the packed shard's length (chunks, padding included)
  size_t max_padded = 0;       // the largest unit's N x chunk

  static UnitShards of(const std::vector<ParamUnit>& units, int ranks, int rank);
  // This rank's pieces of a flat array (parameters or moments) laid out like
  // the model's buffer, packed (zeros in the padding).
  std::vector<float> pack(std::span<const float> flat) const;
};

class ZeroShards final : public UnitHook {
 public:
  // `zero_stage` 2 or 3. The model was made with Residency::kParams (2) or kNone
  // (3) and lives in host memory; `dp` is the data-parallel group.
  ZeroShards(Gpt2& model, Communicator& dp, int zero_stage);
  ZeroShards(const ZeroShards&) = delete;
  ZeroShards& operator=(const ZeroShards&) = delete;

  const UnitShards& shards() const { return shards_; }
  // Where the optimizer finds this rank's parameters and gradients.
  StateAt params() const;
  StateAt grads() const { return {grad_shard_.data(), true}; }

  void acquire(const ParamUnit& unit, Pass pass) override;
  void release(const ParamUnit& unit, Pass pass) override;
  // After the backward: waits for the last gradient pieces.
  void finish_grads();
  // train.deterministic (stage 3): with `whole` set, the backward binds each
  // unit's gradient to whole + the unit's offset (a flat gradient of
  // num_params floats the caller zeroes) and nothing is reduce-scattered on
  // release; nullptr restores the slots. scatter_sum(whole) then puts this
  // rank's pieces of the sum over the group of every rank's `whole` into the
  // gradient shard, by canonical_reduce_scatter unit by unit (`whole` is spent).
  void whole_grads(float* whole) { whole_grads_ = whole; }
  // Called before each unit is acquired, on every rank alike (the same units
  // in the same order): a step's stop point (train/schedule/preemption.h). When it
  // throws, the collectives in flight are waited for and the slots forgotten
  // before the exception leaves acquire(), so the state can still be gathered
  // and saved. Empty: none.
  void before_unit(std::function<void()> check) { before_unit_ = std::move(check); }
  void scatter_sum(float* whole);
  // After the update (stage 2): every unit's parameters all-gathered back
  // into the model's buffer. Stage 3: nothing (the shard is the state).
  void finish_update();
  // Seconds inside communication calls since the last reset.
  double seconds() const { return seconds_; }
  void reset_seconds() { seconds_ = 0; }

  // Stage 3: this rank's parameter pieces from the local flat array (init,
  // resume). Collective-free.
  void load_params(std::span<const float> flat);
  // Stage 3: the same, each piece computed in place by values(begin, out):
  // the local flat array's floats [begin, begin + out.size()), which is never
  // made whole (params.h, initial_values).
  void load_params(const std::function<void(size_t begin, std::span<float> out)>& values);
  // The local flat array (num_params floats) from every rank's packed shard
  // `packed` (parameters or moments): all-gathered unit by unit. Collective
  // over the data-parallel group.
  std::vector<float> gather(std::span<const float> packed);
  // Stage 3: the packed parameter shard, on the host.
  std::vector<float> param_shard() const { return param_shard_.download(); }
  // Stage 3: the same where it lives (host memory), packed by shards().ranges.
  const float* param_shard_data() const { return param_shard_.data(); }

  // Bytes this rank holds: the parameter shard (stage 3), the gradient shard,
  // and the working slots (gathered parameters; gradients computing or in flight).
  uint64_t param_shard_bytes() const { return param_shard_.bytes(); }
  uint64_t grad_shard_bytes() const { return grad_shard_.bytes(); }
  uint64_t param_slot_bytes() const { return (param_slots_[0].bytes() + param_slots_[1].bytes()); }
  uint64_t grad_slot_bytes() const { return (grad_slots_[0].bytes() + grad_slots_[1].bytes()); }

 private:
  const UnitShards::Piece& piece(const ParamUnit& unit) const;
  // Stage 3: the slot holding `unit`'s gathered weights (gathering it now if
  // no prefetch started it), then a prefetch of the unit after it in `pass`.
  float* gathered(const ParamUnit& unit, Pass pass);
  void start_gather(const UnitShards::Piece& p, int slot);
  void wait();
  // Blocking: every rank's piece `mine` (p.chunk floats) of unit p all-gathered
  // into `whole` (N x chunk floats), the unit's floats then copied to `flat` +
  // the unit's offset.
  void gather_unit(const UnitShards::Piece& p, const float* mine, float* whole, float* flat);

  Gpt2& model_;
  Communicator& dp_;
  int zero_stage_;
  UnitShards shards_;
  Buffer param_shard_;  // stage 3
  Buffer grad_shard_;
  Buffer param_slots_[2], grad_slots_[2];
  int slot_unit_[2] = {-1, -1};  // stage 3: the unit id each parameter slot holds (or is gathering)
  int grad_slot_ = 0;            // the gradient slot the next acquire takes
  bool in_flight_ = false;       // a started collective not yet waited for
  float* whole_grads_ = nullptr;  // train.deterministic: the backward's flat gradient (whole_grads)
  std::function<void()> before_unit_;  // before_unit
  double seconds_ = 0;
};

// ZeRO-1 (and ZeRO-2 under a pipeline schedule, which keeps the stage's
// gradient for the microbatches' accumulation): this rank's shard [begin,
// end) of its flat parameter buffer, cut into equal chunks of `chunk` floats
// over the data-parallel group (the buffer is padded to a multiple of the
// group's size).
struct ContiguousShard {
  size_t begin = 0, end = 0, chunk = 0;
};

// ZeRO-1's shard of `model`'s buffer for data-parallel rank `dp_rank` of `dp`.
ContiguousShard contiguous_shard(const Gpt2& model, int dp, int dp_rank);
// The same for a buffer of `num_params` floats padded to `padded`.
ContiguousShard contiguous_shard(size_t num_params, size_t padded, int dp, int dp_rank);

}  // namespace gpt2
