// RunLogger: everything a training run tells the world, from rank 0: the
// output directory (checked before any work is done), the resolved
// configuration (config.yaml), the metrics stream (util/records.h, through
// MetricsWriter), the console's progress lines and the summary record with
// its provenance. On the other ranks every call does nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "train/metrics.h"
#include "util/records.h"

namespace gpt2 {

class RunLogger {
 public:
  RunLogger(std::string stage, bool active) : stage_(std::move(stage)), active_(active) {}

  // Creates `out` and checks that it is writable and holds no finished run
  // (unless `overwrite` or `resuming`), writes config.yaml and opens the
  // metrics stream (keeping an interrupted stream's steps before
  // `first_step` when resuming).
  void open(const std::filesystem::path& out, bool overwrite, bool resuming, const std::string& config_yaml,
            int64_t first_step);
  // "[<stage>] <text>" on stderr.
  void note(const std::string& text) const;
  // The record, and the progress line "step s/steps | loss ... | ms | tok/s | MFU".
  void step(const StepRecord& r, int64_t steps, bool show_comm);
  void eval(const EvalRecord& r, int64_t steps);
  // The summary line, the generated text on stdout, and the summary record
  // (which renames the metrics stream into place: the run is complete).
  void finish(const RunSummary& s);

 private:
  std::string stage_;
  bool active_;
  std::optional<MetricsWriter> metrics_;
};

}  // namespace gpt2
