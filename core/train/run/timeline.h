// A pipelined run's timeline (timeline.jsonl): every rank's actions and
// waits of a step gathered to rank 0, which writes them beside the metrics,
// and as each rank's Chrome trace (traces/rank-<r>.json, train/run/trace.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "train/run/trace.h"
#include "train/schedule/pipeline.h"
#include "util/files.h"
#include "util/json.h"
#include "util/records.h"

namespace gpt2 {

// The pipeline's timeline of the first kTimelineSteps steps, one JSON line
// per step beside the metrics stream (timeline.jsonl, written by rank 0):
//   {"step":s,"ranks":[{"rank":r,"stage":k,"events":[["F",mb,t0_ms,t1_ms,stage],..]},..]}
// Times are milliseconds from the start of the step on each rank's own clock;
// an event's stage is the virtual stage (the rank's chunk) it served, the
// rank's own without parallel.virtual_stages.
inline constexpr size_t kEventFloats = 5;
// A rank's record ahead of its events: its wait (ms), its arenas in use, its
// stage, its event count, and when its step began after its first recorded
// one (whole seconds, then the milliseconds past them: exact in floats).
inline constexpr size_t kRankHead = 6;
inline constexpr int64_t kTimelineSteps = 10;

inline const char* const kEventKinds[] = {"F", "BW", "B", "W", "recv", "send"};

inline float event_code(const char* kind) {
  for (size_t i = 0; i < std::size(kEventKinds); ++i) {
    if (std::strcmp(kind, kEventKinds[i]) == 0) return static_cast<float>(i);
  }
  return -1.0f;
}

// Every rank's wait and arenas in use (and, for the first steps, its
// timeline) gathered to rank 0 after each step, over the grid's unaccounted
// group; the timeline written beside the metrics by rank 0. The gather's
// buffers are sized once: a step allocates nothing for them.
class PipelineRecorder {
 public:
  PipelineRecorder(ProcessGrid& grid, const PipelineEngine& pipe)
      : aux_(grid.aux_comm()),
        pipe_(pipe),
        // The same count on every rank (an all-gather's chunk): from what every
        // stage shares, not from its own arenas (1f1b gives stages different
        // ones). A step records at most 7m events plus one send wait per arena
        // (<= max(m, p)).
        max_events_(static_cast<size_t>(8 * pipe.microbatches() * pipe.chunks() + 8 +
                                        std::max(pipe.microbatches() * pipe.chunks(), pipe.stages()))),
        mine_(kRankHead + kEventFloats * max_events_),
        all_(mine_.size() * static_cast<size_t>(aux_.size())) {}
  // Rank 0 writes the timeline to the run folder `run_dir`'s timeline.jsonl
  // (truncated) and the traces to its traces/ (an earlier start's removed):
  // once the run's folder is its own and cleared (RunLogger::open), never
  // before, so that a refused or overwriting start does not touch an earlier
  // run's files.
  void open(const std::string& run_dir) {
    if (run_dir.empty()) return;
    const std::filesystem::path dir(run_dir);
    const std::string timeline_path = (dir / "timeline.jsonl").string();
    out_ = ::fdopen(open_output(timeline_path), "w");
    if (!out_) throw std::runtime_error(fmt::format("{}: cannot write the pipeline timeline", timeline_path));
    traces_dir_ = dir / "traces";
    std::error_code ec;
    std::filesystem::remove_all(traces_dir_, ec);  // the run's own files (a link is removed, not followed)
    if (ec) throw std::runtime_error(fmt::format("{}: cannot clear: {}", traces_dir_.string(), ec.message()));
    traces_.emplace(aux_.size());
  }
  ~PipelineRecorder() {
    if (out_) std::fclose(out_);
  }
  PipelineRecorder(const PipelineRecorder&) = delete;
  PipelineRecorder& operator=(const PipelineRecorder&) = delete;

  void gather(int64_t step, StepRecord& rec) {
    const bool with_events = step < kTimelineSteps;
    const size_t max_events = with_events ? max_events_ : 0;
    const size_t chunk = kRankHead + kEventFloats * max_events;
    const auto& ev = pipe_.timeline();
    const size_t n = std::min(ev.size(), max_events);
    std::fill(mine_.begin(), mine_.begin() + static_cast<std::ptrdiff_t>(chunk), 0.0f);
    mine_[0] = static_cast<float>(pipe_.wait_s() * 1e3);
    mine_[1] = static_cast<float>(pipe_.peak_in_flight());
    mine_[2] = static_cast<float>(pipe_.stage());
    mine_[3] = static_cast<float>(n);
    if (first_start_ns_ < 0) first_start_ns_ = pipe_.step_start_ns();
    const double since_ms = static_cast<double>(pipe_.step_start_ns() - first_start_ns_) * 1e-6;
    mine_[4] = static_cast<float>(std::floor(since_ms / 1e3));
    mine_[5] = static_cast<float>(since_ms - 1e3 * std::floor(since_ms / 1e3));
    for (size_t i = 0; i < n; ++i) {
      float* e = mine_.data() + kRankHead + kEventFloats * i;
      e[0] = event_code(ev[i].kind);
      e[1] = static_cast<float>(ev[i].mb);
      e[2] = static_cast<float>(ev[i].t0_ms);
      e[3] = static_cast<float>(ev[i].t1_ms);
      e[4] = static_cast<float>(ev[i].stage);
    }
    aux_.all_gather(mine_.data(), all_.data(), chunk);
    if (aux_.rank() != 0) return;
    Json ranks = Json::array();
    for (int r = 0; r < aux_.size(); ++r) {
      const float* x = all_.data() + static_cast<size_t>(r) * chunk;
      rec.stage_wait_ms.push_back(x[0]);
      rec.stage_arenas.push_back(static_cast<int>(x[1]));
      if (!with_events) continue;
      Json events = Json::array();
      for (size_t i = 0; i < static_cast<size_t>(x[3]); ++i) {
        const float* e = x + kRankHead + kEventFloats * i;
        const int code = static_cast<int>(e[0]);
        events.push_back(Json::array({code >= 0 ? kEventKinds[code] : "?", static_cast<int>(e[1]),
                                      round_fixed(e[2], 3), round_fixed(e[3], 3), static_cast<int>(e[4])}));
      }
      if (traces_) {
        traces_->set_stage(r, static_cast<int>(x[2]));
        traces_->add_step(r, step, 1e3 * static_cast<double>(x[4]) + static_cast<double>(x[5]), events);
      }
      ranks.push_back(Json{{"rank", r}, {"stage", static_cast<int>(x[2])}, {"events", events}});
    }
    if (with_events && out_) {
      const std::string line = Json{{"step", step}, {"ranks", ranks}}.dump() + "\n";
      if (std::fputs(line.c_str(), out_) < 0 || std::fflush(out_) != 0) {
        throw std::runtime_error("timeline.jsonl: writing the pipeline timeline failed");
      }
    }
    if (with_events && traces_) traces_->write(traces_dir_);  // every recorded step: whole files after each
  }

 private:
  Communicator& aux_;
  const PipelineEngine& pipe_;
  size_t max_events_;
  std::vector<float> mine_, all_;
  std::FILE* out_ = nullptr;
  int64_t first_start_ns_ = -1;       // this rank's first recorded step's start
  std::optional<RankTraces> traces_;  // rank 0's, once open
  std::filesystem::path traces_dir_;
};

}  // namespace gpt2
