#include "train/schedule/lists.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <utility>

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

int max_in_flight(const std::vector<PipeAction>& actions) {
  int now = 0, peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::kForward) peak = std::max(peak, ++now);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --now;
  }
  return peak;
}

}  // namespace gpt2
