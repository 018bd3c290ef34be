// Optimizers and learning-rate schedules. Two variants share one update kernel
// (Backend::adam_update) and differ only in the coefficients:
//
//  * kOriginalAdam, the reproduced project's: eps is added to sqrt(v) WITHOUT
//    bias correction and the bias correction is folded into the step size,
//      p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps),
//    with its linear schedule lr(s) = lr - (lr - min_lr) * min(s, decay_steps)
//    / decay_steps (1e-4 falling by 9e-5 over 10,000 steps).
//  * kAdamW, as torch.optim.AdamW: p *= 1 - lr * wd (matrices only), then
//      p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps),
//    with linear warm-up to lr over warmup_steps and a cosine decay to min_lr
//    at decay_steps.
//
// Both clip the global gradient norm first (over the whole model: a
// tensor-parallel model sums its shards' squares over its group): g *= min(1, clip / (norm + 1e-6))
// (as torch.nn.utils.clip_grad_norm_), folded into the update.
// Step s counts from 0 for the first update; Adam's t = s + 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "model/params.h"

namespace gpt2 {

enum class OptimizerKind { kOriginalAdam, kAdamW };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kOriginalAdam;
  float lr = 1e-4f;
  float min_lr = 1e-5f;
  int64_t warmup_steps = 0;      // AdamW only
  int64_t decay_steps = 10000;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;     // decoupled, on matrices (ParamInfo::decay)
  float grad_clip = 1.0f;        // 0 turns clipping off; negative is refused

  static OptimizerConfig original();  // the reproduced project's Adam and schedule
  static OptimizerConfig adamw();     // AdamW lr 3e-4, wd 0.1, warm-up 10, cosine
  void validate() const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("kind", kind, "adam_original (the reproduced project's Adam) or adamw");
    f("lr", lr, "peak learning rate");
    f("min_lr", min_lr, "final learning rate of the decay");
    f("warmup_steps", warmup_steps, "linear warm-up steps (adamw)");
    f("decay_steps", decay_steps, "steps over which the rate decays to min_lr");
    f("beta1", beta1, "Adam beta1");
    f("beta2", beta2, "Adam beta2");
    f("eps", eps, "Adam epsilon");
    f("weight_decay", weight_decay, "decoupled weight decay on matrices");
    f("grad_clip", grad_clip, "global gradient-norm clip; 0 = off");
  }
  bool operator==(const OptimizerConfig&) const = default;
};

OptimizerKind parse_optimizer_kind(const std::string& name);  // "adam_original" | "adamw"
std::string to_string(OptimizerKind kind);
inline void from_string(const std::string& name, OptimizerKind& kind) { kind = parse_optimizer_kind(name); }

// Learning rate of update number `step` (0-based).
double learning_rate(const OptimizerConfig& cfg, int64_t step);

struct StepStats {
  double lr = 0;
  double grad_norm = 0;   // before clipping
  double grad_scale = 1;  // the clipping factor applied
};

// A part of the flat parameter buffer [lo, hi) that one rank updates, and
// where it sits in that rank's packed shard: at pos .. pos + hi - lo.
struct ShardRange {
  size_t lo = 0, hi = 0, pos = 0;
};

// What one rank's update covers, and over whom the gradient norm is summed
// (set once by the parallel layout; the default is one whole model).
//   ranges         ZeRO: the parts of the flat buffer this rank updates (one
//                  contiguous range for ZeRO-1, a piece of every unit for
//                  ZeRO-2/3, parallel/zero.h); its moments are packed in that
//                  order; the rest is updated by the other data-parallel
//                  ranks. Empty: the whole buffer.
//   stages         the pipeline group: each stage holds other parameters, so
//                  their squared norms add.
//   shards         ZeRO's data-parallel group: each rank's shard is other
//                  parameters, so their squared norms add.
//   exact_norm     train.deterministic: the squares added exactly
//                  (kernels/exact_sum.h), so the norm has the same bits
//                  however the gradient is split over ranks (host memory).
// (The tensor-parallel group is the model's own: model.tp().group.)
struct UpdateScope {
  std::vector<ShardRange> ranges;
  TpGroup* stages = nullptr;
  TpGroup* shards = nullptr;
  bool exact_norm = false;
};

// Where a scope's parameters or gradients are: in the model's flat layout
// (element i at base + i) or packed in the scope's shard order (element i of
// range r at base + r.pos + i - r.lo).
struct StateAt {
  float* base = nullptr;
  bool packed = false;
  float* at(const ShardRange& r, size_t i) const { return packed ? base + r.pos + (i - r.lo) : base + i; }
};

// The floats of each moment buffer for `scope`: the packed shard's length
// (num_params without ranges). Throws std::invalid_argument for a range
// outside the parameters.
size_t scope_floats(const UpdateScope& scope, size_t num_params);

// Holds Adam's two moment buffers (same layout as the parameters, or as the
// scope's shard) and the step count; applies one update per call to step().
class Optimizer {
 public:
  // The moments live in `memory`, beside the model's parameters.
  Optimizer(const OptimizerConfig& cfg, size_t num_params, Memory& memory = host_memory(), UpdateScope scope = {});
  // Clips and applies the gradients in model.grads; advances the step count.
  StepStats step(Backend& be, Gpt2& model) {
    return step(be, model, {model.param_data(), false}, {model.grad_data(), false});
  }
  // The same, on parameters and gradients held where `params` and `grads`
  // say (ZeRO-2 keeps the gradient shard packed, ZeRO-3 both).
  StepStats step(Backend& be, const Gpt2& model, StateAt params, StateAt grads);
  int64_t steps_done() const { return step_; }
  const OptimizerConfig& config() const { return cfg_; }
  // The moments to / from the host (checkpoints).
  std::vector<float> m_to_host() const { return m_.download(); }
  std::vector<float> v_to_host() const { return v_.download(); }
  void moments_from_host(std::span<const float> m, std::span<const float> v) {
    m_.upload(m);
    v_.upload(v);
  }
  // The moments where they live (the memory given to the constructor;
  // sharded checkpoints write and read host memory in place).
  float* m_data() const { return m_.data(); }
  float* v_data() const { return v_.data(); }
  void set_steps_done(int64_t s) { step_ = s; }
  const UpdateScope& scope() const { return scope_; }
  // Bytes of optimizer state this rank holds (the two moments).
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }

 private:
  OptimizerConfig cfg_;
  UpdateScope scope_;
  Buffer m_, v_;
  int64_t step_ = 0;
};

}  // namespace gpt2
