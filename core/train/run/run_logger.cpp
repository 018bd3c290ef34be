#include "train/run/run_logger.h"

#include <fmt/format.h>

#include <stdexcept>

#include "util/console.h"
#include "util/files.h"

namespace gpt2 {

namespace fs = std::filesystem;

void RunLogger::claim(const fs::path& out, DirIntent intent, const std::vector<fs::path>& inputs) {
  if (active_) dir_.emplace(out, intent, stage_, inputs);
}

void RunLogger::check_resume(const std::string& checkpoint_path, const std::string& checkpoint_run_id) {
  if (active_) dir_->check_resume(checkpoint_path, checkpoint_run_id);
}

void RunLogger::open(const std::string& config_yaml, bool resuming, int64_t first_step) {
  if (!active_) return;
  dir_->begin();
  write_file_atomically(dir_->path() / "config.yaml", config_yaml);
  metrics_.emplace((dir_->path() / "metrics.jsonl").string(), resuming ? first_step : -1);
}

void RunLogger::note(const std::string& text) const {
  if (active_) console::err(fmt::format("[{}] {}\n", stage_, text));
}

void RunLogger::step(const StepRecord& r, int64_t steps, bool show_comm) {
  if (!active_) return;
  metrics_->step(r);
  // An MFU above 100% means the peak is wrong (measured low), never that the
  // machine beat it: said once, at the first such step, and in the summary
  // (provenance.mfu_note), rather than on every line.
  if (r.mfu > 1.0 && !mfu_over_peak_) {
    mfu_over_peak_ = true;
    note(fmt::format("step {}'s MFU is {:.1f}%, above 100%: {} (said once; the summary's provenance.mfu_note keeps it)",
                     r.step, 100 * r.mfu, mfu_note()));
  }
  fmt::memory_buffer line;  // on the stack: a step's line allocates nothing
  fmt::format_to(std::back_inserter(line), "step {:>4}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} ms",
                 r.step, steps, r.loss, r.lr, r.grad_norm, r.step_ms);
  if (show_comm) fmt::format_to(std::back_inserter(line), " (comm {:.0f} ms)", r.comm_ms);
  fmt::format_to(std::back_inserter(line), " | {:.0f} tok/s | MFU {:.1f}%\n", r.tokens_per_s, 100 * r.mfu);
  console::err(std::string_view(line.data(), line.size()));
}

std::string RunLogger::mfu_note() const {
  return peak_configured_ ? "train.peak_gflops is below what this machine reaches"
                          : "the peak (peak_gflops) was measured low, e.g. on a busy machine; give train.peak_gflops";
}

void RunLogger::eval(const EvalRecord& r, int64_t steps) {
  if (!active_) return;
  metrics_->eval(r);
  console::err(fmt::format("step {:>4}/{} | val loss {:.6f}\n", r.step, steps, r.val_loss));
}

void RunLogger::preempted(int64_t step, const std::string& signal, double signal_to_exit_s,
                          const std::string& checkpoint, bool abandoned_step) {
  if (!active_) return;
  metrics_->preempted(step, signal, signal_to_exit_s, abandoned_step);
  console::err(fmt::format(
      "[{}] stopped by {} {}: checkpoint {} written, {:.2f} s after the signal; resume with --resume auto\n", stage_,
      signal,
      abandoned_step ? fmt::format("with {} steps done (the next one abandoned between its micro-steps)", step + 1)
                     : fmt::format("after {} steps", step + 1),
      checkpoint, signal_to_exit_s));
}

void RunLogger::finish(const RunSummary& s) {
  if (!active_) return;
  console::err(fmt::format("[{}] trained {} steps in {:.2f} s ({:.2f} s wall, {:.2f} s communicating); generated {} "
                           "tokens in {:.3f} s\n", stage_, s.steps - s.first_step, s.train_s, s.train_wall_s, s.comm_s,
                           s.generated_tokens, s.inference_s));
  console::out(s.generated_text + "\n");
  RunSummary noted = s;
  // Counted once the run's last lines are out or given up (at most
  // console::kExitStall of a stream taking nothing): the summary names every
  // line the console could not take (the results lose nothing).
  console::drain(console::kExitStall);
  noted.console_dropped_lines = static_cast<int64_t>(console::dropped_lines());
  if (noted.console_dropped_lines > 0) {
    note(fmt::format("{} progress line(s) were dropped: stderr or stdout did not take them (a stalled or unread "
                     "pipe); metrics.jsonl has every step", noted.console_dropped_lines));
  }
  if (mfu_over_peak_) noted.provenance["mfu_note"] = "some steps' MFU is above 100%: " + mfu_note();
  metrics_->finish(noted);
}

}  // namespace gpt2
