#include "train/run_logger.h"

#include <fmt/format.h>

#include <stdexcept>

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
  if (active_) fmt::print(stderr, "[{}] {}\n", stage_, text);
}

void RunLogger::step(const StepRecord& r, int64_t steps, bool show_comm) {
  if (!active_) return;
  metrics_->step(r);
  // An MFU above 100% means the peak is wrong (measured low), never that the
  // machine beat it: say so rather than print an impossible number bare.
  const bool over = r.mfu > 1.0;
  mfu_over_peak_ = mfu_over_peak_ || over;
  fmt::print(stderr, "step {:>4}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} ms{} | {:.0f} tok/s | MFU {:.1f}%{}\n",
             r.step, steps, r.loss, r.lr, r.grad_norm, r.step_ms,
             show_comm ? fmt::format(" (comm {:.0f} ms)", r.comm_ms) : "", r.tokens_per_s, 100 * r.mfu,
             over ? (peak_configured_ ? " (above 100%: train.peak_gflops is below what this machine reaches)"
                                      : " (above 100%: the peak was measured low; give train.peak_gflops)")
                  : "");
}

void RunLogger::eval(const EvalRecord& r, int64_t steps) {
  if (!active_) return;
  metrics_->eval(r);
  fmt::print(stderr, "step {:>4}/{} | val loss {:.6f}\n", r.step, steps, r.val_loss);
}

void RunLogger::preempted(int64_t step, const std::string& signal, double signal_to_exit_s,
                          const std::string& checkpoint, bool abandoned_step) {
  if (!active_) return;
  metrics_->preempted(step, signal, signal_to_exit_s, abandoned_step);
  fmt::print(stderr, "[{}] stopped by {} {}: checkpoint {} written, {:.2f} s after the signal; resume with --resume "
             "auto\n", stage_, signal,
             abandoned_step ? fmt::format("during step {} (abandoned between its micro-steps)", step + 1)
                            : fmt::format("after step {}", step),
             checkpoint, signal_to_exit_s);
}

void RunLogger::finish(const RunSummary& s) {
  if (!active_) return;
  fmt::print(stderr, "[{}] trained {} steps in {:.2f} s ({:.2f} s wall, {:.2f} s communicating); generated {} tokens "
             "in {:.3f} s\n", stage_, s.steps - s.first_step, s.train_s, s.train_wall_s, s.comm_s, s.generated_tokens,
             s.inference_s);
  fmt::print("{}\n", s.generated_text);
  if (!mfu_over_peak_) {
    metrics_->finish(s);
    return;
  }
  RunSummary noted = s;
  noted.provenance["mfu_note"] =
      peak_configured_ ? "some steps' MFU is above 100%: train.peak_gflops is below what this machine reaches"
                       : "some steps' MFU is above 100%: the peak (peak_gflops) was measured low, e.g. on a busy "
                         "machine; give train.peak_gflops";
  metrics_->finish(noted);
}

}  // namespace gpt2
