// RunLogger: everything a training run tells the world, from rank 0: the
// output directory (owned and checked before any work is done, run_dir.h), the resolved
// configuration (config.yaml), the metrics stream (util/records.h, through
// MetricsWriter), the console's progress lines and the summary record with
// its provenance. On the other ranks every call does nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "train/run/metrics.h"
#include "train/run/run_dir.h"
#include "util/records.h"

namespace gpt2 {

class RunLogger {
 public:
  RunLogger(std::string stage, bool active) : stage_(std::move(stage)), active_(active) {}

  // Takes the output directory (train/run/run_dir.h: locked, and refused when
  // it holds a run the intent does not allow). Called before any work.
  // `inputs`: files the run reads (its --config), which are never taken for run files.
  void claim(const std::filesystem::path& out, DirIntent intent, const std::vector<std::filesystem::path>& inputs = {});
  // Resuming: the checkpoint must belong to the directory's run.
  void check_resume(const std::string& checkpoint_path, const std::string& checkpoint_run_id);
  // The run's id (run.json, and "run.id" in its checkpoints); "" off rank 0.
  std::string run_id() const { return dir_ ? dir_->run_id() : std::string(); }
  // Writes run.json and config.yaml and opens the metrics stream; resuming
  // (first_step > 0 and resuming), the earlier steps of the run's stream,
  // interrupted or finished, are kept.
  void open(const std::string& config_yaml, bool resuming, int64_t first_step);
  // Whether the MFU peak was given (train.peak_gflops) or measured: an MFU
  // above 100% is explained accordingly.
  void set_peak_configured(bool configured) { peak_configured_ = configured; }
  // "[<stage>] <text>" on stderr, through the console (util/console.h: a
  // line the stream cannot take is dropped and counted, never waited for).
  void note(const std::string& text) const;
  // The record, and the progress line "step s/steps | loss ... | ms | tok/s | MFU".
  void step(const StepRecord& r, int64_t steps, bool show_comm);
  void eval(const EvalRecord& r, int64_t steps);
  // The run stopped for `signal` after step `step` (`abandoned_step`: the
  // next was under way and abandoned), its checkpoint written: the record
  // (MetricsWriter::preempted) and one line naming how to resume.
  void preempted(int64_t step, const std::string& signal, double signal_to_exit_s, const std::string& checkpoint,
                 bool abandoned_step);
  // The summary line, the generated text on stdout, and the summary record
  // (which renames the metrics stream into place: the run is complete),
  // naming the console lines dropped (RunSummary::console_dropped_lines).
  void finish(const RunSummary& s);

 private:
  std::string stage_;
  bool active_;
  std::optional<RunDirectory> dir_;
  std::optional<MetricsWriter> metrics_;
  // Why a step's MFU was above 100% (the note said once and the summary's).
  std::string mfu_note() const;

  bool mfu_over_peak_ = false;    // a step's MFU was above 100%: said once, and the summary says why
  bool peak_configured_ = false;
};

}  // namespace gpt2
