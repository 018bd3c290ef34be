// The seam between the kernel benchmark driver (kernel_bench.cpp) and one
// program built from it. Each program links exactly one definition of
// kernel_program(): kernel_bench links cpu_program.cpp (the naive reference
// and the CPU backend at 1 and 2 threads), kernel_bench_cuda, built only with
// CUDA, links cuda_program.cpp (the naive reference and the CUDA backend).
// The cases, the reference check, the counters and the flags are shared.
#pragma once

#include <vector>

#include "bench_setup.h"

namespace gpt2::bench {

struct KernelProgram {
  const char* name;     // "kernel_bench", "kernel_bench_cuda"
  const char* summary;  // --help's first line
  const char* details;  // --help's text after the flags
  // Measures the ceilings, records them (and the machine) in the JSON's
  // context and returns the variants with their roofs set. Throws
  // BackendUnavailable where the program's device is missing.
  std::vector<Variant> (*setup)(const BenchOptions& options);
};

const KernelProgram& kernel_program();

}  // namespace gpt2::bench
