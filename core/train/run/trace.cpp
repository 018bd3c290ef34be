#include "train/run/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "util/files.h"

namespace gpt2 {

namespace {

// Microseconds from milliseconds, to the nanosecond (a trace's `ts` and `dur`).
double us(double ms) { return std::round(ms * 1e6) / 1e3; }

Json metadata(const char* name, int pid, int tid, const std::string& value) {
  Json m{{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", {{"name", value}}}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

}  // namespace

int trace_lane(const std::string& kind) { return kind == "recv" || kind == "send" ? kCommLane : kComputeLane; }

void RankTraces::add_step(int rank, int64_t step, double start_ms, const Json& events) {
  if (rank < 0 || static_cast<size_t>(rank) >= events_.size()) {
    throw std::logic_error(fmt::format("RankTraces: rank {} of {}", rank, events_.size()));
  }
  Json& out = events_[static_cast<size_t>(rank)];
  if (out.is_null()) out = Json::array();
  double end_ms = 0;
  Json passes = Json::array();
  for (const Json& e : events) {
    const std::string kind = e[0].get<std::string>();
    const double t0 = e[2].get<double>(), t1 = std::max(e[3].get<double>(), t0);
    end_ms = std::max(end_ms, t1);
    const int lane = trace_lane(kind);
    Json args{{"step", step}, {"microbatch", e[1].get<int>()}};
    if (e.size() > 4) args["stage"] = e[4].get<int>();
    passes.push_back(Json{{"ph", "X"},
                          {"name", kind},
                          {"cat", lane == kCommLane ? "communication" : "compute"},
                          {"pid", rank},
                          {"tid", lane},
                          {"ts", us(start_ms + t0)},
                          {"dur", us(t1 - t0)},
                          {"args", std::move(args)}});
  }
  // The step's slice first, so that viewers nest its passes inside it.
  out.push_back(Json{{"ph", "X"},
                     {"name", fmt::format("step {}", step)},
                     {"cat", "step"},
                     {"pid", rank},
                     {"tid", kComputeLane},
                     {"ts", us(start_ms)},
                     {"dur", us(end_ms)},
                     {"args", {{"step", step}}}});
  for (Json& p : passes) out.push_back(std::move(p));
}

Json RankTraces::trace(int rank) const {
  const auto r = static_cast<size_t>(rank);
  Json events = Json::array();
  events.push_back(metadata("process_name", rank, -1, fmt::format("rank {} (stage {})", rank, stages_.at(r))));
  events.push_back(Json{{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  events.push_back(metadata("thread_name", rank, kComputeLane, "compute"));
  events.push_back(metadata("thread_name", rank, kCommLane, "communication (waits for a pipeline peer)"));
  if (!events_.at(r).is_null()) {
    for (const Json& e : events_[r]) events.push_back(e);
  }
  return Json{{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"distributedInfo", {{"rank", rank}, {"world_size", static_cast<int>(stages_.size())}}},
              {"otherData",
               {{"source", "gpt2-stages timeline.jsonl"},
                {"clock", "this rank's steady clock, from the start of its first recorded step"}}}};
}

void RankTraces::write(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot make the traces' folder: {}", dir.string(), ec.message()));
  for (size_t r = 0; r < stages_.size(); ++r) {
    write_file_atomically(dir / fmt::format("rank-{}.json", r), trace(static_cast<int>(r)).dump() + "\n");
  }
}

}  // namespace gpt2
