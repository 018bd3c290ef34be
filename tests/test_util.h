// Helpers for the tests: seeded random inputs and a comparison that, on
// failure, reports the worst element (index, expected, actual, tolerance).
// The random inputs are the op table's scheme (kernels/ops/op_arrays.h:
// element i a function of (seed, i)): a test's own arrays and the op table's
// cases (backend_ops.h, the kernel benchmarks) are drawn one way.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops/op_arrays.h"

namespace gpt2::testing {

// U(lo, hi) floats.
inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return ops::random_values(n, seed, lo, hi);
}

// Token ids uniform in [0, V).
inline std::vector<int32_t> random_tokens(size_t n, int V, uint32_t seed) { return ops::random_tokens(n, V, seed); }

template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const A* actual, const B* expected,
                                     size_t n, double atol, double rtol) {
  size_t worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; ++i) {
    double a = static_cast<double>(actual[i]), e = static_cast<double>(expected[i]);
    double tol = atol + rtol * std::fabs(e);
    double excess = std::isfinite(a) ? std::fabs(a - e) - tol : INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0) return ::testing::AssertionSuccess();
  double a = static_cast<double>(actual[worst]), e = static_cast<double>(expected[worst]);
  return ::testing::AssertionFailure()
         << what << ": worst index " << worst << " of " << n << ": expected " << e << ", actual " << a
         << ", |diff| " << std::fabs(a - e) << " > tolerance " << atol + rtol * std::fabs(e)
         << " (atol " << atol << ", rtol " << rtol << ")";
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const std::vector<A>& actual,
                                     const std::vector<B>& expected, double atol, double rtol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " != " << expected.size();
  }
  return all_close(what, actual.data(), expected.data(), actual.size(), atol, rtol);
}

}  // namespace gpt2::testing
