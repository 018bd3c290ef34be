// Kernel experiments (experiments/*.yaml with `kind: kernels`): the kernel
// microbenchmark programs (bench/kernels) run through Google Benchmark's own
// JSON output, instead of training runs of the stage programs.
//
//   kind: kernels
//   name: kernels                      # default: the file's stem
//   description: ...
//   repetitions: 5                     # --benchmark_repetitions (median reported)
//   min_time: 0.05                     # --benchmark_min_time, seconds
//   timeout_s: 900                     # per program
//   unset_env: [OPENBLAS_CORETYPE]     # variables removed from the programs' environment
//   benchmarks:
//     - program: kernel_bench          # a program in <build>/bench
//       args: [--shapes=original,larger]
//       filter: "matmul"               # --benchmark_filter (optional)
//     - program: allreduce_bench
//       ranks: 2                       # run under mpiexec -n 2
//
// Each program is one job of the job loop (job_loop.h): results/<name>/
// <program>-<hash>/ with benchmark.json, log.txt and status.json (ok | failed
// | skipped), the hash covering the program, its arguments and the build, so
// a new build or new arguments never reuse old numbers;
// results/<name>/programs.csv (tables.h's job index, label column "program")
// indexes the last run and is what the report reads. A program that is not
// built (no Google Benchmark, no MPI) or needs mpiexec where there is none is
// recorded as skipped with the reason.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner/job_loop.h"
#include "runner/yaml_reader.h"

namespace gpt2::harness {

struct KernelProgram {
  std::string program;
  std::vector<std::string> args;
  std::string filter;
  int ranks = 1;    // > 1: under mpiexec -n ranks
  std::string id;   // <program>-<hash>
};

struct KernelsExperiment : ExperimentInfo {
  int repetitions = 5;
  double min_time = 0.05;
  double timeout_s = 900;
  std::vector<std::string> unset_env;
  std::vector<KernelProgram> programs;
};

inline constexpr const char* kKernelsIndex = "programs.csv";

// Parses and validates; throws std::invalid_argument naming file:line and the key.
KernelsExperiment load_kernels_experiment(const std::filesystem::path& file, const std::string& build_id);

// Google Benchmark's command line for one program (without mpiexec).
std::vector<std::string> benchmark_command(const KernelsExperiment& ex, const KernelProgram& p,
                                           const std::filesystem::path& program, const std::filesystem::path& json);

// One job per program (`bench_dir` holds the programs), for run_indexed_jobs
// with the index kKernelsIndex, label column "program".
std::vector<Job> kernels_jobs(const KernelsExperiment& ex, const std::filesystem::path& bench_dir);

}  // namespace gpt2::harness
