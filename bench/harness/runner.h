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
#include <string>

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

// Rebuilds results/<experiment>/runs.csv and loss.csv from the run directories.
void write_results_csv(const Experiment& ex, const std::filesystem::path& results_dir);

}  // namespace gpt2::harness
