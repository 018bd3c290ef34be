#include "model/optim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <span>
#include <stdexcept>

#include "kernels/exact_sum.h"

namespace gpt2 {

OptimizerConfig OptimizerConfig::original() { return OptimizerConfig{}; }

OptimizerConfig OptimizerConfig::adamw() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdamW;
  c.lr = 3e-4f;
  c.min_lr = 3e-5f;
  c.warmup_steps = 10;
  c.decay_steps = 1000;
  c.weight_decay = 0.1f;
  return c;
}

void OptimizerConfig::validate() const {
  auto fail = [](const char* key, const std::string& what) {
    throw std::invalid_argument(fmt::format("optimizer.{}: {}", key, what));
  };
  if (!(lr > 0)) fail("lr", fmt::format("must be positive, got {}", lr));
  if (!(min_lr >= 0 && min_lr <= lr)) fail("min_lr", fmt::format("must be in [0, lr], got {}", min_lr));
  if (decay_steps <= 0) fail("decay_steps", fmt::format("must be positive, got {}", decay_steps));
  if (warmup_steps < 0) fail("warmup_steps", fmt::format("must be >= 0, got {}", warmup_steps));
  if (!(beta1 >= 0 && beta1 < 1)) fail("beta1", fmt::format("must be in [0, 1), got {}", beta1));
  if (!(beta2 >= 0 && beta2 < 1)) fail("beta2", fmt::format("must be in [0, 1), got {}", beta2));
  if (!(eps > 0)) fail("eps", fmt::format("must be positive, got {}", eps));
  if (!(weight_decay >= 0)) fail("weight_decay", fmt::format("must be >= 0, got {}", weight_decay));
  if (!(grad_clip >= 0)) fail("grad_clip", fmt::format("must be >= 0 (0 turns clipping off), got {}", grad_clip));
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "adam_original") return OptimizerKind::kOriginalAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  throw std::invalid_argument(
      fmt::format("optimizer.kind: expected 'adam_original' or 'adamw', got '{}'", name));
}

std::string to_string(OptimizerKind kind) {
  return kind == OptimizerKind::kOriginalAdam ? "adam_original" : "adamw";
}

double learning_rate(const OptimizerConfig& c, int64_t step) {
  const double lr = c.lr, min_lr = c.min_lr;
  if (c.kind == OptimizerKind::kOriginalAdam) {
    double frac = static_cast<double>(std::min(step, c.decay_steps)) / static_cast<double>(c.decay_steps);
    return lr - (lr - min_lr) * frac;
  }
  if (step < c.warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  if (step >= c.decay_steps) return min_lr;
  double span = static_cast<double>(std::max<int64_t>(c.decay_steps - c.warmup_steps, 1));
  double frac = static_cast<double>(step - c.warmup_steps) / span;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * frac));
}

namespace {
// The squared norm of the whole model's gradient, every parameter counted
// once: with tensor parallelism the shards' sums are added over the group
// and the replicated tensors (equal on every rank) are counted once; a
// pipeline stage's and a ZeRO shard's sums are added over their groups.
// Calls f(info, lo, hi) for the part [lo, hi) of each tensor inside the
// scope's range of the flat buffer (the whole tensor without ZeRO).
template <typename F>
void for_each_in_scope(const Gpt2& model, const UpdateScope& scope, F&& f) {
  const ShardRange whole{0, SIZE_MAX, 0};
  const std::span<const ShardRange> ranges =
      scope.ranges.empty() ? std::span<const ShardRange>(&whole, 1) : std::span<const ShardRange>(scope.ranges);
  for (const ShardRange& r : ranges) {
    for (const ParamInfo& info : model.infos()) {
      const size_t numel = static_cast<size_t>(info.view->numel());
      const size_t lo = std::max(info.offset, r.lo), hi = std::min(info.offset + numel, r.hi);
      if (lo < hi) f(info, r, lo, hi);
    }
  }
}

// x summed over `group` exactly: the digits travel as floats whose sums stay exact.
ExactSquares summed_over(TpGroup* group, const ExactSquares& x) {
  if (group == nullptr || group->size() == 1) return x;
  if (group->size() > ExactSquares::kMaxRanks) {
    throw std::invalid_argument(fmt::format("train.deterministic: the exact gradient norm sums over at most {} ranks "
                                            "of a group, not {}", ExactSquares::kMaxRanks, group->size()));
  }
  std::array<float, ExactSquares::kFloats> f = x.to_floats();
  group->allreduce_sum(Tensor(f.data(), {static_cast<int64_t>(f.size())}));
  ExactSquares out;
  out.add_floats(f);
  return out;
}

// The same sum as grad_sum_squares's, exact (UpdateScope::exact_norm).
double exact_grad_sum_squares(const Gpt2& model, const UpdateScope& scope, StateAt grads) {
  const TpPlace& tp = model.tp();
  ExactSquares sharded, replicated;
  for_each_in_scope(model, scope, [&](const ParamInfo& info, const ShardRange& r, size_t lo, size_t hi) {
    (info.split == TpSplit::kNone ? replicated : sharded).add({grads.at(r, lo), hi - lo});
  });
  ExactSquares total = summed_over(tp.size > 1 ? tp.group : nullptr, sharded);
  total.add_floats(replicated.to_floats());
  total = summed_over(scope.shards, total);
  return summed_over(scope.stages, total).value();
}

double grad_sum_squares(Backend& be, const Gpt2& model, size_t n, const UpdateScope& scope, StateAt grads) {
  if (scope.exact_norm) return exact_grad_sum_squares(model, scope, grads);
  const TpPlace& tp = model.tp();
  double total = 0;
  if (tp.size == 1 && scope.ranges.empty() && !grads.packed) {
    total = be.sum_squares(Tensor(grads.base, {static_cast<int64_t>(n)}));  // one sum, as ever
  } else {
    double sharded = 0, replicated = 0;
    for_each_in_scope(model, scope, [&](const ParamInfo& info, const ShardRange& r, size_t lo, size_t hi) {
      const Tensor g(grads.at(r, lo), {static_cast<int64_t>(hi - lo)});
      (info.split == TpSplit::kNone ? replicated : sharded) += be.sum_squares(g);
    });
    total = (tp.size > 1 ? tp.group->allreduce_sum(sharded) : sharded) + replicated;
  }
  if (scope.shards) total = scope.shards->allreduce_sum(total);
  if (scope.stages) total = scope.stages->allreduce_sum(total);
  return total;
}

}  // namespace

size_t scope_floats(const UpdateScope& scope, size_t num_params) {
  if (scope.ranges.empty()) return num_params;
  size_t floats = 0;
  for (const ShardRange& r : scope.ranges) {
    if (r.lo > r.hi || r.hi > num_params) {
      throw std::invalid_argument(fmt::format("optimizer shard [{}, {}) outside the {} parameters", r.lo, r.hi,
                                              num_params));
    }
    floats = std::max(floats, r.pos + (r.hi - r.lo));
  }
  return floats;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, size_t num_params, Memory& memory, UpdateScope scope)
    : cfg_(cfg),
      scope_(scope),
      m_(scope_floats(scope, num_params), memory),
      v_(scope_floats(scope, num_params), memory) {
  cfg_.validate();
}

StepStats Optimizer::step(Backend& be, const Gpt2& model, StateAt params, StateAt grads) {
  StepStats s;
  const size_t n = model.num_params();
  s.lr = learning_rate(cfg_, step_);
  s.grad_norm = std::sqrt(grad_sum_squares(be, model, n, scope_, grads));
  if (cfg_.grad_clip > 0) s.grad_scale = std::min(1.0, cfg_.grad_clip / (s.grad_norm + 1e-6));

  const double t = static_cast<double>(step_ + 1);
  const double bc1 = 1.0 - std::pow(static_cast<double>(cfg_.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(cfg_.beta2), t);
  AdamCoefficients k;
  k.beta1 = cfg_.beta1;
  k.beta2 = cfg_.beta2;
  k.eps = cfg_.eps;
  k.grad_scale = static_cast<float>(s.grad_scale);
  if (cfg_.kind == OptimizerKind::kOriginalAdam) {
    k.step_size = static_cast<float>(s.lr * std::sqrt(bc2) / bc1);
    k.v_scale = 1.0f;
  } else {
    k.step_size = static_cast<float>(s.lr / bc1);
    k.v_scale = static_cast<float>(1.0 / std::sqrt(bc2));
  }
  const float decay = static_cast<float>(1.0 - s.lr * cfg_.weight_decay);
  // Element by element, so a tensor's part is updated as a flat range: with
  // ZeRO only the parts inside this rank's shard, its moments packed.
  for_each_in_scope(model, scope_, [&](const ParamInfo& info, const ShardRange& r, size_t lo, size_t hi) {
    k.decay_factor = info.decay ? decay : 1.0f;
    const int64_t len = static_cast<int64_t>(hi - lo);
    const size_t mo = r.pos + (lo - r.lo);
    be.adam_update(Tensor(params.at(r, lo), {len}), Tensor(grads.at(r, lo), {len}), Tensor(m_.data() + mo, {len}),
                   Tensor(v_.data() + mo, {len}), k);
  });
  ++step_;
  return s;
}

}  // namespace gpt2
