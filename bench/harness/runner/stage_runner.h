// Runs a stage experiment's runs through the stage programs (each run one
// job of the job loop, job_loop.h) and indexes them.
//
// results/<experiment>/<run-id>/ holds run.yaml (the resolved stage
// configuration the program was given), the program's own config.yaml,
// metrics.jsonl and checkpoint (if kept), log.txt (its stdout and stderr) and
// status.json (ok | failed | skipped, and why), written last.
// results/<experiment>/runs.csv and loss.csv (tables.h) are rebuilt from the
// run directories after every run: the numbers come from each run's metrics
// stream, read through util/records.h, the one reader of that schema.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runner/experiment.h"
#include "runner/job_loop.h"
#include "runner/slurm.h"
#include "records/tables.h"

namespace gpt2::harness {

struct Availability {
  bool available = false;
  std::string reason;  // why not, e.g. "not built: MPI (MPICH) was not found when the build was configured"
  std::filesystem::path program;
};

// Whether `stage` can run here: its program exists in stages_dir (and
// mpiexec is on PATH for the MPI stages).
Availability stage_availability(const std::string& stage, const std::filesystem::path& stages_dir);

// The command line of one training run of `stage` (under mpiexec for the MPI
// stages), given run.yaml, writing into out_dir: a fresh run (--overwrite),
// or, when out_dir holds an earlier attempt's checkpoint, its continuation
// (--resume auto).
std::vector<std::string> stage_train_command(const std::string& stage, const std::filesystem::path& program, int ranks,
                                             const std::string& hostfile, const std::filesystem::path& run_yaml,
                                             const std::filesystem::path& out_dir);

struct RunnerOptions {
  std::filesystem::path results_dir;  // results/<experiment>
  std::filesystem::path stages_dir;   // where the stage programs are
  bool force = false;                 // rerun completed runs
  int retries = 0;                    // attempts after a failed or preempted one (each resumes its checkpoint)
  std::optional<SlurmOptions> slurm;  // --launcher slurm: each run a batch job (runner/slurm.h)
};

// The first attempt's start of a run writing into out_dir: --overwrite, or
// --resume auto when out_dir holds an earlier attempt's complete checkpoint.
std::vector<std::string> start_flags(const std::filesystem::path& out_dir);

// Runs (or reuses) every run, then writes runs.csv and loss.csv.
// Returns the number of runs that failed.
int run_experiment(const Experiment& ex, const RunnerOptions& opt);

// One run's row of runs.csv from its directory (status `st`, its metrics
// stream when it completed), and its rows of loss.csv appended to `loss`.
RunRow run_row(const std::string& experiment, const RunSpec& r, const Status& st, const std::filesystem::path& dir,
               std::vector<LossRow>& loss);

// Rebuilds results/<experiment>/runs.csv and loss.csv from the run directories.
// Returns the rows written.
std::vector<RunRow> write_results_csv(const Experiment& ex, const std::filesystem::path& results_dir);
// The step-time model's bound: a run whose |prediction_error| passes it is named when the experiment ends.
inline constexpr double kPredictionBound = 0.15;

// What run_row needs of a run, from its row of runs.csv (for stored results
// whose experiment file has since changed: ids hash the build).
RunSpec spec_of_row(const RunRow& row);

// Rebuilds the runs.csv and loss.csv of stored results (results_dir) from
// the run folders its runs.csv lists, through run_row: after a change to
// what a row holds. Rows (and losses) of folders not kept stay as they were.
// Returns the number of rows rebuilt.
int reindex_results(const std::filesystem::path& results_dir);

}  // namespace gpt2::harness
