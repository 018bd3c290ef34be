// What a benchmark figure depends on besides our code: the CPU, the BLAS
// kernels actually selected, the environment that steers them. Every report
// prints this block so a number never travels without its machine.
#pragma once

#include <string>

namespace gpt2::bench {

struct MachineInfo {
  std::string cpu_model;
  int logical_cores = 0;
  std::string blas_core;       // openblas_get_corename()
  std::string blas_config;     // openblas_get_config()
  std::string openblas_coretype_env;  // OPENBLAS_CORETYPE, or "(unset)"
  std::string compiler;
  std::string date_utc;
};

MachineInfo machine_info();
std::string describe(const MachineInfo& m);

// Median GFLOP/s of a square SGEMM (n x n x n) with OpenBLAS's own threading
// on `threads` threads: the machine's practical matrix-multiply ceiling.
// Leaves OpenBLAS set to 1 thread afterwards (the CPU backend's setting).
double sgemm_ceiling_gflops(int threads, int n = 2048, int reps = 5);

}  // namespace gpt2::bench
