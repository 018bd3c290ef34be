// OpenBLAS as the CPU backend uses it: what it is (for provenance) and how
// fast its SGEMM runs on this machine (the MFU denominator of the CPU
// stages, and the kernel benchmarks' compute ceiling).
#pragma once

#include <string>

namespace gpt2::cpu {

// openblas_get_corename(): the kernel chosen at run time ("Zen", "SkylakeX").
std::string blas_core();
// openblas_get_config(): its build configuration.
std::string blas_config();

// Median GFLOP/s of a square SGEMM (n x n x n) with OpenBLAS's own threading
// on `threads` threads: the machine's practical matrix-multiply ceiling.
// Leaves OpenBLAS set to 1 thread afterwards (the CPU backend's setting).
double sgemm_ceiling_gflops(int threads, int n = 2048, int reps = 5);
// The same for the bf16 products of train.precision bf16 (bf16_matmul.h):
// oneDNN's (n,n,n) product on `threads` threads, the median of `reps`.
double bf16_ceiling_gflops(int threads, int n = 2048, int reps = 5);

}  // namespace gpt2::cpu
