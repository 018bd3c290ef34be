#include "train/schedule/train_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/model.h"

namespace gpt2 {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_loss(const StepParts& s, double loss) {
  if (!std::isfinite(loss) || (s.max_loss > 0 && loss > s.max_loss)) {
    throw std::runtime_error(fmt::format(
        "step {}: the loss is {:.6g}{} (training diverged); no update was made, and the last checkpoint, if any, is "
        "kept: lower optimizer.lr", s.opt.steps_done(), loss,
        std::isfinite(loss) ? fmt::format(", above train.max_loss {:.6g}", s.max_loss) : ""));
  }
}

// Each position's loss weighs 1 / (global B*T): summed over the ranks, the
// gradients are those of the global mean.
float loss_weight(const StepParts& s, int T) { return 1.0f / static_cast<float>(s.batch_size * T); }

// The end every step shares once r.loss is the global mean: the loss
// checked, then the update.
void check_and_update(const StepParts& s, StepResult& r, StateAt params, StateAt grads) {
  check_loss(s, r.loss);
  if (s.layer_norms) r.layer_grad_norms = layer_grad_norms(s.be, s.model);
  r.update = s.opt.step(s.be, s.model, params, grads);
}

// The same after the global mean loss (one allreduce; `comm_s` gets its time).
void mean_and_update(const StepParts& s, StepResult& r, double local_loss, int rows, StateAt params, StateAt grads) {
  const auto t0 = Clock::now();
  r.loss = global_mean(s.dp, local_loss, rows, s.batch_size);
  r.comm_s += seconds_since(t0);
  check_and_update(s, r, params, grads);
}

StateAt resident_params(const StepParts& s) { return {s.model.param_data(), false}; }
StateAt resident_grads(const StepParts& s) { return {s.model.grad_data(), false}; }

// A step over one arena of this rank's rows (no pipeline schedule); `units`
// hears the forward's units (ZeRO-3 gathers them), nullptr for a resident model.
class ArenaStep : public StepFunction {
 public:
  ArenaStep(const StepParts& parts, Activations& acts, UnitHook* units)
      : StepFunction(parts), acts_(acts), units_(units) {}
  double forward_loss(const int32_t* inputs, const int32_t* targets) override {
    return gpt2_forward(parts_.be, parts_.model, acts_, inputs, targets, 0, units_);
  }
  int rows() const override { return acts_.B; }
  int seq_len() const override { return acts_.T; }

 protected:
  Activations& acts_;
  UnitHook* units_;
};

class DataParallelStep final : public ArenaStep {
 public:
  DataParallelStep(const StepParts& parts, Activations& acts, GradReducer& reducer)
      : ArenaStep(parts, acts, nullptr), reducer_(reducer) {}

  StepResult step(const int32_t* inputs, const int32_t* targets) override {
    const StepParts& s = parts_;
    s.model.zero_grad();
    const double local_loss = gpt2_forward(s.be, s.model, acts_, inputs, targets);
    reducer_.start_grad_sync();
    gpt2_backward(s.be, s.model, acts_, inputs, targets, loss_weight(s, acts_.T), &reducer_);
    reducer_.finish_grad_sync();
    StepResult r;
    mean_and_update(s, r, local_loss, acts_.B, resident_params(s), resident_grads(s));
    reducer_.finish_update(s.be);
    r.comm_s += reducer_.seconds();
    return r;
  }

 private:
  GradReducer& reducer_;
};

class PipelinedStep final : public StepFunction {
 public:
  PipelinedStep(const StepParts& parts, PipelineEngine& pipe, Communicator& pp, GradReducer& reducer)
      : StepFunction(parts), pipe_(pipe), pp_(pp), reducer_(reducer) {}

  StepResult step(const int32_t* inputs, const int32_t* targets) override {
    const StepParts& s = parts_;
    s.model.zero_grad();
    // The gradient sum starts during the last microbatch's backward (bucketed), once every micro-step
    // has accumulated into it: accumulation costs no extra communication.
    reducer_.start_grad_sync();
    double local_loss = pipe_.step(inputs, targets, loss_weight(s, pipe_.seq_len()), &reducer_, s.interrupt);
    StepResult r;
    const auto t0 = Clock::now();
    local_loss = from_last_stage(local_loss);
    reducer_.finish_grad_sync();
    r.comm_s = seconds_since(t0);
    mean_and_update(s, r, local_loss, pipe_.rows(), resident_params(s), resident_grads(s));
    const auto t1 = Clock::now();
    reducer_.finish_update(s.be);
    r.comm_s += seconds_since(t1);
    return r;
  }
  double forward_loss(const int32_t* inputs, const int32_t* targets) override {
    return from_last_stage(pipe_.forward_loss(inputs, targets));
  }
  int rows() const override { return pipe_.rows(); }
  int seq_len() const override { return pipe_.seq_len(); }

 private:
  // The replica's loss, which only the last stage computed (0 elsewhere).
  double from_last_stage(double local) { return pp_.size() > 1 ? pp_.allreduce_sum(local) : local; }

  PipelineEngine& pipe_;
  Communicator& pp_;
  GradReducer& reducer_;
};

class ShardedStep final : public ArenaStep {
 public:
  ShardedStep(const StepParts& parts, Activations& acts, ZeroShards& shards)
      : ArenaStep(parts, acts, &shards), shards_(shards) {}

  StepResult step(const int32_t* inputs, const int32_t* targets) override {
    const StepParts& s = parts_;
    shards_.reset_seconds();
    // No zero_grad: each unit's gradient slot is zeroed as the backward acquires it.
    const double local_loss = gpt2_forward(s.be, s.model, acts_, inputs, targets, 0, &shards_);
    gpt2_backward(s.be, s.model, acts_, inputs, targets, loss_weight(s, acts_.T), nullptr, BackwardPart::kAll,
                  &shards_);
    shards_.finish_grads();
    StepResult r;
    mean_and_update(s, r, local_loss, acts_.B, shards_.params(), shards_.grads());
    shards_.finish_update();
    r.comm_s += shards_.seconds();
    return r;
  }

 private:
  ZeroShards& shards_;
};

// ZeRO-1's shard under train.deterministic: this rank's contiguous chunk of
// the sum over the data-parallel group of every rank's `subtree_sum` (n
// floats, cut every `chunk`: canonical_reduce_scatter), copied into `grads`
// at the same place. `scratch` holds a chunk.
void scatter_contiguous(Communicator& dp, float* subtree_sum, float* grads, size_t n, size_t chunk, float* scratch) {
  const auto [lo, len] = canonical_reduce_scatter(dp, subtree_sum, n, chunk, scratch);
  if (grads != subtree_sum) std::copy_n(subtree_sum + lo, len, grads + lo);
}

// train.deterministic's end of a step once the tree's gradient is where the
// update reads it: check_and_update, then (ZeRO-1/2) the shards' all-gather.
void tree_update(const StepParts& s, StepResult& r, StateAt params, StateAt grads, const TreeShards& shards) {
  check_and_update(s, r, params, grads);
  if (shards.after_update != nullptr) {
    const auto t1 = Clock::now();
    shards.after_update->finish_update(s.be);
    r.comm_s += seconds_since(t1);
  }
}

// train.deterministic under a pipeline (deterministic_pipelined_step): the
// engine's microbatches are the rank's canonical chunks, its tree the
// stage's gradient; then the data-parallel ranks' recursive doubling.
class DeterministicPipelinedStep final : public StepFunction {
 public:
  DeterministicPipelinedStep(const StepParts& parts, PipelineEngine& pipe, Communicator& pp, int chunks,
                             const TreeShards& shards)
      : StepFunction(parts), pipe_(pipe), pp_(pp), chunks_(chunks), shards_(shards) {
    if (shards.zero3 != nullptr || (shards.chunk > 0) != (shards.after_update != nullptr)) {
      throw std::logic_error("DeterministicPipelinedStep: contiguous shards (ZeRO-1 and 2) only, with their all-gather");
    }
    if (pipe.microbatches() * parts.dp.size() != chunks) {
      throw std::invalid_argument(fmt::format("train.deterministic: {} microbatches on {} data-parallel ranks are "
                                              "not the {} canonical chunks", pipe.microbatches(), parts.dp.size(),
                                              chunks));
    }
    if (parts.dp.size() > 1) recv_ = Buffer(parts.model.num_params());
  }

  StepResult step(const int32_t* inputs, const int32_t* targets) override {
    const StepParts& s = parts_;
    pipe_.step(inputs, targets, loss_weight(s, pipe_.seq_len()), nullptr, s.interrupt);
    StepResult r;
    const auto t0 = Clock::now();
    float* g = s.model.grad_data();
    r.loss = across(pipe_.loss_sum(), shards_.chunk > 0 ? nullptr : g) / chunks_;
    if (shards_.chunk > 0) scatter_contiguous(s.dp, g, g, s.model.num_params(), shards_.chunk, recv_.data());
    r.comm_s = seconds_since(t0);
    tree_update(s, r, resident_params(s), resident_grads(s), shards_);
    return r;
  }
  double forward_loss(const int32_t* inputs, const int32_t* targets) override {
    pipe_.forward_loss(inputs, targets);
    return across(pipe_.loss_sum(), nullptr) / chunks_;
  }
  bool global_forward() const override { return true; }
  int rows() const override { return pipe_.rows(); }
  int seq_len() const override { return pipe_.seq_len(); }

 private:
  // The last stage's loss sum to every stage (the others add zeros: exact),
  // then the replicas' tree.
  double across(double loss_sum, float* grads) {
    if (pp_.size() > 1) loss_sum = pp_.allreduce_sum(loss_sum);
    return canonical_allreduce(parts_.be, parts_.dp, loss_sum, grads, parts_.model.num_params(), recv_.data());
  }

  PipelineEngine& pipe_;
  Communicator& pp_;
  int chunks_;
  TreeShards shards_;
  Buffer recv_;  // a partner's gradient (or, with ZeRO, block)
};

// train.deterministic's step (train_step.h, deterministic_step).
class DeterministicStep final : public ArenaStep {
 public:
  DeterministicStep(const StepParts& parts, Activations& acts, int chunks, const TreeShards& shards)
      : ArenaStep(parts, acts, shards.zero3), local_(chunks / parts.dp.size()), chunks_(chunks), shards_(shards) {
    const int dp = parts.dp.size();
    if (dp < 1 || (dp & (dp - 1)) != 0 || chunks % dp != 0 || (local_ & (local_ - 1)) != 0) {
      throw std::invalid_argument(fmt::format(
          "train.deterministic: {} data-parallel ranks and {} canonical chunks (need powers of two, the ranks "
          "dividing the chunks)", dp, chunks));
    }
    if ((shards.chunk > 0) != (shards.after_update != nullptr)) {
      throw std::logic_error("DeterministicStep: a contiguous shard needs its all-gather");
    }
    const size_t n = parts.model.num_params();
    // The root's sum is the model's own gradient, where the model holds it whole: no copy into it at the end.
    // ZeRO-3's model holds none, and its root is a buffer of its own until its scatter.
    const bool root_in_model = shards.zero3 == nullptr;
    own_.reserve(static_cast<size_t>(local_) + 1);
    for (int levels = 0; (1 << levels) <= local_; ++levels) {  // the root's sum, then one per level
      if (levels == 0 && root_in_model) {
        tree_.push_back(parts.model.grad_data());
      } else {
        own_.emplace_back(n);
        tree_.push_back(own_.back().data());
      }
    }
    if (dp > 1) recv_ = Buffer(shards.chunk > 0 ? shards.chunk : n);
    if (own_.size() * n + recv_.size() != deterministic_buffer_floats(n, chunks, dp, shards.chunk, root_in_model)) {
      throw std::logic_error("DeterministicStep: its buffers disagree with deterministic_buffer_floats");
    }
  }

  StepResult step(const int32_t* inputs, const int32_t* targets) override {
    const StepParts& s = parts_;
    const double loss_sum = subtree(inputs, targets, 0, local_, 0, true);
    StepResult r;
    const auto t0 = Clock::now();
    StateAt params = resident_params(s), grads = resident_grads(s);
    double total = 0;
    if (shards_.zero3 != nullptr) {  // ZeRO-3: this rank's pieces of every unit
      total = across_ranks(loss_sum, nullptr);
      shards_.zero3->scatter_sum(tree_[0]);
      params = shards_.zero3->params();
      grads = shards_.zero3->grads();
    } else if (shards_.chunk > 0) {  // ZeRO-1 (and 2): this rank's contiguous shard
      total = across_ranks(loss_sum, nullptr);
      scatter_contiguous(s.dp, tree_[0], s.model.grad_data(), s.model.num_params(), shards_.chunk, recv_.data());
    } else {  // the root is the model's gradient already
      total = across_ranks(loss_sum, s.model.grad_data());
    }
    r.comm_s += seconds_since(t0);
    r.loss = total / chunks_;
    tree_update(s, r, params, grads, shards_);
    return r;
  }
  // The global batch's loss (global_forward): the chunks' mean losses in the same tree.
  double forward_loss(const int32_t* inputs, const int32_t* targets) override {
    return across_ranks(subtree(inputs, targets, 0, local_, 0, false), nullptr) / chunks_;
  }
  bool global_forward() const override { return true; }
  int rows() const override { return acts_.B * local_; }

 private:
  // Chunks [lo, lo + n) of this rank's rows in the canonical tree: their
  // gradient sum into tree_[level] (with `backward`), their mean losses' sum returned.
  double subtree(const int32_t* inputs, const int32_t* targets, int lo, int n, size_t level, bool backward) {
    const StepParts& s = parts_;
    if (n == 1) {
      if (backward && lo > 0 && s.interrupt != nullptr && s.interrupt->stop_now()) throw StepAbandoned();
      const size_t off = static_cast<size_t>(lo) * static_cast<size_t>(acts_.B) * static_cast<size_t>(acts_.T);
      const double loss = gpt2_forward(s.be, s.model, acts_, inputs + off, targets + off, 0, units_);
      if (backward) {  // the leaf's gradient straight into its tree buffer (no copy)
        float* leaf = tree_[level];
        s.model.memory().zero(leaf, s.model.num_params() * sizeof(float));
        if (shards_.zero3 != nullptr) shards_.zero3->whole_grads(leaf);  // bound unit by unit as they are gathered
        else s.model.bind_grads(leaf);
        gpt2_backward(s.be, s.model, acts_, inputs + off, targets + off, loss_weight(s, acts_.T), nullptr,
                      BackwardPart::kAll, units_);
        if (shards_.zero3 != nullptr) shards_.zero3->whole_grads(nullptr);
        else s.model.bind_grads(nullptr);
      }
      return loss;
    }
    const double left = subtree(inputs, targets, lo, n / 2, level, backward);
    const double right = subtree(inputs, targets, lo + n / 2, n / 2, level + 1, backward);
    if (backward) add_into(tree_[level], tree_[level + 1]);
    return left + right;
  }
  // a = a + b, and dst = src, over the flat gradient, through the backend.
  Tensor flat(const float* p) const {
    return Tensor(const_cast<float*>(p), {static_cast<int64_t>(parts_.model.num_params())});
  }
  void add_into(float* a, const float* b) { parts_.be.residual_forward(flat(a), flat(a), flat(b)); }
  double across_ranks(double loss_sum, float* grads) {
    return canonical_allreduce(parts_.be, parts_.dp, loss_sum, grads, parts_.model.num_params(), recv_.data());
  }
  int local_, chunks_;
  TreeShards shards_;
  std::vector<Buffer> own_;   // the tree's buffers but the model's gradient
  std::vector<float*> tree_;  // tree_[0]: the subtree's sum (the model's gradient but under ZeRO-3); tree_[l]: a right
                              // half's at depth l
  Buffer recv_;               // a partner's gradient (or shard)
};

}  // namespace

std::unique_ptr<StepFunction> deterministic_step(const StepParts& parts, Activations& acts, int chunks,
                                                const TreeShards& shards) {
  return std::make_unique<DeterministicStep>(parts, acts, chunks, shards);
}

uint64_t deterministic_buffer_floats(size_t n, int chunks, int dp, size_t shard_chunk, bool root_in_model) {
  uint64_t levels = root_in_model ? 0 : 1;  // the subtree's sum unless the model's gradient, then one per level
  for (int leaves = 1; leaves < chunks / dp; leaves <<= 1) ++levels;
  return levels * n + (dp > 1 ? (shard_chunk > 0 ? shard_chunk : n) : 0);
}

std::unique_ptr<StepFunction> deterministic_pipelined_step(const StepParts& parts, PipelineEngine& pipe,
                                                          Communicator& pp, int chunks, const TreeShards& shards) {
  return std::make_unique<DeterministicPipelinedStep>(parts, pipe, pp, chunks, shards);
}

std::unique_ptr<StepFunction> data_parallel_step(const StepParts& parts, Activations& acts, GradReducer& reducer) {
  return std::make_unique<DataParallelStep>(parts, acts, reducer);
}

std::unique_ptr<StepFunction> pipelined_step(const StepParts& parts, PipelineEngine& pipe, Communicator& pp,
                                             GradReducer& reducer) {
  return std::make_unique<PipelinedStep>(parts, pipe, pp, reducer);
}

std::unique_ptr<StepFunction> sharded_step(const StepParts& parts, Activations& acts, ZeroShards& shards) {
  return std::make_unique<ShardedStep>(parts, acts, shards);
}

double global_mean(Communicator& comm, double local_mean, int rows, int batch_size) {
  return comm.allreduce_sum(local_mean * rows / batch_size);
}

LocalTrainStep::LocalTrainStep(Backend& be, Gpt2& model, Optimizer& opt, Activations& acts)
    : comm_(make_local_communicator()),
      sync_(*comm_, model.grad_data(), model.num_params(), 0),
      step_(data_parallel_step({be, model, opt, *comm_, acts.B}, acts, sync_)) {}

std::vector<double> layer_grad_norms(Backend& be, const Gpt2& model) {
  std::vector<double> sq(static_cast<size_t>(model.config().L + 2), 0.0);
  for (const ParamInfo& info : model.infos()) {
    const Tensor& p = *info.view;
    sq[static_cast<size_t>(unit_id(info.name, model.config().L))] +=
        be.sum_squares(Tensor(model.grad_data() + (p.data - model.param_data()), {p.numel()}));
  }
  for (double& v : sq) v = std::sqrt(v);
  return sq;
}

}  // namespace gpt2
