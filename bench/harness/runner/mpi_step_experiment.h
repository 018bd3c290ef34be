// MPI step experiments (`kind: mpi_step`): the data-parallel training step of
// the MPI stage at R ranks, with one blocking gradient allreduce after
// backward and with bucketed allreduce overlapping backward
// (train.grad_bucket_mb), read from the stage's own metrics stream. One job
// of the job loop (job_loop.h) per (ranks, bucket size), each a few short
// training runs of the mpi stage.
//
//   kind: mpi_step
//   name: mpi_step                    # default: the file's stem
//   description: ...
//   base: ../configs/original.yaml    # stage configuration (relative to this file)
//   config: {train.steps: 7}          # overrides for every run (section.key: value)
//   ranks: [1, 2]                     # one job per rank count and bucket size
//   buckets: [0, 4]                   # train.grad_bucket_mb; 0 = one allreduce. One rank
//                                     # has no allreduce: it runs bucket 0 only
//   rounds: 1                         # training runs per job; the report takes their median
//   warmup_steps: 1                   # first steps of each run left out of its medians
//   hostfile: ../hostfiles/localhost  # optional: mpiexec -f
//   timeout_s: 1800                   # per job
//   unset_env: [OPENBLAS_CORETYPE]    # variables removed from the stage's environment
//
// Each job's configuration is resolved and checked by the serial stage
// program, as a stage experiment's runs are (stage_config.h), with
// train.grad_bucket_mb and train.save_checkpoint false (no checkpoints).
//
// Results: results/<name>/mpi-r<R>-b<bucket>-<hash>/ with job.json (ranks,
// bucket, rounds, warmup_steps), run.yaml, log.txt (every command and its
// output), round-<k>/ (the stage's config.yaml and metrics.jsonl) and
// status.json; results/<name>/jobs.csv indexes the jobs (label column "job":
// r<R>-b<bucket>). Without the MPI stage or mpiexec a job is skipped with the
// reason. Report: reports/<name>/mpi_step.md and mpi_step.csv
// (mpi_step_report.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner/job_loop.h"
#include "runner/stage_config.h"

namespace gpt2::harness {

struct MpiStepJob {
  int ranks = 1;
  double bucket_mb = 0;
  std::string config;  // the resolved configuration (run.yaml)
  int64_t steps = 0;
};

struct MpiStepExperiment : ExperimentInfo {
  int rounds = 1, warmup_steps = 1;
  std::string hostfile;  // absolute path or ""
  double timeout_s = 1800;
  std::vector<std::string> unset_env;
  std::vector<MpiStepJob> jobs;
};

// Parses, expands and validates (the configurations through the serial
// program); throws std::invalid_argument naming file:line and the key.
MpiStepExperiment load_mpi_step_experiment(const std::filesystem::path& file, ConfigResolver& resolver);

std::vector<Job> mpi_step_jobs(const MpiStepExperiment& ex, const std::string& build_id,
                               const std::filesystem::path& stages_dir);

// Writes reports/<name>/mpi_step.md and mpi_step.csv from results/<name>; returns them.
std::vector<std::filesystem::path> write_mpi_step_report(const MpiStepExperiment& ex,
                                                         const std::filesystem::path& results_dir,
                                                         const std::filesystem::path& reports_dir,
                                                         const std::string& reproduce_command);

}  // namespace gpt2::harness
