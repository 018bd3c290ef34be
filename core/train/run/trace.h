// A pipelined run's per-rank traces in the Chrome trace-event format
// (traces/rank-<r>.json beside timeline.jsonl): what Perfetto,
// chrome://tracing and Holistic Trace Analysis open, one file per rank with
// the rank in `distributedInfo`. Built from the same events as the
// timeline (train/run/timeline.h), by world rank 0, for the first steps.
//
// Each file: {"traceEvents": [...], "displayTimeUnit": "ms",
// "distributedInfo": {"rank": r, "world_size": N}, "otherData": {...}}.
// Events are complete events ("ph": "X") with `ts` and `dur` in
// microseconds; pid = the rank; tid 0 the compute lane (a "step N" slice
// holding the step's F, B, W and BW), tid 1 the communication lane (the
// waits for a pipeline peer: recv, send). Time runs on each rank's own
// clock from the start of its first recorded step, so ranks line up to
// within the skew of their step starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "util/json.h"

namespace gpt2 {

inline constexpr int kComputeLane = 0;
inline constexpr int kCommLane = 1;

// The lane an event kind of the timeline runs on: communication for the
// waits (recv, send), compute for the passes (F, B, W, BW) and anything else.
int trace_lane(const std::string& kind);

class RankTraces {
 public:
  // `ranks` world ranks; each one's pipeline stage (named in its process's name) set by set_stage.
  explicit RankTraces(int ranks) : stages_(static_cast<size_t>(ranks), 0), events_(stages_.size()) {}

  // One step of rank `rank`: it started `start_ms` after its first recorded
  // step did; `events` the timeline's [kind, microbatch, t0_ms, t1_ms, stage]
  // from the step's start.
  void add_step(int rank, int64_t step, double start_ms, const Json& events);

  void set_stage(int rank, int stage) { stages_.at(static_cast<size_t>(rank)) = stage; }

  // Rank `rank`'s trace as above.
  Json trace(int rank) const;

  // Every rank's trace into `dir` (made if missing): rank-<r>.json, each
  // replaced atomically, so a reader never sees half a file.
  void write(const std::filesystem::path& dir) const;

 private:
  std::vector<int> stages_;
  std::vector<Json> events_;  // per rank: its trace events so far
};

}  // namespace gpt2
