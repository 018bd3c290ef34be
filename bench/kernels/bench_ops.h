// What the kernel benchmarks time: the ops of the op table
// (core/kernels/ops/op_table.h) at the benchmark shapes, the matrix products
// once per linear layer of the model, and the check each runs against the
// naive reference before it is timed. The cases, their costs and their
// tolerances are the op table's; this file adds only the benchmarks' policy:
// which ops, at which sizes, and how much of each is checked.
//
// Not benchmarked: attention_decode (one query per generated token) and sum
// (once per step, the mean loss); the backend-ops tests check both.
#pragma once

#include <string>
#include <vector>

#include "bench_setup.h"
#include "kernels/backend.h"
#include "kernels/ops/op_table.h"

namespace gpt2::bench {

struct BenchOp {
  const ops::OpSpec* spec;
  std::string layer;   // which of the model's linear layers ("qkv", "fc", "fcproj", "lm_head"), or ""
  bool heavy = false;  // the naive reference is too slow to time at the larger shape (minutes)
  const std::string& kernel() const { return spec->op; }  // the Backend method
  // "matmul_forward.fc", "attention_forward", "attention_forward.gqa", "gelu_forward.bf16", "matmul_forward.fc.bf16".
  std::string name() const {
    return layer.empty() ? spec->name() : spec->op + "." + layer + (spec->dtype == Dtype::bf16 ? ".bf16" : "");
  }
  // The case timed at `s` (a grouped-query entry at its KVH, op_table.h); a
  // linear layer is a product of N = B T rows.
  ops::OpShape shape(const BenchShape& s) const;
  // The case checked at `s`: the timed one with fewer rows where the naive
  // reference would take minutes (matrix products: at most 256 rows;
  // attention: one batch row). The sizes that choose code paths (C, OC, T,
  // NH, HS) are the timed case's.
  ops::OpShape check_shape(const BenchShape& s) const;
};

// The benchmarks, in the order they are registered (and reported): the op
// table's order, each matrix product expanded into the model's four layers.
const std::vector<BenchOp>& bench_ops();

// Runs `op` on `variant` (a case in its memory) and on the naive reference
// (a case in host memory) from the same inputs at op.check_shape(shape) and
// returns "" if every output is within the op table's tolerance, else
// "<name> differs from the naive reference: <output> index i of n: expected,
// actual, |diff| > tolerance". `corrupt` perturbs the variant's first output
// first (to test that checks fail). The reference runs once per (op, shape).
std::string check_against_reference(const BenchOp& op, const BenchShape& shape, Backend& variant, bool corrupt);

}  // namespace gpt2::bench
