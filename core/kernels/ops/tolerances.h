// The tolerances of the op table, keyed by (op, output, dtype), in one place:
// how far a backend's output may lie from the reference backend's on the
// same inputs. The backend-ops tests and the kernel benchmarks' checks both
// read them here; each row of tolerances.cpp carries its derivation. Not
// here: the finite-difference tolerance of tests/gradcheck_test.cpp (double
// against double) and the whole-model ones (docs/testing.md).
//
// The principles (docs/testing.md): both sides compute in the dtype (float:
// unit roundoff u = 2^-24); where they sum K terms in different orders each
// carries up to ~K u times the sum of the terms' sizes, which holds in ANY
// order, so one bound serves every backend. Matrix products use the classical
// per-element bound 2 (K+1) u (|A||B|)_ij, computed from the inputs (the
// case supplies |A||B| as ToleranceFacts::terms). Kernels using fast_exp or
// fast_tanh add those functions' few-ulp error. A device backend gets one
// documented adjustment on top (device_tolerance).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/ops/op_costs.h"
#include "kernels/tensor.h"

namespace gpt2::ops {

// The element type a case computes in (kernels/tensor.h): f32, or bf16
// where a case's stored operands are bf16 (train.precision bf16).
using gpt2::Dtype;

// Float unit roundoff, 2^-24 (5.96e-8, rounded down: a hair tighter).
constexpr double kUnitRoundoff = 5.96e-8;

// |actual - expected| <= atol + bound[i] + rtol |expected| for every element i.
struct Tolerance {
  double atol = 0, rtol = 0;
  std::vector<double> bound;  // a per-element absolute bound (matrix products), or empty
  double at(size_t i, double expected) const;
};

// What a tolerance is derived from besides its key: the case's sizes and,
// for the rows that ask for them, per-element magnitudes of its inputs.
struct ToleranceFacts {
  OpShape shape;
  // Per output element, the sum over the reduction of |a_ik| |b_kj| (a matrix
  // product's |A||B|), in double; empty where the row does not use it.
  std::vector<double> terms;
  // Per output element, the magnitude of what is added to the product (the
  // bias, or the += starting value); empty: nothing is added.
  std::vector<double> addend;
  // Per output element, a bound the case derived from its own inputs and
  // adds to the row's (the bf16 attention rows: op_cases.cpp,
  // attention_bf16_bounds); empty where the row does not use it.
  std::vector<double> extra;
};

// The tolerance of `output` of `op` computed in `dtype` at facts.shape.
// Throws std::invalid_argument for a key the table does not have, and
// std::logic_error when a row needs terms the facts lack.
Tolerance tolerance(const std::string& op, const std::string& output, Dtype dtype, const ToleranceFacts& facts);

// The (op, output) pairs the table has rows for, for a dtype: "op/output".
std::vector<std::string> tolerance_keys(Dtype dtype);

// A GPU's last few operations round differently again: FMA contraction and
// the device's expf / tanhf / rsqrtf (within 2 ulp) change each by a few ulp
// of operands no larger than the output's largest element. A device
// backend's tolerance therefore gains rtol 4u and atol 4u max|expected| over
// the host derivation (tests/cuda_kernels_test.cpp and
// tests/cuda_backend_ops_test.cpp hold the kernels to these). Sums keep
// their K u bounds, which hold in any order.
Tolerance device_tolerance(Tolerance t, double max_abs_expected);

}  // namespace gpt2::ops
