// The one run loop of the harness, for every kind of experiment (stage
// runs, kernel benchmark programs, the PyTorch peer, the MPI step): a job is
// one directory of results, results/<experiment>/<job-id>/.
//
// A job counts as done only once its status.json says ok; status.json is
// written last and atomically. A rerun reuses done jobs unless `force`, so an
// interrupted experiment resumes where it stopped; a job done by another build
// of the programs (status.json's "build", programs_identity) is not reused but
// rerun, its results kept until the new attempt completes. Each attempt runs in
// "<job-id>.attempt/", created empty; a job that cannot run here is recorded
// as skipped with the reason, never run. A forced rerun of a done job that
// does not complete is kept as "<job-id>.last-attempt/" and the done job
// stays: a failing attempt leaves every result intact.
//
// What a job runs, and what it writes besides status.json, is the caller's.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/json.h"

namespace gpt2::harness {

// A job's status.json: ok | failed | skipped, why, how long, when (UTC).
struct Status {
  std::string status, reason;
  double seconds = 0;
  std::string date;
  std::string build = {};  // programs_identity of the programs that made it ("" in older results)
  int attempts = 1;        // the attempts it took (a resumable job resumed or retried adds one each)
};
// nullopt when there is none or it cannot be read (the job is not done).
std::optional<Status> read_status(const std::filesystem::path& dir);
void write_status(const std::filesystem::path& dir, const Status& s);

// The attempt directory beside a job's directory: "<dir>.attempt".
std::filesystem::path attempt_dir(const std::filesystem::path& dir);
// Records `st` (dated now) in the attempt directory and moves it into place as
// `dir`; but if the attempt did not complete and `prev` (the job's earlier
// status) is ok, the earlier job stays and the attempt becomes
// "<dir>.last-attempt": then returns false.
bool commit_attempt(const std::filesystem::path& dir, Status st, const std::optional<Status>& prev);

// How a program's run ended, as a status: exit 0 ok; exit 3 (kExitUnavailable)
// skipped, with the program's error line or last line as the reason; -1
// (launch's timeout) failed, naming `timeout_s`; any other status failed, with
// the last error line of the log. `seconds` is left for the loop.
Status status_of_exit(int rc, const std::filesystem::path& log, double timeout_s);

// The build of the programs in `dir` (the stage programs, or the benchmark
// programs): this harness's `git describe --dirty` and a hash of the bytes of
// every executable file directly in `dir` but the harness itself, e.g.
// "3dbc8a5-dirty+programs:0a1b2c3d4e". The description alone is one "-dirty"
// for every set of uncommitted edits, and names the harness's build, not the
// one --build points at.
std::string programs_identity(const std::filesystem::path& dir);

// The hash in a job's id: 40 bits of FNV-1a over what the job depends on
// (its settings, its configuration, the build), as 10 hex digits.
std::string id_hash(const std::string& key);

struct Job {
  std::string id;           // its directory under the results folder
  std::string label;        // what it is, for a job index: a program name, "t2", "r2-b4"
  std::string plan;         // shown before it runs, e.g. "50 steps, timeout 3600 s"
  std::string unavailable;  // why it cannot run here: recorded as skipped, not run ("" if it can run)
  Json settings;            // what the job is, written as job.json into its directory (skipped or not); null: none
  // Runs the job into `dir` (an empty attempt directory, or for a resumable
  // job the earlier attempt's files) and returns its status.
  std::function<Status(const std::filesystem::path& dir)> run;
  // The job's program continues what an earlier attempt left (a stage run:
  // its checkpoint, with --resume auto): an interrupted attempt's directory,
  // or a failed or preempted run's, is kept for it instead of emptied.
  bool resumable = false;
};

// Runs (or reuses) every job into results_dir/<id>, printing a progress line
// before and after each; `build` (programs_identity) is recorded in each
// status.json, and a done job recorded with another is rerun. `after_commit`
// runs after each attempt put in place (to rewrite an index, so an
// interruption loses nothing recorded). A failed or preempted resumable job
// is attempted up to `retries` more times, each continuing the last.
// Returns the number of jobs whose last attempt failed.
int run_jobs(const std::vector<Job>& jobs, const std::filesystem::path& results_dir, bool force,
             const std::string& build, const std::function<void()>& after_commit = {}, int retries = 0);

// The commands of one job, run one after another with their output appended
// to the job's log.txt, within the job's time limit as a whole.
class JobCommands {
 public:
  JobCommands(const std::filesystem::path& dir, double timeout_s, std::vector<std::string> unset_env = {});
  // Runs argv (with `env` set); returns the status of a command that did not
  // succeed (status_of_exit), or nullopt.
  std::optional<Status> run(const std::vector<std::string>& argv,
                            const std::vector<std::pair<std::string, std::string>>& env = {});
  const std::filesystem::path& log() const { return log_; }

 private:
  std::filesystem::path log_;
  double timeout_s_;
  std::vector<std::string> unset_env_;
  std::chrono::steady_clock::time_point t0_;
};

// The job index of peer and mpi_step experiments (label column "job").
inline constexpr const char* kJobsIndex = "jobs.csv";

// run_jobs, with the job index results_dir/<index> (write_job_index)
// rewritten after every job and at the end: kernels, peer and mpi_step
// experiments.
int run_indexed_jobs(const std::vector<Job>& jobs, const std::filesystem::path& results_dir, bool force,
                     const std::string& build, const std::string& index, const std::string& label_column);

// A JSON file of a job's directory (status.json, job.json, a program's
// output), or nullopt where there is none; throws std::runtime_error naming
// the file if it is not JSON.
std::optional<Json> read_json_file(const std::filesystem::path& path);

// A job of an index as the reports read it: its row, status.json and job.json.
struct JobRecord {
  std::string label, id;
  std::filesystem::path dir;
  std::optional<Status> status;  // nullopt: not run
  Json settings;                 // null where it has no job.json
  bool ok() const { return status && status->status == "ok"; }
  std::string status_word() const { return status ? status->status : "not run"; }
  std::string reason() const { return status ? status->reason : ""; }
  // "<label> (<status>: <reason>)": a report's line for a job it has no numbers of.
  std::string not_measured() const;
};
// The jobs of `index` (results_dir/<index>) in its order. Throws
// std::runtime_error for an unreadable index or job.json.
std::vector<JobRecord> read_job_records(const std::filesystem::path& results_dir, const std::string& index,
                                        const std::string& label_column);

// Writes `index` (tables.h's JobRow, label column `label_column`): each job's
// label, id and last status ("not run" where it has none).
void write_job_index(const std::filesystem::path& index, const std::string& label_column, const std::vector<Job>& jobs,
                     const std::filesystem::path& results_dir);

}  // namespace gpt2::harness
