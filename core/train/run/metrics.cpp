#include "train/run/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "util/files.h"

namespace gpt2 {

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_steps_before)
    : path_(path), partial_(path + ".partial") {
  std::vector<std::string> kept;
  if (keep_steps_before >= 0) {
    // An interrupted stream, or else the finished one a longer run extends
    // (which stays in place until this one finishes).
    std::error_code ec;
    const std::string from = std::filesystem::exists(std::filesystem::symlink_status(partial_, ec)) ? partial_ : path_;
    std::istringstream old(std::filesystem::exists(std::filesystem::symlink_status(from, ec))
                               ? read_input_file(from, kMaxRecordBytes, "--resume", "the run's metrics stream")
                               : std::string());
    for (std::string l; std::getline(old, l);) {
      Json j;
      try {
        j = Json::parse(l);
      } catch (const Json::exception&) {
        continue;  // a line cut short by the interruption
      }
      const RecordKind kind = record_kind(j);
      const bool preempted = j.is_object() && j.value("event", "") == "preempted";
      if ((kind == RecordKind::kStep || kind == RecordKind::kEval || preempted) && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() < keep_steps_before) {
        kept.push_back(l);
      }
    }
  }
  // The kept lines go to a new file renamed over the old partial stream, so
  // a failure here leaves the interrupted stream as it was.
  const std::string fresh = partial_ + ".new";
  f_ = ::fdopen(open_output(fresh), "w");
  if (!f_) throw std::runtime_error(fmt::format("{}: cannot write metrics: {}", fresh, std::strerror(errno)));
  for (const std::string& l : kept) line(l);
  if (std::rename(fresh.c_str(), partial_.c_str()) != 0) {
    throw std::runtime_error(fmt::format("{}: cannot rename metrics into place: {}", partial_, std::strerror(errno)));
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::line(const std::string& json) {
  if (std::fputs(json.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0) {
    throw std::runtime_error(fmt::format("{}: writing metrics failed: {}", partial_, std::strerror(errno)));
  }
}

void MetricsWriter::step(const StepRecord& r) { line(json_text(to_json(r))); }

void MetricsWriter::eval(const EvalRecord& r) { line(json_text(to_json(r))); }

void MetricsWriter::preempted(int64_t step, const std::string& signal, double signal_to_exit_s,
                              bool abandoned_step) {
  line(json_text(Json{{"event", "preempted"}, {"step", step}, {"signal", signal},
                      {"signal_to_exit_s", signal_to_exit_s}, {"abandoned_step", abandoned_step}}));
}

void MetricsWriter::finish(const RunSummary& summary) {
  line(json_text(to_json(summary)));
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

namespace {
// A "Vm...:  1234 kB" line of /proc/self/status, in bytes (0 if absent).
uint64_t status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      kb = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

uint64_t phase_peak_rss_bytes() { return status_kb("VmHWM"); }
uint64_t rss_bytes() { return status_kb("VmRSS"); }

}  // namespace gpt2
