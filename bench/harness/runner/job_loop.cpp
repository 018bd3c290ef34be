// The harness's one run loop (see job_loop.h).
#include "runner/job_loop.h"

#include "runner/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "runner/process.h"
#include "records/tables.h"
#include "util/console.h"
#include "util/files.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/provenance.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

std::string id_hash(const std::string& key) {
  return fmt::format("{:010x}", fnv1a64(key.data(), key.size()) & 0xffffffffffull);
}

std::string programs_identity(const fs::path& dir) {
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  std::vector<fs::path> programs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::perms p = e.status().permissions();
    if (!e.is_regular_file() || (p & fs::perms::owner_exec) == fs::perms::none) continue;
    if (fs::equivalent(e.path(), self, ec)) continue;  // the harness: its edits change no measurement
    programs.push_back(e.path());
  }
  std::sort(programs.begin(), programs.end());
  uint64_t h = kFnvOffsetBasis;
  std::vector<char> buf(1 << 20);
  for (const fs::path& p : programs) {
    const std::string name = p.filename().string();
    h = fnv1a64(name.data(), name.size(), h);
    std::ifstream f(p, std::ios::binary);
    while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())) || f.gcount() > 0) {
      h = fnv1a64(buf.data(), static_cast<size_t>(f.gcount()), h);
    }
  }
  return fmt::format("{}+programs:{:010x}", build_info().git_commit, h & 0xffffffffffull);
}

std::optional<Json> read_json_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return std::nullopt;
  return parse_json(read_record_file(p, "", "a JSON record"), p.string());
}

std::optional<Status> read_status(const fs::path& dir) {
  try {
    const std::optional<Json> j = read_json_file(dir / "status.json");
    if (!j) return std::nullopt;
    return Status{j->at("status").get<std::string>(), j->value("reason", ""), j->value("seconds", 0.0),
                  j->value("date", ""), j->value("build", ""), j->value("attempts", 1)};
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable (a half-written file from another tool): the job is not done
  }
}

void write_status(const fs::path& dir, const Status& s) {
  const Json j{{"status", s.status}, {"reason", s.reason}, {"seconds", round_fixed(s.seconds, 3)}, {"date", s.date},
               {"build", s.build}, {"attempts", s.attempts}};
  write_file_atomically(dir / "status.json", json_text(j) + "\n");
}

fs::path attempt_dir(const fs::path& dir) { return dir.string() + ".attempt"; }

bool commit_attempt(const fs::path& dir, Status st, const std::optional<Status>& prev) {
  const fs::path attempt = attempt_dir(dir);
  st.date = utc_now();
  write_status(attempt, st);
  if (st.status != "ok" && prev && prev->status == "ok") {
    const fs::path kept = dir.string() + ".last-attempt";
    fs::remove_all(kept);
    fs::rename(attempt, kept);
    return false;
  }
  fs::remove_all(dir);
  fs::rename(attempt, dir);
  return true;
}

Status status_of_exit(int rc, const fs::path& log, double timeout_s) {
  if (rc == 0) return Status{"ok", "", 0, ""};
  if (rc == -1) return Status{"failed", fmt::format("timed out after {:.0f} s (timeout_s)", timeout_s), 0, ""};
  std::string why = error_from_log(log);
  if (rc == kExitPreempted) {  // stopped for a signal, its checkpoint written: the next attempt resumes it
    return Status{"preempted", "stopped by a signal after writing its checkpoint; the next run resumes it", 0, ""};
  }
  if (rc == kExitUnavailable) {  // this machine lacks what the program needs (a GPU, say)
    if (why.empty()) why = last_line_of(log);
    return Status{"skipped", why.empty() ? "the program cannot run on this machine (exit status 3)" : why, 0, ""};
  }
  return Status{"failed", why.empty() ? fmt::format("exit status {} (see log.txt)", rc) : why, 0, ""};
}

namespace {

// A status a resumable job's next attempt continues from.
bool unfinished(const std::string& status) { return status == "failed" || status == "preempted"; }

// The directory an attempt runs in. A resumable job continues what is there:
// an interrupted attempt's directory as it was, or a failed or preempted
// run's, moved there; any other job (or none of those) gets a new, empty one.
// Returns the attempts the new one continues (0: none).
int prepare_attempt(const Job& job, const fs::path& dir, const fs::path& attempt, const std::optional<Status>& prev) {
  std::error_code ec;
  if (job.resumable && fs::is_directory(attempt, ec) && !fs::is_empty(attempt, ec)) {
    const std::optional<Status> moved = read_status(attempt);  // a failed run's, itself then interrupted
    return (moved ? moved->attempts : 0) + 1;
  }
  fs::remove_all(attempt);  // nothing stale from an interrupted attempt
  if (job.resumable && prev && unfinished(prev->status)) {
    fs::rename(dir, attempt);
    return prev->attempts;
  }
  fs::create_directories(attempt);
  return 0;
}

// One attempt of `job` in its attempt directory, its status returned (seconds and attempts filled in).
Status run_attempt(const Job& job, const fs::path& attempt, const std::string& title, int earlier) {
  if (!job.settings.is_null()) write_file_atomically(attempt / "job.json", json_text(job.settings, 1) + "\n");
  Status st{"skipped", job.unavailable, 0, ""};
  if (job.unavailable.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    progress_begin(title);
    try {
      st = job.run(attempt);
    } catch (...) {
      progress_end();
      throw;
    }
    progress_end();
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  st.attempts = earlier + std::max(st.attempts, 1);  // a job's own attempts (a Slurm job's requeues), else one
  return st;
}

}  // namespace

int run_jobs(const std::vector<Job>& jobs, const fs::path& results_dir, bool force, const std::string& build,
             const std::function<void()>& after_commit, int retries) {
  fs::create_directories(results_dir);
  // One harness at a time per results folder: two at once would interleave
  // their attempts and indexes. Released when this returns (or the process ends).
  const DirectoryLock lock(results_dir, "results folder", "");
  int failed = 0;
  const size_t total = jobs.size();
  for (size_t index = 1; index <= total; ++index) {
    const Job& job = jobs[index - 1];
    const fs::path dir = results_dir / job.id;
    std::optional<Status> prev = read_status(dir);
    const bool done = prev && prev->status == "ok";
    if (done && !force && prev->build == build) {
      console::err(fmt::format("[{}/{}] {}: done earlier, reused\n", index, total, job.id));
      continue;
    }
    if (done && !force) {  // numbers of other programs are not this build's: measure again, keep them meanwhile
      console::err(fmt::format("[{}/{}] {}: done earlier by another build ({}), rerun; kept until this run "
                               "completes\n", index, total, job.id,
                               prev->build.empty() ? "not recorded" : prev->build));
    }
    Status st;
    for (int retry = 0;; ++retry) {
      const fs::path attempt = attempt_dir(dir);
      const int earlier = prepare_attempt(job, dir, attempt, prev);
      console::err(fmt::format(
          "[{}/{}] {}: {} ({})...\n", index, total, job.id,
          earlier > 0 ? fmt::format("attempt {}, continuing the last", earlier + 1) : std::string("running"), job.plan));
      st = run_attempt(job, attempt, fmt::format("[{}/{}] {}", index, total, job.id), earlier);
      st.build = build;
      if (!commit_attempt(dir, st, prev)) {
        console::err(fmt::format("[{}/{}] {}: this attempt {} ({}); the earlier completed run is kept, the attempt is "
                                 "in {}\n", index, total, job.id, st.status, st.reason,
                                 dir.string() + ".last-attempt"));
        break;
      }
      if (after_commit) after_commit();
      console::err(fmt::format("[{}/{}] {}: {}{} ({:.1f} s)\n", index, total, job.id, st.status,
                               st.reason.empty() ? "" : ": " + st.reason, st.seconds));
      if (!job.resumable || retry >= retries || !unfinished(st.status)) break;
      prev = read_status(dir);
    }
    if (unfinished(st.status)) ++failed;
  }
  return failed;
}

JobCommands::JobCommands(const fs::path& dir, double timeout_s, std::vector<std::string> unset_env)
    : log_(dir / "log.txt"),
      timeout_s_(timeout_s),
      unset_env_(std::move(unset_env)),
      t0_(std::chrono::steady_clock::now()) {}

std::optional<Status> JobCommands::run(const std::vector<std::string>& argv,
                                       const std::vector<std::pair<std::string, std::string>>& env) {
  const double left = timeout_s_ - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  LaunchOptions opt;
  opt.timeout_s = left;
  opt.append_log = true;
  opt.env = env;
  opt.unset_env = unset_env_;
  const int rc = left <= 0 ? -1 : launch(argv, log_, opt);
  const Status st = status_of_exit(rc, log_, timeout_s_);
  return st.status == "ok" ? std::nullopt : std::optional(st);
}

std::string JobRecord::not_measured() const {
  return fmt::format("{} ({}{})", label, status_word(), reason().empty() ? "" : ": " + reason());
}

std::vector<JobRecord> read_job_records(const fs::path& results_dir, const std::string& index,
                                        const std::string& label_column) {
  std::vector<JobRecord> out;
  for (const JobRow& row : read_job_index(results_dir / index, label_column)) {
    JobRecord r{row.label, row.id, results_dir / row.id, read_status(results_dir / row.id), nullptr};
    if (std::optional<Json> j = read_json_file(r.dir / "job.json")) r.settings = std::move(*j);
    out.push_back(std::move(r));
  }
  return out;
}

void write_job_index(const fs::path& index, const std::string& label_column, const std::vector<Job>& jobs,
                     const fs::path& results_dir) {
  std::vector<JobRow> rows;
  for (const Job& job : jobs) {
    const std::optional<Status> st = read_status(results_dir / job.id);
    rows.push_back(st ? JobRow{job.label, job.id, st->status, st->reason, round_fixed(st->seconds, 1), st->date}
                      : JobRow{job.label, job.id, "not run", "", std::nullopt, ""});
  }
  write_file_atomically(index, job_index_csv(label_column, rows));
}

int run_indexed_jobs(const std::vector<Job>& jobs, const fs::path& results_dir, bool force, const std::string& build,
                     const std::string& index, const std::string& label_column) {
  auto write_index = [&] { write_job_index(results_dir / index, label_column, jobs, results_dir); };
  const int failed = run_jobs(jobs, results_dir, force, build, write_index);
  write_index();
  return failed;
}

}  // namespace gpt2::harness
