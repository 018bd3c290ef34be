// Runs an experiment's runs through the stage programs and records them.
//
// results/<experiment>/<run-id>/ holds run.yaml (the resolved stage
// configuration the program was given), the program's own config.yaml,
// metrics.jsonl and checkpoint (if kept), log.txt (its stdout and stderr) and
// status.json (ok | failed | skipped, and why), written last and atomically:
// a run counts as done only once status.json says ok. Re-running an
// experiment reuses done runs unless --force, so an interrupted experiment
// resumes where it stopped. Each attempt writes into "<run-id>.attempt/"; a
// forced rerun of a completed run that does not complete is kept as
// "<run-id>.last-attempt/" and the completed run stays: a failing run leaves
// every result intact.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "experiment.h"

namespace gpt2::harness {

struct Availability {
  bool available = false;
  std::string reason;  // why not, e.g. "not built: MPI (MPICH) was not found when the build was configured"
  std::filesystem::path program;
};

// Whether `stage` can run here: its program exists in stages_dir (and
// mpiexec is on PATH for the MPI stages).
Availability stage_availability(const std::string& stage, const std::filesystem::path& stages_dir);

struct RunnerOptions {
  std::filesystem::path results_dir;  // results/<experiment>
  std::filesystem::path stages_dir;   // where the stage programs are
  bool force = false;                 // rerun completed runs
};

// Runs (or reuses) every run, then writes runs.csv and loss.csv.
// Returns the number of runs that failed.
int run_experiment(const Experiment& ex, const RunnerOptions& opt);

// A run's status.json: ok | failed | skipped, why, how long, when (UTC).
struct Status {
  std::string status, reason;
  double seconds = 0;
  std::string date;
};
// nullopt when there is none or it cannot be read (the run is not done).
std::optional<Status> read_status(const std::filesystem::path& dir);
void write_status(const std::filesystem::path& dir, const Status& s);

// The attempt directory beside a run's directory: "<dir>.attempt".
std::filesystem::path attempt_dir(const std::filesystem::path& dir);
// Records `st` (dated now) in the attempt directory and moves it into place as
// `dir`; but if the attempt did not complete and `prev` (the run's earlier
// status) is ok, the earlier run stays and the attempt becomes
// "<dir>.last-attempt": then returns false.
bool commit_attempt(const std::filesystem::path& dir, Status st, const std::optional<Status>& prev);

// Runs argv with stdout and stderr to `log`, in its own process group so a
// timeout ends mpiexec and every rank. Returns the exit status, or -1 on timeout.
int launch(const std::vector<std::string>& argv, const std::filesystem::path& log, double timeout_s);

// The last line of a program's log that carries an error message, or "".
std::string error_from_log(const std::filesystem::path& log);

// The full path of an executable `name` on PATH, or "".
std::string find_on_path(const std::string& name);

// Rebuilds results/<experiment>/runs.csv and loss.csv from the run directories.
void write_results_csv(const Experiment& ex, const std::filesystem::path& results_dir);

}  // namespace gpt2::harness
