// The benchmarked kernels of the contract (core/backend.h), each as a case
// that owns its random inputs and its outputs at one shape, in the memory of
// the backend it will run on (the host's, or a GPU's), can run the kernel on
// that backend and names the outputs to compare with the naive reference and
// the tolerance of each. Inputs are drawn on the host and uploaded; starting
// states are kept on the host and uploaded again by reset(); outputs() are
// host copies. Token and target arrays stay on the host (the contract's rule).
//
// Tolerances (those of tests/kernels_test.cpp, with the same derivations):
// both sides compute in float (unit roundoff u = 2^-24); a sum of K terms in a
// different order differs by up to ~K*u times the sum of the terms' sizes.
// Matmul: |err| <= 2(K+1) u sum_k |a_ik||w_kj|; with inputs U(-1,1) that sum
// has mean K/4, and K/2 bounds it for every element in practice, hence
// atol = 2(K+1) u K/2.
// A GPU sums in other orders again (blocks, warps, cuBLAS's split-K) and
// contracts a*b+c into FMAs; both stay within the same K u bounds, which
// assume nothing about the order, so the CUDA variant is checked with the
// same tolerances.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "bench_setup.h"
#include "kernel_costs.h"

namespace gpt2::bench {

struct Tolerance {
  double atol = 0, rtol = 0;
};

struct CheckedOutput {
  std::string name;
  std::vector<float> values;  // a host copy
  Tolerance tol;
};

class KernelCase {
 public:
  virtual ~KernelCase() = default;
  // Puts every output (and in-place state) back to its starting value, so
  // that the reference and the variant start from the same state. Uploads
  // (a memcpy on the host); never inside a timed loop.
  virtual void reset() = 0;
  // `be` must be a backend whose memory() is the one the case was made in.
  virtual void run(Backend& be) = 0;
  virtual std::vector<CheckedOutput> outputs() = 0;  // downloads
  virtual KernelCost cost() const = 0;
};

struct KernelSpec {
  std::string kernel;  // the Backend method, e.g. "matmul_forward"
  std::string layer;   // which of the model's matmuls ("qkv", "fc", ...), or ""
  // Builds the case at `shape` with its arrays in `memory`; `for_check` may
  // shrink the batch (see kernel_specs below) so that the naive reference
  // stays affordable.
  std::function<std::unique_ptr<KernelCase>(const BenchShape& shape, bool for_check, Memory& memory)> make;
  // The naive reference is too slow to time at the larger shape (minutes).
  bool heavy = false;
  std::string name() const { return layer.empty() ? kernel : kernel + "." + layer; }
};

// Every kernel of the contract, in the order the benchmarks are registered.
// The checks of the matrix products and of attention run on fewer rows than
// the timed case (matmul: at most 256 rows; attention: one batch row); the
// sizes that choose code paths (C, OC, T, NH) are those of the timed case.
const std::vector<KernelSpec>& kernel_specs();

// Runs `spec` on `variant` (a case in its memory) and on the naive reference
// (a case in host memory) from the same inputs and returns "" if every output is within tolerance, else a message naming
// the output, the worst index, expected, actual and tolerance. `corrupt`
// perturbs the variant's first output first (to test that checks fail).
std::string check_against_reference(const KernelSpec& spec, const BenchShape& shape, Backend& variant,
                                    bool corrupt);

}  // namespace gpt2::bench
