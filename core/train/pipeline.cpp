#include "train/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <deque>
#include <stdexcept>

namespace gpt2 {

const char* to_string(PipeOp op) {
  switch (op) {
    case PipeOp::kForward: return "F";
    case PipeOp::kBackward: return "BW";
    case PipeOp::kBackwardInput: return "B";
    case PipeOp::kBackwardWeight: return "W";
  }
  return "?";
}

const char* to_string(PipePhase ph) {
  switch (ph) {
    case PipePhase::kWarmup: return "warm-up";
    case PipePhase::kSteady: return "steady";
    case PipePhase::kCooldown: return "cool-down";
  }
  return "?";
}

std::vector<PipeAction> stage_schedule(ScheduleKind kind, int stages, int stage, int m) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1) {
    throw std::invalid_argument(fmt::format("stage_schedule: stage {} of {} with {} microbatches", stage, stages, m));
  }
  std::vector<PipeAction> out;
  if (kind == ScheduleKind::kGpipe) {
    for (int j = 0; j < m; ++j) out.push_back({PipeOp::kForward, j, PipePhase::kWarmup});
    for (int j = 0; j < m; ++j) out.push_back({PipeOp::kBackward, j, PipePhase::kCooldown});
    return out;
  }
  const bool split = kind == ScheduleKind::kZbH1;
  const int warmup = std::min(stages - stage - 1, m);
  // zb-h1: W of microbatch j runs after B of microbatch j + stage: the later
  // the stage, the longer its W waits, so that its B (which the stage before
  // waits for) goes first; with 1f1b's p - s - 1 warm-up forwards this holds
  // at most p microbatches on every stage. Every W left runs in the cool-down.
  const size_t delay = static_cast<size_t>(stage);
  std::deque<int> pending_w;
  auto backward = [&](int j, PipePhase ph) {
    if (!split) {
      out.push_back({PipeOp::kBackward, j, ph});
      return;
    }
    out.push_back({PipeOp::kBackwardInput, j, ph});
    pending_w.push_back(j);
    while (pending_w.size() > delay) {
      out.push_back({PipeOp::kBackwardWeight, pending_w.front(), ph});
      pending_w.pop_front();
    }
  };
  for (int j = 0; j < warmup; ++j) out.push_back({PipeOp::kForward, j, PipePhase::kWarmup});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({PipeOp::kForward, warmup + i, PipePhase::kSteady});
    backward(i, PipePhase::kSteady);
  }
  for (int j = m - warmup; j < m; ++j) backward(j, PipePhase::kCooldown);
  for (int j : pending_w) out.push_back({PipeOp::kBackwardWeight, j, PipePhase::kCooldown});
  return out;
}

std::vector<bool> stop_points(ScheduleKind kind, int stages, int m) {
  // Every message as (the sender's action index, the receiver's): a forward's
  // output to the next stage's forward, a backward's input gradient to the
  // stage before's backward (B of zb-h1).
  std::vector<std::pair<size_t, size_t>> messages;
  size_t n = 0, last_backward = SIZE_MAX;
  std::vector<std::vector<size_t>> fwd(static_cast<size_t>(stages)), bwd(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const std::vector<PipeAction> acts = stage_schedule(kind, stages, s, m);
    n = acts.size();
    fwd[static_cast<size_t>(s)].resize(static_cast<size_t>(m));
    bwd[static_cast<size_t>(s)].resize(static_cast<size_t>(m));
    size_t last = acts.size();
    for (size_t k = 0; k < acts.size(); ++k) {
      const size_t mb = static_cast<size_t>(acts[k].mb);
      if (acts[k].op == PipeOp::kForward) fwd[static_cast<size_t>(s)][mb] = k;
      if (acts[k].op == PipeOp::kBackward || acts[k].op == PipeOp::kBackwardInput) bwd[static_cast<size_t>(s)][mb] = k;
      if (acts[k].op == PipeOp::kBackward) last = k;
    }
    last_backward = std::min(last_backward, last);
  }
  for (size_t s = 0; s + 1 < static_cast<size_t>(stages); ++s) {
    for (size_t j = 0; j < static_cast<size_t>(m); ++j) {
      messages.emplace_back(fwd[s][j], fwd[s + 1][j]);
      messages.emplace_back(bwd[s + 1][j], bwd[s][j]);
    }
  }
  std::vector<bool> out(n, false);
  for (size_t k = 1; k < n && k <= last_backward; ++k) {
    out[k] = std::all_of(messages.begin(), messages.end(), [k](const auto& msg) {
      return (msg.first < k) == (msg.second < k);
    });
  }
  return out;
}

double schedule_bubble(ScheduleKind kind, int stages, int m) {
  const double p = stages, mb = m;
  return kind == ScheduleKind::kZbH1 ? (p - 1) / (3 * mb + p - 1) : (p - 1) / (mb + p - 1);
}

std::string schedule_bubble_formula(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 ? "(p-1)/(3m+p-1)" : "(p-1)/(m+p-1)";
}

int schedule_peak_in_flight(ScheduleKind kind, int stages, int m) {
  int peak = 0;
  for (int s = 0; s < stages; ++s) peak = std::max(peak, max_in_flight(stage_schedule(kind, stages, s, m)));
  return peak;
}

int max_in_flight(const std::vector<PipeAction>& actions) {
  int now = 0, peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::kForward) peak = std::max(peak, ++now);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --now;
  }
  return peak;
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int PipelineEngine::tree_buffers(int arenas, int m) {
  // At most `arenas` microbatches hold a gradient at once (from their B to their W), and before the last
  // fold the partial sums are popcount(microbatches done) <= log2(m) buffers.
  int log2m = 0;
  for (int leaves = 1; leaves < m; leaves <<= 1) ++log2m;
  return arenas + log2m;
}

// How the stage's microbatches' gradients and losses combine (MicrobatchSum).
// The engine calls these around its actions and never tests which it has.
class MicrobatchCombiner {
 public:
  virtual ~MicrobatchCombiner() = default;
  // Around each backward pass of microbatch `mb`; `first`: its B (or BW), where its gradient starts.
  virtual void bind(int mb, bool first) = 0;
  virtual void unbind() = 0;
  // Microbatch `mb`'s gradient is complete (after its BW, or its W).
  virtual void done(int mb) = 0;
  virtual void loss(int mb, double l) = 0;
  // After the step's last action (`grads`), or forward_loss's.
  virtual void finish(bool grads) = 0;
  virtual double loss_sum() const = 0;
};

namespace {

// kAccumulate: the backward's kernels add every microbatch's gradient into model.grads themselves.
class Accumulate final : public MicrobatchCombiner {
 public:
  void bind(int, bool) override {}
  void unbind() override {}
  void done(int) override {}
  void loss(int, double) override {}
  void finish(bool) override {}
  double loss_sum() const override { return 0.0; }
};

// kTree: each microbatch's gradient in a buffer of its own, folded into the balanced binary tree in
// microbatch order (a binary counter over the leaves); the losses in the same tree.
class Tree final : public MicrobatchCombiner {
 public:
  Tree(Backend& be, Gpt2& model, int stage, int stages, int m, int arenas)
      : be_(be), model_(model), stage_(stage), stages_(stages), m_(m), held_(static_cast<size_t>(m)),
        mb_loss_(static_cast<size_t>(m), 0.0) {
    if ((m & (m - 1)) != 0) {
      throw std::invalid_argument(fmt::format("train.deterministic: {} microbatches (a power of two)", m));
    }
    for (int i = 0; i < PipelineEngine::tree_buffers(arenas, m); ++i) {
      spare_.emplace_back(model.num_params(), model.memory());
    }
  }
  void bind(int mb, bool first) override {
    Buffer& g = held_[static_cast<size_t>(mb)];
    if (first) {
      g = spare();
      g.zero();
    }
    model_.bind_grads(g.data());
  }
  void unbind() override { model_.bind_grads(nullptr); }
  void done(int mb) override { fold(std::move(held_[static_cast<size_t>(mb)]), mb); }
  void loss(int mb, double l) override { mb_loss_[static_cast<size_t>(mb)] = l; }
  void finish(bool grads) override {
    if (grads) {
      if (sums_.size() != 1 || sums_[0].first != m_) {
        throw std::logic_error(fmt::format("pipeline stage {}: the microbatch tree did not close", stage_));
      }
      const int64_t n = static_cast<int64_t>(model_.num_params());
      be_.copy(Tensor(model_.grad_data(), {n}), Tensor(sums_[0].second.data(), {n}));
      spare_.push_back(std::move(sums_[0].second));
      sums_.clear();
    }
    loss_sum_ = stage_ == stages_ - 1 ? tree_sum(0, m_) : 0.0;
  }
  double loss_sum() const override { return loss_sum_; }

 private:
  Buffer spare() {
    if (spare_.empty()) throw std::logic_error("pipeline: no spare gradient buffer for the tree");
    Buffer b = std::move(spare_.back());
    spare_.pop_back();
    return b;
  }
  // Microbatch `mb`'s complete gradient joins the partial sums, and equal-sized neighbours are added;
  // std::logic_error unless it is the next microbatch in order.
  void fold(Buffer&& leaf, int mb) {
    int done = 0;  // microbatches already in the partial sums: the tree needs them in order
    for (const auto& s : sums_) done += s.first;
    if (mb != done) {
      throw std::logic_error(fmt::format("pipeline stage {}: microbatch {} completed before microbatch {} (the "
                                         "deterministic tree adds them in order)", stage_, mb, done));
    }
    sums_.emplace_back(1, std::move(leaf));
    const int64_t n = static_cast<int64_t>(model_.num_params());
    while (sums_.size() >= 2 && sums_[sums_.size() - 1].first == sums_[sums_.size() - 2].first) {
      auto& left = sums_[sums_.size() - 2];
      Buffer& right = sums_.back().second;
      const Tensor a(left.second.data(), {n}), b(right.data(), {n});
      be_.residual_forward(a, a, b);
      left.first *= 2;
      spare_.push_back(std::move(right));
      sums_.pop_back();
    }
  }
  double tree_sum(int lo, int n) const {  // mb_loss_[lo, lo + n) in the tree's order
    if (n == 1) return mb_loss_[static_cast<size_t>(lo)];
    const double left = tree_sum(lo, n / 2);
    return left + tree_sum(lo + n / 2, n / 2);
  }

  Backend& be_;
  Gpt2& model_;
  int stage_, stages_, m_;
  std::vector<Buffer> held_;                  // per microbatch: its gradient, from its B (or BW) until its W
  std::vector<Buffer> spare_;                 // free gradient buffers
  std::vector<std::pair<int, Buffer>> sums_;  // (leaves, their sum), in microbatch order
  std::vector<double> mb_loss_;
  double loss_sum_ = 0;
};

}  // namespace

PipelineEngine::PipelineEngine(Backend& be, Gpt2& model, Communicator& pp, ScheduleKind kind, int m, int rows, int T,
                               bool recompute, Dtype stored, MicrobatchSum sum, bool sequence_parallel,
                               const ContextCut& cp)
    : be_(be), model_(model), pp_(pp), kind_(kind), stages_(pp.size()), stage_(pp.rank()), m_(m), T_(T) {
  if (m < 1 || rows % m != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.microbatches {} does not divide the {} rows of each data-parallel replica", m, rows));
  }
  // The model holds this stage's layers (train/stage_split.h chose them): the embedding on the first, the head on the last.
  const StageLayers& held = model.stage();
  if (held.embed != (stage_ == 0) || held.head != (stage_ == stages_ - 1) || held.end(model.config().L) <= held.first) {
    throw std::invalid_argument(fmt::format("pipeline stage {} of {}: the model holds layers [{}, {}){}{}", stage_,
                                            stages_, held.first, held.end(model.config().L),
                                            held.embed ? " with the embedding" : "", held.head ? " with the head" : ""));
  }
  mb_rows_ = rows / m;
  actions_ = stage_schedule(kind, stages_, stage_, m);
  stop_points_ = stop_points(kind, stages_, m);
  const int n = max_in_flight(actions_);
  for (int i = 0; i < n; ++i) {
    Slot s;
    s.arena = std::make_unique<ActivationArena>(model, mb_rows_, T, kind == ScheduleKind::kZbH1, recompute, stored,
                                                sequence_parallel, cp);
    arena_bytes_ = s.arena->bytes();
    arenas_.push_back(std::move(s));
  }
  switch (sum) {
    case MicrobatchSum::kAccumulate: sum_ = std::make_unique<Accumulate>(); break;
    case MicrobatchSum::kTree: sum_ = std::make_unique<Tree>(be, model, stage_, stages_, m, n); break;
  }
}

PipelineEngine::~PipelineEngine() = default;

double PipelineEngine::loss_sum() const { return sum_->loss_sum(); }

double PipelineEngine::now_ms() const { return static_cast<double>(steady_ns() - t0_ns_) * 1e-6; }

void PipelineEngine::event(const char* kind, int mb, double t0, double t1) { events_.push_back({kind, mb, t0, t1}); }

void PipelineEngine::wait_sends(Slot& slot) {
  if (slot.sends.empty()) return;
  const double t0 = now_ms();
  for (uint64_t t : slot.sends) pp_.wait_send(t);
  slot.sends.clear();
  const double t1 = now_ms();
  wait_s_ += (t1 - t0) * 1e-3;
  event("send", slot.mb >= 0 ? slot.mb : slot.last_mb, t0, t1);
}

PipelineEngine::Slot& PipelineEngine::take(int mb) {
  for (Slot& s : arenas_) {
    if (s.mb >= 0) continue;
    wait_sends(s);
    s.mb = mb;
    peak_ = std::max(peak_, ++in_use_);
    return s;
  }
  throw std::logic_error(fmt::format("pipeline stage {}: no free activation arena for microbatch {} ({} allocated)",
                                     stage_, mb, arenas_.size()));
}

PipelineEngine::Slot& PipelineEngine::holding(int mb) {
  for (Slot& s : arenas_) {
    if (s.mb == mb) return s;
  }
  throw std::logic_error(fmt::format("pipeline stage {}: microbatch {} holds no arena", stage_, mb));
}

void PipelineEngine::release(Slot& slot) {
  slot.last_mb = slot.mb;
  slot.mb = -1;
  --in_use_;
}

void PipelineEngine::timed_recv(Tensor into, int peer, int mb) {
  const double t0 = now_ms();
  pp_.recv(into.data, static_cast<size_t>(into.numel()), peer);
  const double t1 = now_ms();
  wait_s_ += (t1 - t0) * 1e-3;
  event("recv", mb, t0, t1);
}

size_t PipelineEngine::token_offset(int mb) const {
  return static_cast<size_t>(mb) * static_cast<size_t>(mb_rows_) * static_cast<size_t>(T_);
}

double PipelineEngine::forward(Slot& slot, const int32_t* inputs, const int32_t* targets) {
  Activations& a = slot.arena->acts();
  const size_t off = token_offset(slot.mb);
  if (stage_ > 0) timed_recv(a.encoded, stage_ - 1, slot.mb);
  const double t0 = now_ms();
  const bool last = stage_ == stages_ - 1;
  const double loss = gpt2_forward(be_, model_, a, inputs + off, last && targets ? targets + off : nullptr);
  event("F", slot.mb, t0, now_ms());
  if (!last) {
    const Tensor out = a.layers[static_cast<size_t>(model_.stage().last - 1)].residual3;
    slot.sends.push_back(pp_.start_send(out.data, static_cast<size_t>(out.numel()), stage_ + 1));
  }
  return loss;
}

void PipelineEngine::backward(Slot& slot, const int32_t* inputs, const int32_t* targets, float dloss,
                              BackwardPart part, GradReadyHook* hook) {
  Activations& a = slot.arena->acts();
  const size_t off = token_offset(slot.mb);
  const bool weights_only = part == BackwardPart::kWeight;
  // B overwrites the forward's output (the split keeps a gradient there):
  // its send must be done. (Its receiver took it before sending the
  // gradient this backward needs, so this does not wait.)
  if (!weights_only) wait_sends(slot);
  if (!weights_only && stage_ < stages_ - 1) timed_recv(a.dresidual, stage_ + 1, slot.mb);
  const double t0 = now_ms();
  gpt2_backward(be_, model_, a, inputs + off, targets + off, dloss, hook, part);
  event(part == BackwardPart::kAll ? "BW" : weights_only ? "W" : "B", slot.mb, t0, now_ms());
  if (!weights_only && stage_ > 0) {
    slot.sends.push_back(pp_.start_send(a.dresidual.data, static_cast<size_t>(a.dresidual.numel()), stage_ - 1));
  }
}

double PipelineEngine::step(const int32_t* inputs, const int32_t* targets, float dloss, GradReadyHook* hook,
                            StepInterrupt* interrupt) {
  t0_ns_ = steady_ns();
  events_.clear();
  wait_s_ = 0;
  peak_ = 0;
  double loss = 0;
  // The stage's last whole backward: after it every gradient is final.
  size_t last_backward = actions_.size();
  for (size_t k = 0; k < actions_.size(); ++k) {
    if (actions_[k].op == PipeOp::kBackward) last_backward = k;
  }
  // The combiner's hold on the gradient around each of a microbatch's passes (kTree: its own buffer,
  // zeroed at its B or BW).
  auto bound = [&](Slot& s, bool first, auto&& pass) {
    sum_->bind(s.mb, first);
    pass();
    sum_->unbind();
  };
  for (size_t k = 0; k < actions_.size(); ++k) {
    const PipeAction& act = actions_[k];
    if (interrupt != nullptr && stop_points_[k] && interrupt->stop_now()) {
      for (Slot& s : arenas_) wait_sends(s);
      throw StepAbandoned();
    }
    switch (act.op) {
      case PipeOp::kForward: {
        const double l = forward(take(act.mb), inputs, targets);
        sum_->loss(act.mb, l);
        loss += l;
        break;
      }
      case PipeOp::kBackward: {
        Slot& s = holding(act.mb);
        bound(s, true, [&] {
          backward(s, inputs, targets, dloss, BackwardPart::kAll, k == last_backward ? hook : nullptr);
        });
        sum_->done(act.mb);
        release(s);
        break;
      }
      case PipeOp::kBackwardInput: {
        Slot& s = holding(act.mb);
        bound(s, true, [&] { backward(s, inputs, targets, dloss, BackwardPart::kInput); });
        break;
      }
      case PipeOp::kBackwardWeight: {
        Slot& s = holding(act.mb);
        bound(s, false, [&] { backward(s, inputs, targets, dloss, BackwardPart::kWeight); });
        sum_->done(act.mb);
        release(s);
        break;
      }
    }
  }
  for (Slot& s : arenas_) wait_sends(s);
  sum_->finish(true);
  return stage_ == stages_ - 1 ? loss / m_ : 0.0;
}

double PipelineEngine::forward_loss(const int32_t* inputs, const int32_t* targets) {
  t0_ns_ = steady_ns();
  events_.clear();
  wait_s_ = 0;
  double loss = 0;
  for (int j = 0; j < m_; ++j) {
    Slot& s = take(j);
    const double l = forward(s, inputs, targets);
    sum_->loss(j, l);
    loss += l;
    release(s);
  }
  for (Slot& s : arenas_) wait_sends(s);
  sum_->finish(false);
  return stage_ == stages_ - 1 ? loss / m_ : 0.0;
}

}  // namespace gpt2
