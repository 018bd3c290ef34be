// The metrics stream (DESIGN.md contract 2): one JSON object per line,
//   {"event": "step", "step": s, "loss": .., "lr": .., "grad_norm": .., "step_ms": ..,
//    "tokens_per_s": .., "flops_per_s": .., "mfu": .., "comm_ms": .., "comm_bytes": ..}
//   {"event": "eval", "step": s, "val_loss": ..}
//   {"event": "summary", "status": "ok", "train_s": .., "inference_s": .., "final_loss": ..,
//    "peak_rss_mb": .., ..., "provenance": {...}}
// Lines go to "<path>.partial" as they happen (flushed each line) and the
// file is renamed to <path> only when the run finishes: a stream under its
// real name is always a complete run. Step s counts from 0; its loss is the
// loss before update s (the original's "epoch s").
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gpt2 {

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0, flops_per_s = 0, mfu = 0;
  double comm_ms = 0;     // time in gradient and loss collectives (0 for one process)
  size_t comm_bytes = 0;  // gradient bytes allreduced per rank
};

class MetricsWriter {
 public:
  // keep_steps_before >= 0: an interrupted run's "<path>.partial" is kept up
  // to (not including) that step, so a resumed run extends the same curve.
  explicit MetricsWriter(const std::string& path, int64_t keep_steps_before = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void step(const StepRecord& r);
  void eval(int64_t step, double val_loss);
  // Writes the summary (a JSON object's fields, without braces) and renames
  // the stream to its final name.
  void finish(const std::string& summary_fields);
  const std::string& path() const { return path_; }

 private:
  void line(const std::string& json);
  std::string path_, partial_;
  std::FILE* f_ = nullptr;
};

// Peak resident memory of this process in MiB (getrusage).
double peak_rss_mb();

}  // namespace gpt2
