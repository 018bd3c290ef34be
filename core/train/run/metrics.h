// The metrics stream's writer (the records are util/records.h). Lines go to
// "<path>.partial" as they happen (flushed each line) and the file is renamed
// to <path> only when the run finishes: a stream under its real name is
// always a complete run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "util/records.h"

namespace gpt2 {

class MetricsWriter {
 public:
  // keep_steps_before >= 0: an interrupted run's "<path>.partial" is kept up
  // to (not including) that step, so a resumed run extends the same curve.
  explicit MetricsWriter(const std::string& path, int64_t keep_steps_before = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  // {"event":"preempted","step":s,"signal":"SIGTERM","signal_to_exit_s":..,"abandoned_step":b}: the run
  // stopped for a signal after step s with its checkpoint written (train/schedule/preemption.h); b: whether step
  // s + 1 was under way and abandoned between its micro-steps. Kept when the run resumes.
  void preempted(int64_t step, const std::string& signal, double signal_to_exit_s, bool abandoned_step);
  // Writes the summary and renames the stream to its final name.
  void finish(const RunSummary& summary);

 private:
  void line(const std::string& json);
  std::string path_, partial_;
  std::FILE* f_ = nullptr;
};

// Peak resident memory of this process in MiB (getrusage).
double peak_rss_mb();
// A phase's peak resident set (a checkpoint's save, a resume): reset_peak_rss()
// starts it (writes 5 to /proc/self/clear_refs, which resets VmHWM; false
// where the kernel does not allow it), phase_peak_rss_bytes() reads it
// (VmHWM), rss_bytes() the resident set now (VmRSS); 0 where unknown.
bool reset_peak_rss();
uint64_t phase_peak_rss_bytes();
uint64_t rss_bytes();

}  // namespace gpt2
