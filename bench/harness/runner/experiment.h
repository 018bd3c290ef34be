// Stage experiments (experiments/*.yaml, `kind: stages`, the default): what
// to run, expanded into runs of the stage programs. Other kinds:
// kernels_experiment.h, peer_experiment.h, mpi_step_experiment.h.
//
//   name: table1                      # default: the file's stem
//   description: ...                  # one paragraph, shown in the reports
//   base: ../configs/original.yaml    # stage configuration (relative to this file)
//   config: {train.steps: 50}         # overrides for every run (section.key: value)
//   reports: [table1]                 # table1 | table2 | scaling | tensor_parallel
//   repetitions: 3                    # runs of each configuration
//   seeds: [1337]                     # train.seed values (a matrix axis); default: the configuration's
//   timeout_s: 3600                   # per run
//   checkpoints: false                # keep each run's training checkpoint
//   launcher: local                   # local | slurm: each run a Slurm job (runner/slurm.h)
//   slurm: {partition: debug, time: "30", sbatch: [--qos=low], ranks: srun, signal_s: 60}
//   runs:
//     - stage: serial                 # serial | mpi | cuda | mpi_cuda
//       threads: [1, 2]               # lists expand into a matrix; default: the configuration's train.threads
//     - stage: mpi
//       ranks: [1, 2, 4]
//       threads: 1
//       hostfile: ../hostfiles/localhost
//       config: {train.grad_bucket_mb: 4}
//     - stage: mpi                    # a tensor-parallel layout: ranks = tp x dp
//       ranks: 2
//       config: {parallel.tp: 2, parallel.block_types: [spd, spd, tp, tp]}
//
// Every run is resolved to a full stage configuration by the serial stage
// program (stage_config.h: base, the experiment's config, the run's config,
// then threads, seed and checkpoints) and planned by it (`serial plan
// --stage S --ranks N`: the layout checks are the engine's own) before
// anything runs; errors name the file, line and key, with a "did you mean"
// hint for unknown keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runner/slurm_options.h"
#include "runner/stage_config.h"

namespace gpt2::harness {

struct RunSpec {
  std::string stage;
  int ranks = 1;
  int threads = 1;
  // The layout of the ranks (parallel.tp, parallel.block_types of the
  // resolved configuration): data-parallel size ranks / tp.
  int tp = 1;
  std::string block_types;  // "tp,spd,..." as the configuration gives it; "" for all tp
  // Pipeline stages, microbatches, schedule and ZeRO-1 as one text, e.g.
  // "pp2 m4 zb-h1", "zero", "pp2 m2 1f1b zero"; "" for none of them.
  std::string pipeline;
  int pp = 1;
  // The model's architecture keys that differ from the default GPT-2, as
  // "key=value" words ("arch=llama n_kv_head=2"); "" for the default model.
  std::string variant;
  int repetition = 0;
  uint64_t seed = 0;
  std::string hostfile;  // absolute path or ""
  std::string config;    // the resolved configuration the stage is given (run.yaml)
  std::string plan;      // the engine's plan of the run (plan.json; docs/plan.md)
  // A digest of the resolved configuration but train.seed: runs with equal
  // digests (repetitions, seeds) share a report row; any other difference
  // splits them (reports/report_inputs.h).
  std::string config_digest;
  int64_t steps = 0;     // its train.steps
  std::string id;        // stage-rR-tT[-tpP][-ppS]-repK-<hash of the resolved run and the build>
};

struct Experiment : ExperimentInfo {
  // `needs:` keys (key -> what to pass) that the command line did not set
  // (--set KEY=VALUE): the experiment is skipped, and says what to pass.
  std::string skip_reason;
  std::vector<std::string> reports;
  int repetitions = 1;
  double timeout_s = 3600;
  bool checkpoints = false;
  std::vector<RunSpec> runs;
  std::string launcher = "local";  // `launcher:` local | slurm (harness run --launcher overrides it)
  SlurmOptions slurm;              // `slurm:` partition, account, time, sbatch, ranks (srun | mpiexec), signal_s
};

// Parses, expands and validates; throws std::invalid_argument naming
// file:line and the key. `build_id` (the build's git description) enters
// every run id, so a new build does not reuse an old build's results.
// `cli` are the command line's --set overrides ("key=value"), applied to
// every run after the experiment's own settings.
Experiment load_experiment(const std::filesystem::path& file, const std::string& build_id, ConfigResolver& resolver,
                           const std::vector<std::string>& cli = {});

}  // namespace gpt2::harness
