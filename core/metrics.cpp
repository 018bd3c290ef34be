#include "metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace gpt2 {

namespace {
// The "step" value of a JSON line written by this class, or -1.
int64_t step_of(const std::string& line) {
  const char* key = "\"step\": ";
  size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + std::strlen(key), nullptr, 10);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_steps_before)
    : path_(path), partial_(path + ".partial") {
  std::vector<std::string> kept;
  if (keep_steps_before >= 0) {
    std::ifstream old(partial_);
    for (std::string l; std::getline(old, l);) {
      int64_t s = step_of(l);
      if (s >= 0 && s < keep_steps_before && l.find("\"summary\"") == std::string::npos) kept.push_back(l);
    }
  }
  f_ = std::fopen(partial_.c_str(), "w");
  if (!f_) throw std::runtime_error(fmt::format("{}: cannot write metrics: {}", partial_, std::strerror(errno)));
  for (const std::string& l : kept) line(l);
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::line(const std::string& json) {
  if (std::fputs(json.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0) {
    throw std::runtime_error(fmt::format("{}: writing metrics failed: {}", partial_, std::strerror(errno)));
  }
}

void MetricsWriter::step(const StepRecord& r) {
  line(fmt::format(
      "{{\"event\": \"step\", \"step\": {}, \"loss\": {:.7g}, \"lr\": {:.7g}, \"grad_norm\": {:.7g}, "
      "\"step_ms\": {:.3f}, \"tokens_per_s\": {:.1f}, \"flops_per_s\": {:.4g}, \"mfu\": {:.4f}, "
      "\"comm_ms\": {:.3f}, \"comm_bytes\": {}}}",
      r.step, r.loss, r.lr, r.grad_norm, r.step_ms, r.tokens_per_s, r.flops_per_s, r.mfu, r.comm_ms, r.comm_bytes));
}

void MetricsWriter::eval(int64_t step, double val_loss) {
  line(fmt::format("{{\"event\": \"eval\", \"step\": {}, \"val_loss\": {:.7g}}}", step, val_loss));
}

void MetricsWriter::finish(const std::string& summary_fields) {
  line(fmt::format("{{\"event\": \"summary\", {}}}", summary_fields));
  std::fclose(f_);
  f_ = nullptr;
  if (std::rename(partial_.c_str(), path_.c_str()) != 0) {
    throw std::runtime_error(fmt::format("{}: cannot rename metrics into place: {}", path_, std::strerror(errno)));
  }
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace gpt2
