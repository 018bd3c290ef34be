// The backend-ops checks (ggml's test-backend-ops): an op of the op table
// (core/kernels/ops/op_table.h), or every op, on one backend against the
// reference backend, at one shape, with the tolerance table (tolerances.h).
// Shared by backend_ops_test.cpp (the reference and CPU backends, suite
// core), cuda_backend_ops_test.cpp (the CUDA backend at the same shapes) and
// cuda_kernels_test.cpp (each CUDA kernel at the shapes its code paths need;
// both suite cuda). A failure names the op, the backend, the shape, the
// output, the worst index, the expected and actual values and the tolerance.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops/op_check.h"
#include "kernels/ops/op_table.h"

namespace gpt2::ops {
// gtest prints a parameter with it: "B 2 T 7 C 48 NH 3 V 37 OC 149 P 1779".
inline void PrintTo(const OpShape& s, std::ostream* os) { *os << s.str(); }
}  // namespace gpt2::ops

namespace gpt2::testing {

// The shapes every backend is checked at, (B, T, C, NH, V): odd sizes catch
// vector tails, T = 150 spans several 64-row attention tiles, 5 rows take
// the GEMV path. Matrix products map C -> OC = 3C + 5 (odd, not a multiple
// of the tiles); adam_update, sum_squares and sum run over P = V C + 3.
inline std::vector<ops::OpShape> backend_ops_shapes() {
  std::vector<ops::OpShape> shapes;
  for (auto [B, T, C, NH, V] : {std::array<int64_t, 5>{2, 7, 48, 3, 37}, std::array<int64_t, 5>{3, 64, 128, 2, 172},
                                std::array<int64_t, 5>{2, 150, 96, 3, 37}, std::array<int64_t, 5>{1, 5, 64, 2, 37}}) {
    shapes.push_back(ops::OpShape{B, T, C, NH, V, 3 * C + 5, V * C + 3});
  }
  return shapes;
}

// "B2_T7_C48_NH3_V37": a gtest parameter name.
inline std::string shape_name(const ops::OpShape& s) {
  return fmt::format("B{}_T{}_C{}_NH{}_V{}", s.B, s.T, s.C, s.NH, s.V);
}

// The number of comparisons made so far in this program (each output of
// each op, each in-place run, each decode row), for its summary line.
inline int& backend_ops_checks() {
  static int n = 0;
  return n;
}

// Prints the count when the program ends, e.g. "backend-ops: 1234 checks".
class CountChecks : public ::testing::Environment {
 public:
  void TearDown() override { std::printf("backend-ops: %d checks\n", backend_ops_checks()); }
};

// Why a backend cannot run `op` at `shape` (its front door would throw), or "".
using Unsupported = std::function<std::string(const std::string& op, const ops::OpShape& shape)>;

// One comparison, counted, failing the test with everything it knows.
inline void expect_match(const std::string& what, const ops::OpOutput& actual, const ops::OpOutput& expected,
                         const ops::Tolerance& tol) {
  ++backend_ops_checks();
  const std::string err = ops::compare(actual, expected, tol);
  EXPECT_TRUE(err.empty()) << what << ": " << err;
}

// Op `spec` on `be` (named `label`, e.g. "cpu/t2") against the reference at
// `shape`: every output within its tolerance (the table's, with the device
// adjustment on a GPU); its in-place form (the contract's aliasing), where
// it has one, equal to the out-of-place result exactly; with `twice`, a
// second run bitwise equal to the first (run-to-run determinism). Skipped
// and printed where `unsupported` names a reason (at the sizes the entry
// runs at, KVH included).
inline void check_op(Backend& be, const std::string& label, const ops::OpSpec& spec, const ops::OpShape& shape,
                     const Unsupported& unsupported = {}, bool twice = false) {
  const std::string where = spec.name() + " on " + label + " at " + spec.shape(shape).str();
  const std::string why = unsupported ? unsupported(spec.op, spec.shape(shape)) : "";
  if (!why.empty()) {
    std::printf("not run: %s: %s\n", where.c_str(), why.c_str());
    return;
  }
  const ops::Expected expected = ops::run_reference(spec, shape);
  const std::vector<ops::OpOutput> got = ops::run_on(spec, shape, be);
  ASSERT_EQ(got.size(), expected.outputs.size()) << where;
  for (size_t i = 0; i < got.size(); ++i) {
    expect_match(where, got[i], expected.outputs[i],
                 ops::tolerance_on(be, expected.tolerances[i], expected.outputs[i]));
  }
  const std::vector<ops::OpOutput> in_place = ops::run_on(spec, shape, be, true);
  for (size_t i = 0; i < in_place.size(); ++i) {
    expect_match(where + ", in place against out of place", in_place[i], got[i], ops::Tolerance{});
  }
  if (twice) {
    const std::vector<ops::OpOutput> again = ops::run_on(spec, shape, be);
    for (size_t i = 0; i < again.size(); ++i) {
      expect_match(where + ", a second run against the first", again[i], got[i], ops::Tolerance{});
    }
  }
}

// Every op of the table on `t2` (2 threads) against `t1` (1 thread) at
// `shape`, output by output: the same bits (`label` names the backends).
inline void expect_thread_invariant(Backend& t1, Backend& t2, const std::string& label, const ops::OpShape& shape) {
  for (const ops::OpSpec& spec : ops::op_table()) {
    const std::vector<ops::OpOutput> a = ops::run_on(spec, shape, t1), b = ops::run_on(spec, shape, t2);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      expect_match(spec.name() + " " + label + ", 2 threads against 1 at " + shape.str(), b[i], a[i],
                   ops::Tolerance{});
    }
  }
}

// attention_decode (`variant` "" or ".gqa") on `be` within its tolerance of
// the last row of the reference's full attention_forward at `shape` (the
// decode case's qkv is batch row 0 of the forward's: the same seed,
// op_cases.cpp). Skipped where `unsupported` names a reason (printed by
// check_op).
inline void check_decode_is_last_row(Backend& be, const std::string& label, const std::string& variant,
                                     const ops::OpShape& shape, const Unsupported& unsupported = {}) {
  const ops::OpSpec& spec = ops::op_spec("attention_decode" + variant);
  const ops::OpShape s = spec.shape(shape);
  if (unsupported && !unsupported("attention_decode", s).empty()) return;
  const ops::OpOutput full = ops::run_reference(ops::op_spec("attention_forward" + variant), shape).outputs.at(1);
  ASSERT_EQ(full.name, "out");
  const auto row = full.f32.begin() + (shape.T - 1) * shape.C;
  const ops::OpOutput last_row{"out", std::vector<float>(row, row + shape.C), {}};
  const ops::Tolerance tol = ops::tolerance("attention_decode", "out", ops::Dtype::f32, ops::ToleranceFacts{s, {}, {}});
  const ops::OpOutput got = ops::run_on(spec, shape, be).at(0);
  expect_match(spec.name() + " on " + label + " at " + s.str() + ", against the last row of the full forward", got,
               last_row, ops::tolerance_on(be, tol, last_row));
}

// Every op of the table on `be` at `shape` (check_op), and attention_decode
// (multi-head and grouped) against the last row of the full forward.
inline void check_every_op(Backend& be, const std::string& label, const ops::OpShape& shape,
                           const Unsupported& unsupported = {}) {
  for (const ops::OpSpec& spec : ops::op_table()) check_op(be, label, spec, shape, unsupported);
  for (const char* variant : {"", ".gqa"}) check_decode_is_last_row(be, label, variant, shape, unsupported);
}

// Every bf16 row (op_table(Dtype::bf16)) on `be`, which must accept bf16,
// against the reference at `shape`, with a second run bitwise equal to the first.
inline void check_every_bf16_op(Backend& be, const std::string& label, const ops::OpShape& shape) {
  ASSERT_TRUE(be.accepts_bf16()) << label;
  for (const ops::OpSpec& spec : ops::op_table(ops::Dtype::bf16)) check_op(be, label, spec, shape, {}, true);
}

}  // namespace gpt2::testing
