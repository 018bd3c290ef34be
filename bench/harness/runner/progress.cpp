#include "runner/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>

#include "util/console.h"
#include "util/json.h"

namespace gpt2::harness {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct State {
  ProgressMode mode = ProgressMode::kLines;
  std::string prefix;
  Clock::time_point t0;
  bool active = false, shown = false;
  std::string last;  // the latest line's text (without the prefix)
};
State& state() {
  static State s;
  return s;
}

std::string clock_text(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

ProgressMode default_progress_mode(bool quiet) {
  if (quiet) return ProgressMode::kQuiet;
  return isatty(STDERR_FILENO) ? ProgressMode::kLive : ProgressMode::kLines;
}

void set_progress_mode(ProgressMode mode) { state().mode = mode; }

void progress_begin(const std::string& prefix) {
  State& s = state();
  s.prefix = prefix;
  s.t0 = Clock::now();
  s.active = true;
  s.shown = false;
  s.last.clear();
}

void progress_end() {
  State& s = state();
  if (!s.active) return;
  s.active = false;
  if (s.mode == ProgressMode::kLive && s.shown) console::err("\r\033[K");
  if (s.mode == ProgressMode::kLines && !s.last.empty()) console::err(fmt::format("{}: {}\n", s.prefix, s.last));
}

void progress_from_metrics(const fs::path& dir, int64_t steps) {
  State& s = state();
  if (!s.active || s.mode == ProgressMode::kQuiet) return;
  std::ifstream in(dir / "metrics.jsonl.partial");
  if (!in) in.open(dir / "metrics.jsonl");
  if (!in) return;
  int64_t done = 0;
  std::optional<double> loss, rate;
  double step_ms = 0;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != "step") continue;
    done = j.value("step", int64_t{0}) + 1;
    loss = j.value("loss", 0.0);
    rate = j.value("tokens_per_s", 0.0);
    step_ms = j.value("step_ms", 0.0);
  }
  if (done == 0) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - s.t0).count();
  const double left = steps > done ? static_cast<double>(steps - done) * step_ms / 1e3 : 0.0;
  s.last = fmt::format("step {}/{}, loss {:.4f}, {:.0f} tokens/s, {} elapsed, {} left", done, steps, *loss, *rate,
                       clock_text(elapsed), clock_text(left));
  if (s.mode == ProgressMode::kLive) {
    console::err(fmt::format("\r\033[K{}: {}", s.prefix, s.last));
    s.shown = true;
  }
}

}  // namespace gpt2::harness
