// The benchmarked kernels of the contract (core/backend.h), each as a case
// that owns its random inputs and its outputs at one shape, can run the kernel
// on any backend and names the outputs to compare with the naive reference
// and the tolerance of each.
//
// Tolerances (those of tests/kernels_test.cpp, with the same derivations):
// both sides compute in float (unit roundoff u = 2^-24); a sum of K terms in a
// different order differs by up to ~K*u times the sum of the terms' sizes.
// Matmul: |err| <= 2(K+1) u sum_k |a_ik||w_kj|; with inputs U(-1,1) that sum
// has mean K/4, and K/2 bounds it for every element in practice, hence
// atol = 2(K+1) u K/2.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "bench_setup.h"
#include "kernel_costs.h"

namespace gpt2::bench {

struct Tolerance {
  double atol = 0, rtol = 0;
};

struct CheckedOutput {
  std::string name;
  float* data;
  size_t n;
  Tolerance tol;
};

class KernelCase {
 public:
  virtual ~KernelCase() = default;
  // Puts every output (and in-place state) back to its starting value, so
  // that the reference and the variant start from the same state.
  virtual void reset() = 0;
  virtual void run(Backend& be) = 0;
  virtual std::vector<CheckedOutput> outputs() = 0;
  virtual KernelCost cost() const = 0;
};

struct KernelSpec {
  std::string kernel;  // the Backend method, e.g. "matmul_forward"
  std::string layer;   // which of the model's matmuls ("qkv", "fc", ...), or ""
  // Builds the case at `shape`; `for_check` may shrink the batch (see
  // check_shape below) so that the naive reference stays affordable.
  std::function<std::unique_ptr<KernelCase>(const BenchShape& shape, bool for_check)> make;
  // The naive reference is too slow to time at the larger shape (minutes).
  bool heavy = false;
  std::string name() const { return layer.empty() ? kernel : kernel + "." + layer; }
};

// Every kernel of the contract, in the order the benchmarks are registered.
// The checks of the matrix products and of attention run on fewer rows than
// the timed case (matmul: at most 256 rows; attention: one batch row); the
// sizes that choose code paths (C, OC, T, NH) are those of the timed case.
const std::vector<KernelSpec>& kernel_specs();

// Runs `spec` on `variant` and on the naive reference from the same inputs
// and returns "" if every output is within tolerance, else a message naming
// the output, the worst index, expected, actual and tolerance. `corrupt`
// perturbs the variant's first output first (to test that checks fail).
std::string check_against_reference(const KernelSpec& spec, const BenchShape& shape, Backend& variant,
                                    bool corrupt);

}  // namespace gpt2::bench
