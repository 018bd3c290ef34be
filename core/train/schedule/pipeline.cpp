#include "train/schedule/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <deque>
#include <stdexcept>


namespace gpt2 {

double schedule_bubble(ScheduleKind kind, int stages, int m, int v, const PassTimes& t) {
  const double p = stages, mb = m;
  switch (kind) {
    case ScheduleKind::kZbH1: return (p - 1) / (3 * mb + p - 1);
    case ScheduleKind::kInterleaved1F1B: return (p - 1) / (v * mb + p - 1);
    case ScheduleKind::kZbV: {  // its lists on the simulator at the times they were built for: the most any rank idles
      const ScheduleRun run = simulate_schedule(zb_v_lists(stages, m, 0, t), 2 * stages, v_shape_stage, stages, t);
      return *std::max_element(run.bubble.begin(), run.bubble.end());
    }
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B: break;
  }
  return (p - 1) / (mb + p - 1);
}

std::string schedule_bubble_formula(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kZbH1: return "(p-1)/(3m+p-1)";
    case ScheduleKind::kInterleaved1F1B: return "(p-1)/(vm+p-1)";
    case ScheduleKind::kZbV: return "its lists simulated at the counted F:B:W; (p-1)/(6m+p-1) at 1:1:1, m >= 2p";
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B: break;
  }
  return "(p-1)/(m+p-1)";
}

int schedule_peak_in_flight(ScheduleKind kind, int stages, int m, int v, const PassTimes& t) {
  int peak = 0;
  for (const std::vector<ChunkAction>& list : schedule_lists(kind, stages, v, m, t)) {
    const std::vector<int> per_chunk = chunk_in_flight(list, v);
    int total = 0;
    for (int n : per_chunk) total += n;
    peak = std::max(peak, total);
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
  Tree(Backend& be, Gpt2& model, int stage, bool head, int m, int arenas)
      : be_(be), model_(model), stage_(stage), head_(head), m_(m), held_(static_cast<size_t>(m)),
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
    loss_sum_ = head_ ? tree_sum(0, m_) : 0.0;
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
  int stage_;
  bool head_;  // the rank holds the head: the losses are its
  int m_;
  std::vector<Buffer> held_;                  // per microbatch: its gradient, from its B (or BW) until its W
  std::vector<Buffer> spare_;                 // free gradient buffers
  std::vector<std::pair<int, Buffer>> sums_;  // (leaves, their sum), in microbatch order
  std::vector<double> mb_loss_;
  double loss_sum_ = 0;
};

}  // namespace

PipelineEngine::PipelineEngine(Backend& be, Gpt2& model, Communicator& pp, const StageSplit& split, ScheduleKind kind,
                               int m, const ArenaSpec& microbatch, MicrobatchSum sum)
    : be_(be), model_(model), pp_(pp), kind_(kind), split_(split), stages_(pp.size()), stage_(pp.rank()), m_(m),
      T_(microbatch.seq_len) {
  if (m < 1 || microbatch.rows < 1) {
    throw std::invalid_argument(fmt::format("pipeline: {} microbatches of {} rows", m, microbatch.rows));
  }
  const int L = model.config().L;
  if (split_.counts.empty()) split_.counts = {L};
  if (split_.ranks != stages_) {
    throw std::invalid_argument(fmt::format("pipeline: the split places {} ranks, the group has {}", split_.ranks, stages_));
  }
  // The model holds this rank's layers (train/schedule/stage_split.h chose them): the embedding with the first virtual
  // stage, the head with the last.
  const StageLayers& held = model.stage();
  if (!(held == split_.held(stage_)) && !(stages_ == 1 && held.whole(L))) {
    throw std::invalid_argument(fmt::format("pipeline rank {} of {}: the model holds layers [{}, {}){}{}, not its "
                                            "split's", stage_, stages_, held.first, held.end(L),
                                            held.embed ? " with the embedding" : "", held.head ? " with the head" : ""));
  }
  const int v = split_.chunks();
  const std::vector<int> mine = split_.stages_of(stage_);
  for (int c = 0; c < v; ++c) {
    chunks_.push_back(held.chunk(c, L));
    virtual_stage_.push_back(mine[static_cast<size_t>(c)]);
  }
  mb_rows_ = microbatch.rows;
  const std::vector<std::vector<ChunkAction>> lists = schedule_lists(kind, stages_, v, m, split_.passes);
  actions_ = lists[static_cast<size_t>(stage_)];
  stop_points_ = v == 1 ? stop_points(kind, stages_, m) : chunk_stop_points(lists, split_.placement(), stages_);
  // Each chunk's microbatches must run in order, forwards and backwards: its messages on a stream arrive so.
  for (int c = 0; c < v; ++c) {
    int f = 0, b = 0;
    for (const ChunkAction& a : actions_) {
      if (a.chunk != c) continue;
      if ((a.op == PipeOp::kForward && a.mb != f++) ||
          ((a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardInput) && a.mb != b++)) {
        throw std::logic_error(fmt::format("pipeline rank {}: chunk {}'s microbatches out of order in the {} list",
                                           stage_, c, to_string(kind)));
      }
    }
  }
  const std::vector<int> per_chunk = chunk_in_flight(actions_, v);
  for (int c = 0; c < v; ++c) {
    for (int i = 0; i < per_chunk[static_cast<size_t>(c)]; ++i) {
      Slot s;
      s.chunk = c;
      s.arena = std::make_unique<ActivationArena>(model, microbatch, &chunks_[static_cast<size_t>(c)]);
      activation_bytes_ += s.arena->bytes();
      if (s.arena->bytes() > arena_bytes_) {
        arena_bytes_ = s.arena->bytes();
        largest_kinds_ = &s.arena->kinds();
      }
      arenas_.push_back(std::move(s));
    }
  }
  arena_count_ = static_cast<int>(arenas_.size());
  if (largest_kinds_ == nullptr) largest_kinds_ = &arenas_.front().arena->kinds();
  switch (sum) {
    case MicrobatchSum::kAccumulate: sum_ = std::make_unique<Accumulate>(); break;
    case MicrobatchSum::kTree:
      sum_ = std::make_unique<Tree>(be, model, stage_, held.head, m, arena_count_);
      break;
  }
}

PipelineEngine::~PipelineEngine() = default;

double PipelineEngine::loss_sum() const { return sum_->loss_sum(); }

double PipelineEngine::now_ms() const { return static_cast<double>(steady_ns() - t0_ns_) * 1e-6; }

void PipelineEngine::event(const char* kind, const Slot& slot, double t0, double t1) {
  events_.push_back({kind, slot.mb >= 0 ? slot.mb : slot.last_mb, virtual_stage_[static_cast<size_t>(slot.chunk)], t0,
                     t1});
}

void PipelineEngine::wait_sends(Slot& slot) {
  if (slot.sends.empty()) return;
  const double t0 = now_ms();
  for (uint64_t t : slot.sends) pp_.wait_send(t);
  slot.sends.clear();
  const double t1 = now_ms();
  wait_s_ += (t1 - t0) * 1e-3;
  event("send", slot, t0, t1);
}

PipelineEngine::Slot& PipelineEngine::take(int mb, int chunk) {
  for (Slot& s : arenas_) {
    if (s.mb >= 0 || s.chunk != chunk) continue;
    wait_sends(s);
    s.mb = mb;
    peak_ = std::max(peak_, ++in_use_);
    return s;
  }
  throw std::logic_error(fmt::format("pipeline stage {}: no free activation arena for microbatch {} of chunk {} ({} "
                                     "allocated)", stage_, mb, chunk, arenas_.size()));
}

PipelineEngine::Slot& PipelineEngine::holding(int mb, int chunk) {
  for (Slot& s : arenas_) {
    if (s.mb == mb && s.chunk == chunk) return s;
  }
  throw std::logic_error(fmt::format("pipeline stage {}: microbatch {} holds no arena of chunk {}", stage_, mb, chunk));
}

void PipelineEngine::release(Slot& slot) {
  slot.last_mb = slot.mb;
  slot.mb = -1;
  --in_use_;
}

void PipelineEngine::timed_recv(Tensor into, int peer, int stream, const Slot& slot) {
  const double t0 = now_ms();
  if (stream == 0) {
    pp_.recv(into.data, static_cast<size_t>(into.numel()), peer);
  } else {
    pp_.wait_recv(pp_.start_recv(into.data, static_cast<size_t>(into.numel()), peer, stream));
  }
  const double t1 = now_ms();
  wait_s_ += (t1 - t0) * 1e-3;
  event("recv", slot, t0, t1);
}

size_t PipelineEngine::token_offset(int mb) const {
  return static_cast<size_t>(mb) * static_cast<size_t>(mb_rows_) * static_cast<size_t>(T_);
}

double PipelineEngine::forward(Slot& slot, const int32_t* inputs, const int32_t* targets) {
  Activations& a = slot.arena->acts();
  const size_t off = token_offset(slot.mb);
  const int s = virtual_stage_[static_cast<size_t>(slot.chunk)], S = static_cast<int>(split_.counts.size());
  if (s > 0) {  // the previous virtual stage's output: from its rank, or this rank's other chunk's arena
    const int from = split_.rank_of(s - 1), chunk = split_.chunk_of(s - 1);
    if (from != stage_) {
      timed_recv(a.encoded, from, forward_stream(chunk), slot);
    } else {
      const Activations& prev = holding(slot.mb, chunk).arena->acts();
      be_.copy(a.encoded, prev.layers[static_cast<size_t>(prev.last - 1)].residual3);
    }
  }
  const double t0 = now_ms();
  const double loss = gpt2_forward(be_, model_, a, inputs + off, a.head && targets ? targets + off : nullptr);
  event("F", slot, t0, now_ms());
  if (s + 1 < S && split_.rank_of(s + 1) != stage_) {
    const Tensor out = a.layers[static_cast<size_t>(a.last - 1)].residual3;
    slot.sends.push_back(pp_.start_send(out.data, static_cast<size_t>(out.numel()), split_.rank_of(s + 1),
                                        forward_stream(slot.chunk)));
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
  const int s = virtual_stage_[static_cast<size_t>(slot.chunk)], S = static_cast<int>(split_.counts.size());
  if (!weights_only) wait_sends(slot);
  // The gradient at the output: from the next virtual stage's rank (on this rank, its B put it here already).
  if (!weights_only && s + 1 < S && split_.rank_of(s + 1) != stage_) {
    timed_recv(a.dresidual, split_.rank_of(s + 1), backward_stream(split_.chunk_of(s + 1)), slot);
  }
  const double t0 = now_ms();
  gpt2_backward(be_, model_, a, inputs + off, targets + off, dloss, hook, part);
  event(part == BackwardPart::kAll ? "BW" : weights_only ? "W" : "B", slot, t0, now_ms());
  if (!weights_only && s > 0) {
    const int to = split_.rank_of(s - 1);
    if (to != stage_) {
      slot.sends.push_back(pp_.start_send(a.dresidual.data, static_cast<size_t>(a.dresidual.numel()), to,
                                          backward_stream(slot.chunk)));
    } else {  // the previous virtual stage is this rank's: into its arena, where its B reads it
      be_.copy(holding(slot.mb, split_.chunk_of(s - 1)).arena->acts().dresidual, a.dresidual);
    }
  }
}

double PipelineEngine::step(const int32_t* inputs, const int32_t* targets, float dloss, GradReadyHook* hook,
                            StepInterrupt* interrupt) {
  t0_ns_ = steady_ns();
  events_.clear();
  wait_s_ = 0;
  peak_ = 0;
  double loss = 0;
  // The stage's last whole backward: after it every gradient is final (one chunk a rank: with several, a
  // chunk's gradients are final after its own last backward, which the hook does not tell apart).
  size_t last_backward = actions_.size();
  for (size_t k = 0; k < actions_.size() && chunks() == 1; ++k) {
    if (actions_[k].op == PipeOp::kBackward) last_backward = k;
  }
  // Per microbatch, its chunks' backwards still to complete (a BW or a W each): its gradient starts at the
  // first (kTree: its own buffer, zeroed) and is complete after the last.
  passes_left_.assign(static_cast<size_t>(m_), chunks());
  started_.assign(static_cast<size_t>(m_), 0);
  // The combiner's hold on the gradient around each of a microbatch's passes.
  auto bound = [&](Slot& s, bool may_start, auto&& pass) {
    const bool first = may_start && started_[static_cast<size_t>(s.mb)] == 0;
    started_[static_cast<size_t>(s.mb)] = 1;
    sum_->bind(s.mb, first);
    pass();
    sum_->unbind();
  };
  auto complete = [&](Slot& s) {
    if (--passes_left_[static_cast<size_t>(s.mb)] == 0) sum_->done(s.mb);
  };
  for (size_t k = 0; k < actions_.size(); ++k) {
    const ChunkAction& act = actions_[k];
    if (interrupt != nullptr && stop_points_[k] && interrupt->stop_now()) {
      for (Slot& s : arenas_) wait_sends(s);
      throw StepAbandoned();
    }
    switch (act.op) {
      case PipeOp::kForward: {
        Slot& s = take(act.mb, act.chunk);
        const double l = forward(s, inputs, targets);
        if (s.arena->acts().head) {  // the loss is the head's chunk's
          sum_->loss(act.mb, l);
          loss += l;
        }
        break;
      }
      case PipeOp::kBackward: {
        Slot& s = holding(act.mb, act.chunk);
        bound(s, true, [&] {
          backward(s, inputs, targets, dloss, BackwardPart::kAll, k == last_backward ? hook : nullptr);
        });
        complete(s);
        release(s);
        break;
      }
      case PipeOp::kBackwardInput: {
        Slot& s = holding(act.mb, act.chunk);
        bound(s, true, [&] { backward(s, inputs, targets, dloss, BackwardPart::kInput); });
        break;
      }
      case PipeOp::kBackwardWeight: {
        Slot& s = holding(act.mb, act.chunk);
        bound(s, false, [&] { backward(s, inputs, targets, dloss, BackwardPart::kWeight); });
        complete(s);
        release(s);
        break;
      }
    }
  }
  for (Slot& s : arenas_) wait_sends(s);
  sum_->finish(true);
  return model_.stage().head ? loss / m_ : 0.0;
}

double PipelineEngine::forward_loss(const int32_t* inputs, const int32_t* targets) {
  t0_ns_ = steady_ns();
  events_.clear();
  wait_s_ = 0;
  double loss = 0;
  // Every microbatch through this rank's chunks in layer order, which is their virtual stages' (each waits for
  // the one before, wherever it is).
  for (int j = 0; j < m_; ++j) {
    for (int c = 0; c < chunks(); ++c) {
      Slot& s = take(j, c);
      const double l = forward(s, inputs, targets);
      if (s.arena->acts().head) {
        sum_->loss(j, l);
        loss += l;
      }
    }
    for (int c = 0; c < chunks(); ++c) release(holding(j, c));
  }
  for (Slot& s : arenas_) wait_sends(s);
  sum_->finish(false);
  return model_.stage().head ? loss / m_ : 0.0;
}

}  // namespace gpt2
