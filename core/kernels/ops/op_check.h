// Checking a backend against the reference with the op table: run a case on
// the reference backend (the expected outputs and their tolerances), run the
// same case on another backend, compare output by output. The backend-ops
// tests and the kernel benchmarks' check-before-timing both do it this way.
// Not here: which shapes and backends are checked (the tests, the
// benchmarks) or the tolerances themselves (tolerances.h).
#pragma once

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops/op_table.h"

namespace gpt2::ops {

// What every backend is held to: the reference backend's outputs of one case
// and the tolerance of each.
struct Expected {
  std::vector<OpOutput> outputs;
  std::vector<Tolerance> tolerances;
};
Expected run_reference(const OpSpec& spec, const OpShape& shape);

// The outputs of `spec` at `shape` run on `be`, from a fresh case in be's
// memory (reset, run, synchronize, download). With `in_place`, the op's
// aliased form (OpCase::run_in_place); returns {} for an op without one.
std::vector<OpOutput> run_on(const OpSpec& spec, const OpShape& shape, Backend& be, bool in_place = false);

// The tolerance `t` as it applies to `be`: device_tolerance where be's
// memory is not the host's (a GPU), else t.
Tolerance tolerance_on(Backend& be, const Tolerance& t, const OpOutput& expected);

// "" when every element of `actual` is within `tol` of `expected`, else
// "<output> index i of n: expected e, actual a, |diff| d > tolerance t" at
// the worst element (the largest excess over its tolerance; a non-finite
// value is the worst).
std::string compare(const OpOutput& actual, const OpOutput& expected, const Tolerance& tol);

}  // namespace gpt2::ops
