// harness calibrate: this machine's machine file (docs/prediction.md, "The
// machine file"; read by `<stage> plan --machine`). It runs the kernel
// benchmarks (<build>/bench/kernel_bench: our CPU backend, at the step's
// shapes, per thread count) and the gradient allreduce over MPI
// (<build>/bench/allreduce_bench at 2 and 4 ranks), and writes each kernel's
// median seconds a call at its shape, the node's link as latency and
// bandwidth (a line through the shapes' whole-gradient allreduces at 2
// ranks), the SGEMM ceiling, and where each figure came from.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gpt2::harness {

struct CalibrateRequest {
  std::filesystem::path build;  // where bench/kernel_bench and bench/allreduce_bench are
  std::filesystem::path out;    // the machine file to write
  bool overwrite = false;
  std::string name;  // the machine's name in the file; "" names it by its CPU and cores
  std::vector<int> threads = {1, 2};
  std::string shapes = "small,original";  // kernel_bench's shapes (comma-separated)
  int repetitions = 3;
  bool quick = false;  // the benchmarks' --quick: the tiny shape, meaningless figures (for the tests)
  double timeout_s = 3600;
};

// Writes req.out; returns the kernels timed. Throws std::invalid_argument for
// bad input (nothing run) and std::runtime_error for a benchmark that failed.
int calibrate(const CalibrateRequest& req);

}  // namespace gpt2::harness
