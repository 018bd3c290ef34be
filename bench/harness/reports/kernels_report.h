// The report of a kernels experiment: reads the Google Benchmark JSON of
// each program (results/<exp>/<program>-<hash>/benchmark.json) and writes
// reports/<exp>/kernels.md (the machine and its ceilings, then one table per
// kernel: variant, shape, median time, GFLOP/s, GB/s, FLOP/byte, percent of
// the roofline ceiling, speed-up over the naive reference), kernels.csv (the
// same rows, tidy) and a roofline chart (gnuplot SVG).
//
// The report's ceiling per thread count is the best of the programs' start-up
// measurements (another process on the machine can only lower a measurement),
// and the report's percentages of the roofline are computed against it from
// each benchmark's FLOPs, bytes and time.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner/kernels_experiment.h"

namespace gpt2::harness {

// One benchmark's summary, as the report shows it.
struct KernelResult {
  std::string program;  // e.g. "kernel_bench"
  std::string kernel;   // "matmul_forward.fc"
  std::string shape;    // "original"
  std::string variant;  // "cpu/t2"
  double time_ms = 0, gflops = 0, gbs = 0, flop = 0, bytes = 0;
  double roofline = 0;  // the program's own "roofline" counter (against its own start-up ceilings)
  int threads = 1;      // kernel_threads: which ceiling applies
  int samples = 0;      // repetitions behind the median (1 if no aggregate)
  std::string error;    // the check's message when the benchmark reported an error
};

// Reads one program's Google Benchmark JSON. Uses each benchmark's "median"
// aggregate, or its single run where there is no aggregate (one repetition).
// Throws std::runtime_error naming the file for unreadable or malformed input.
std::vector<KernelResult> read_benchmark_json(const std::filesystem::path& file, const std::string& program);

// Writes the report files; returns them. `reproduce_command` is shown in the report.
std::vector<std::filesystem::path> write_kernels_report(const KernelsExperiment& ex,
                                                        const std::filesystem::path& results_dir,
                                                        const std::filesystem::path& reports_dir,
                                                        const std::string& reproduce_command);

}  // namespace gpt2::harness
