#include "train/run_logger.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

#include "util/files.h"

namespace gpt2 {

namespace fs = std::filesystem;

void RunLogger::open(const fs::path& out, bool overwrite, bool resuming, const std::string& config_yaml,
                     int64_t first_step) {
  if (!active_) return;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw std::invalid_argument(fmt::format("--out: cannot create '{}': {}", out.string(), ec.message()));
  const fs::path probe = out / ".write-test";
  {
    std::ofstream f(probe);
    if (!f) throw std::invalid_argument(fmt::format("--out: '{}' is not writable", out.string()));
  }
  fs::remove(probe);
  if (fs::exists(out / "metrics.jsonl") && !overwrite && !resuming) {
    throw std::invalid_argument(fmt::format(
        "--out: '{}' already holds a finished run (metrics.jsonl); choose another directory or pass --overwrite",
        out.string()));
  }
  write_file_atomically(out / "config.yaml", config_yaml);
  metrics_.emplace((out / "metrics.jsonl").string(), resuming ? first_step : -1);
}

void RunLogger::note(const std::string& text) const {
  if (active_) fmt::print(stderr, "[{}] {}\n", stage_, text);
}

void RunLogger::step(const StepRecord& r, int64_t steps, bool show_comm) {
  if (!active_) return;
  metrics_->step(r);
  fmt::print(stderr, "step {:>4}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} ms{} | {:.0f} tok/s | MFU {:.1f}%\n",
             r.step, steps, r.loss, r.lr, r.grad_norm, r.step_ms,
             show_comm ? fmt::format(" (comm {:.0f} ms)", r.comm_ms) : "", r.tokens_per_s, 100 * r.mfu);
}

void RunLogger::eval(const EvalRecord& r, int64_t steps) {
  if (!active_) return;
  metrics_->eval(r);
  fmt::print(stderr, "step {:>4}/{} | val loss {:.6f}\n", r.step, steps, r.val_loss);
}

void RunLogger::finish(const RunSummary& s) {
  if (!active_) return;
  fmt::print(stderr, "[{}] trained {} steps in {:.2f} s ({:.2f} s wall, {:.2f} s communicating); generated {} tokens "
             "in {:.3f} s\n", stage_, s.steps - s.first_step, s.train_s, s.train_wall_s, s.comm_s, s.generated_tokens,
             s.inference_s);
  fmt::print("{}\n", s.generated_text);
  metrics_->finish(s);
}

}  // namespace gpt2
