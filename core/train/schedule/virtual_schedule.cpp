#include "train/schedule/virtual_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

namespace gpt2 {


namespace {

constexpr double kZbvEps = 1e-9;  // times are sums of pass times: two equal ones may differ by rounding

// When each of ZB-V's passes finished (F, and B: input gradients), by
// (microbatch, virtual stage); -1 while not done.
struct ZbvEnds {
  ZbvEnds(int stages, int microbatches)
      : m(microbatches), f_end(static_cast<size_t>(stages * microbatches), -1), b_end(f_end) {}
  size_t at(int mb, int s) const { return static_cast<size_t>(s * m + mb); }
  int m;
  std::vector<double> f_end, b_end;
};

// One rank of ZB-V's simulation.
struct ZbvRank {
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};  // the next microbatch of each chunk to run F and B on
  std::deque<std::pair<int, int>> w;           // (microbatch, chunk) whose W is pending, oldest first
  int held = 0;
  double free_at = 0;
};

// What rank r of p (its state k) runs at time t, holding at most cap
// forwards; nothing while no pass of it is ready.
std::optional<ChunkAction> zb_v_pick(const ZbvRank& k, const ZbvEnds& e, int p, int r, int cap, double t) {
  const int m = e.m, S = 2 * p;
  const auto done_by = [&](const std::vector<double>& end, int mb, int s) {
    return end[e.at(mb, s)] >= 0 && end[e.at(mb, s)] <= t + kZbvEps;
  };
  std::optional<ChunkAction> pick;
  // B first, chunk 0's before chunk 1's: a chunk-0 B feeds the rank before, the backward's last legs, on
  // which every rank ends (measured on the simulator: p 4, m 8 takes 51 units this way, 52 the other).
  for (int chunk : {0, 1}) {
    const int mb = k.next_b[chunk], s = v_shape_stage(p, r, chunk);
    if (!pick && mb < m && done_by(e.f_end, mb, s) && (s + 1 == S || done_by(e.b_end, mb, s + 1))) {
      pick = ChunkAction{PipeOp::kBackwardInput, mb, chunk};
    }
  }
  // Then F while the memory allows, chunk 1's first (chunk 0's first fills the memory with forwards whose
  // backwards cannot start: a deadlock).
  for (int chunk : {1, 0}) {
    const int mb = k.next_f[chunk], s = v_shape_stage(p, r, chunk);
    if (!pick && k.held < cap && mb < m && (s == 0 || done_by(e.f_end, mb, s - 1))) {
      pick = ChunkAction{PipeOp::kForward, mb, chunk};
    }
  }
  if (!pick && !k.w.empty()) pick = ChunkAction{PipeOp::kBackwardWeight, k.w.front().first, k.w.front().second};
  return pick;
}

// Rank r of p (its state k) runs `pick` from time t: when it ends, and what
// the rank holds and has pending after it.
void zb_v_run(const ChunkAction& pick, ZbvRank& k, ZbvEnds& e, int p, int r, const PassTimes& times, double t) {
  const int s = v_shape_stage(p, r, pick.chunk);
  double length = times.weight;
  if (pick.op == PipeOp::kForward) {
    length = times.forward;
    e.f_end[e.at(pick.mb, s)] = t + length;
    ++k.next_f[pick.chunk];
    ++k.held;
  } else if (pick.op == PipeOp::kBackwardInput) {
    length = times.input;
    e.b_end[e.at(pick.mb, s)] = t + length;
    ++k.next_b[pick.chunk];
    k.w.emplace_back(pick.mb, pick.chunk);
  } else {
    k.w.pop_front();
    --k.held;
  }
  k.free_at = t + length;
}

}  // namespace

std::vector<std::vector<ChunkAction>> zb_v_lists(int p, int m, int cap, const PassTimes& times) {
  if (p < 1 || m < 1) throw std::invalid_argument(fmt::format("zb_v_lists: {} stages, {} microbatches", p, m));
  if (!(times.forward > 0 && times.input > 0 && times.weight > 0)) {
    throw std::invalid_argument("zb_v_lists: pass times must be positive");
  }
  if (cap <= 0) cap = 2 * p;
  const int S = 2 * p;  // virtual stages
  ZbvEnds e(S, m);
  std::vector<ZbvRank> ranks(static_cast<size_t>(p));
  std::vector<std::vector<ChunkAction>> lists(static_cast<size_t>(p));
  std::multiset<double> ends;  // every pass's end so far: when a waiting rank looks again
  int left = 3 * S * m;  // passes still to run
  for (int rounds = 0; left > 0; ++rounds) {
    if (rounds > 64 * S * m) throw std::logic_error("zb_v_lists: no progress (a bug in the scheduler)");
    // The next time a rank is free; every rank free then decides, the lowest first (each sees the passes that
    // ended by then, none that another starts now).
    double t = std::numeric_limits<double>::infinity();
    for (const ZbvRank& k : ranks) t = std::min(t, k.free_at);
    std::vector<int> waiting;
    for (int r = 0; r < p; ++r) {
      ZbvRank& k = ranks[static_cast<size_t>(r)];
      if (k.free_at > t + kZbvEps) continue;
      const std::optional<ChunkAction> pick = zb_v_pick(k, e, p, r, cap, t);
      if (!pick) {
        waiting.push_back(r);
        continue;
      }
      zb_v_run(*pick, k, e, p, r, times, t);
      ends.insert(k.free_at);
      lists[static_cast<size_t>(r)].push_back(*pick);
      --left;
    }
    // A rank with nothing ready looks again when the next pass anywhere ends.
    const auto after = ends.upper_bound(t + kZbvEps);
    const double next = after == ends.end() ? std::numeric_limits<double>::infinity() : *after;
    for (int r : waiting) {
      if (left > 0 && !std::isfinite(next)) throw std::logic_error("zb_v_lists: every rank waits (a bug in the scheduler)");
      ranks[static_cast<size_t>(r)].free_at = next;
    }
  }
  return lists;
}

std::vector<ChunkAction> interleaved_1f1b(int p, int v, int rank, int m) {
  if (p < 1 || rank < 0 || rank >= p || m < 1) {
    throw std::invalid_argument(fmt::format("interleaved_1f1b: rank {} of {} with {} microbatches", rank, p, m));
  }
  if (v < 1) throw std::invalid_argument(fmt::format("parallel.virtual_stages: must be >= 1, got {}", v));
  if (v > 1 && m % p != 0) {
    throw std::invalid_argument(fmt::format("parallel.microbatches {}: interleaved 1F1B runs the microbatches in groups "
                                            "of parallel.pp ({}); use a multiple of it", m, p));
  }
  const int total = m * v;
  // The k-th forward (backward) of the rank: microbatch group k / (p v), chunk (k / p) % v (reversed for the
  // backward), microbatch k % p of its group.
  const auto nth = [&](int k, bool backward) {
    const int chunk = (k / p) % v;
    return ChunkAction{backward ? PipeOp::kBackward : PipeOp::kForward, (k / (p * v)) * p + k % p,
                       backward ? v - 1 - chunk : chunk};
  };
  int warmup = v == 1 ? std::min(p - rank - 1, m) : std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  std::vector<ChunkAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(nth(k, false));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(nth(warmup + i, false));
    out.push_back(nth(i, true));
  }
  for (int i = total - warmup; i < total; ++i) out.push_back(nth(i, true));
  return out;
}

namespace {

// When each (pass, microbatch, virtual stage) finished: 'F', 'B' (input gradients, or the whole backward), 'W'.
using PassEnds = std::map<std::tuple<char, int, int>, double>;

// When action `a` (of virtual stage s) can start on a rank free from
// free_at: once the passes it needs have ended; infinity while one has not.
double earliest_start(const PassEnds& done, const ChunkAction& a, int s, int stages_total, double free_at) {
  const auto ready = [&](char pass, int mb, int stage) -> double {
    const auto it = done.find({pass, mb, stage});
    return it == done.end() ? -1.0 : it->second;
  };
  double start = free_at;
  const auto need = [&](char pass, int mb, int stage) {
    const double at = ready(pass, mb, stage);
    if (at < 0) start = std::numeric_limits<double>::infinity();
    else start = std::max(start, at);
  };
  if (a.op == PipeOp::kForward) {
    if (s > 0) need('F', a.mb, s - 1);
  } else if (a.op == PipeOp::kBackwardWeight) {
    need('B', a.mb, s);
  } else {
    need('F', a.mb, s);
    if (s + 1 < stages_total) need('B', a.mb, s + 1);
  }
  return start;
}

// Where every rank with actions left waits (ScheduleRun::stuck).
std::string stuck_text(const std::vector<std::vector<ChunkAction>>& lists, const std::vector<size_t>& next) {
  std::string stuck;
  for (size_t r = 0; r < lists.size(); ++r) {
    if (next[r] >= lists[r].size()) continue;
    const ChunkAction& a = lists[r][next[r]];
    stuck += fmt::format("{}rank {} waits at action {} (microbatch {}, chunk {})", stuck.empty() ? "" : "; ", r,
                         next[r], a.mb, a.chunk);
  }
  return stuck;
}

double pass_length(PipeOp op, const PassTimes& t) {
  return op == PipeOp::kForward         ? t.forward
         : op == PipeOp::kBackward      ? t.input + t.weight
         : op == PipeOp::kBackwardInput ? t.input
                                        : t.weight;
}

}  // namespace

ScheduleRun simulate_schedule(const std::vector<std::vector<ChunkAction>>& lists, int stages_total,
                              int (*stage_of)(int stages, int rank, int chunk), int stages, const PassTimes& t) {
  const int ranks = static_cast<int>(lists.size());
  ScheduleRun run;
  run.bubble.assign(static_cast<size_t>(ranks), 0.0);
  run.peak.assign(static_cast<size_t>(ranks), 0);
  PassEnds done;
  std::vector<size_t> next(static_cast<size_t>(ranks), 0);
  std::vector<double> free_at(static_cast<size_t>(ranks), 0.0), busy(static_cast<size_t>(ranks), 0.0);
  std::vector<int> held(static_cast<size_t>(ranks), 0);
  for (;;) {
    // Of the ranks whose next action can start, the one that starts earliest (ties: the lowest rank).
    int pick = -1;
    double pick_start = std::numeric_limits<double>::infinity();
    bool left = false;
    for (int r = 0; r < ranks; ++r) {
      if (next[static_cast<size_t>(r)] >= lists[static_cast<size_t>(r)].size()) continue;
      left = true;
      const ChunkAction& a = lists[static_cast<size_t>(r)][next[static_cast<size_t>(r)]];
      const double start = earliest_start(done, a, stage_of(stages, r, a.chunk), stages_total,
                                          free_at[static_cast<size_t>(r)]);
      if (start < pick_start) {
        pick_start = start;
        pick = r;
      }
    }
    if (!left) break;
    if (pick < 0) {
      run.stuck = stuck_text(lists, next);
      return run;
    }
    const auto r = static_cast<size_t>(pick);
    const ChunkAction& a = lists[r][next[r]];
    const int s = stage_of(stages, pick, a.chunk);
    const double length = pass_length(a.op, t);
    const double end = pick_start + length;
    if (a.op == PipeOp::kForward) {
      done[{'F', a.mb, s}] = end;
      run.peak[r] = std::max(run.peak[r], ++held[r]);
    } else if (a.op == PipeOp::kBackwardWeight) {
      done[{'W', a.mb, s}] = end;
      --held[r];
    } else {
      done[{'B', a.mb, s}] = end;
      if (a.op == PipeOp::kBackward) --held[r];
    }
    free_at[r] = end;
    busy[r] += length;
    run.makespan = std::max(run.makespan, end);
    ++next[r];
  }
  run.complete = true;
  for (int r = 0; r < ranks; ++r) {
    run.bubble[static_cast<size_t>(r)] = run.makespan > 0 ? 1.0 - busy[static_cast<size_t>(r)] / run.makespan : 0.0;
  }
  return run;
}

std::vector<std::vector<ChunkAction>> schedule_lists(ScheduleKind kind, int stages, int v, int m, const PassTimes& t) {
  if (kind == ScheduleKind::kZbV) {
    if (v != 2) throw std::invalid_argument(fmt::format("parallel.schedule zb-v: 2 chunks a rank, not {}", v));
    return zb_v_lists(stages, m, 0, t);
  }
  std::vector<std::vector<ChunkAction>> lists(static_cast<size_t>(stages));
  for (int r = 0; r < stages; ++r) {
    if (kind == ScheduleKind::kInterleaved1F1B) {
      lists[static_cast<size_t>(r)] = interleaved_1f1b(stages, v, r, m);
      continue;
    }
    if (v != 1) throw std::invalid_argument(fmt::format("parallel.schedule {}: one chunk a rank", to_string(kind)));
    for (const PipeAction& a : stage_schedule(kind, stages, r, m)) lists[static_cast<size_t>(r)].push_back({a.op, a.mb, 0});
  }
  return lists;
}

StageOf stage_placement(ScheduleKind kind) { return kind == ScheduleKind::kZbV ? v_shape_stage : interleaved_stage; }

std::vector<int> chunk_in_flight(const std::vector<ChunkAction>& actions, int v) {
  std::vector<int> now(static_cast<size_t>(v), 0), peak(static_cast<size_t>(v), 0);
  for (const ChunkAction& a : actions) {
    int& n = now.at(static_cast<size_t>(a.chunk));
    if (a.op == PipeOp::kForward) peak[static_cast<size_t>(a.chunk)] = std::max(peak[static_cast<size_t>(a.chunk)], ++n);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --n;
  }
  return peak;
}

std::vector<bool> chunk_stop_points(const std::vector<std::vector<ChunkAction>>& lists, StageOf stage_of, int stages) {
  const size_t n = lists.empty() ? 0 : lists.front().size();
  // Where each (pass, microbatch, virtual stage) sits: its rank and its index in that rank's list.
  std::map<std::tuple<char, int, int>, std::pair<int, size_t>> at;
  int total = 0;
  for (size_t r = 0; r < lists.size(); ++r) {
    if (lists[r].size() != n) throw std::logic_error("chunk_stop_points: the ranks' lists differ in length");
    for (size_t k = 0; k < n; ++k) {
      const ChunkAction& a = lists[r][k];
      const int s = stage_of(stages, static_cast<int>(r), a.chunk);
      total = std::max(total, s + 1);
      if (a.op != PipeOp::kBackwardWeight) at[{a.op == PipeOp::kForward ? 'F' : 'B', a.mb, s}] = {static_cast<int>(r), k};
    }
  }
  // Every message between ranks as (the sender's index, the receiver's): a forward's output to the next
  // stage's forward, a backward's input gradient to the stage before's backward.
  std::vector<std::pair<size_t, size_t>> messages;
  for (const auto& [key, where] : at) {
    const auto [pass, mb, s] = key;
    const int to = pass == 'F' ? s + 1 : s - 1;
    if (to < 0 || to >= total) continue;
    const auto it = at.find({pass, mb, to});
    if (it == at.end() || it->second.first == where.first) continue;  // the same rank: a copy
    messages.emplace_back(where.second, it->second.second);
  }
  std::vector<bool> out(n, false);
  for (size_t k = 1; k < n; ++k) {
    out[k] = std::all_of(messages.begin(), messages.end(), [k](const auto& msg) {
      return (msg.first < k) == (msg.second < k);
    });
  }
  return out;
}

}  // namespace gpt2
