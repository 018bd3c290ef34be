// What the op table's case files share (op_cases.cpp, matmul_cases.cpp):
// the base of a case whose tolerances are the table's rows, and the matrix
// products' factories. Internal to core/kernels/ops; users read op_table.h.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops/op_table.h"

namespace gpt2::ops {

// A case of op `op` at shape s_ whose outputs are named `outputs`, in
// `dtype` (bf16: its stored operand is bf16, op_table(Dtype::bf16)); by
// default its tolerances are the table's rows for those names and dtype.
class TableCase : public OpCase {
 public:
  TableCase(std::string op, const OpShape& s, std::vector<std::string> outputs, Dtype dtype = Dtype::f32)
      : op_(std::move(op)), s_(s), names_(std::move(outputs)), dtype_(dtype) {}
  std::vector<Tolerance> tolerances() override {
    std::vector<Tolerance> t;
    for (const std::string& name : names_) t.push_back(tolerance(op_, name, dtype_, ToleranceFacts{s_, {}, {}}));
    return t;
  }

 protected:
  OpOutput out(size_t i, std::vector<float> values) const { return {names_[i], std::move(values), {}}; }
  std::string op_;
  OpShape s_;
  std::vector<std::string> names_;
  Dtype dtype_;
};

// out (N,OC) = inp (N,C) W^T (+ bias), N = s.N(); with `bias` or without;
// inp of element type `dtype` (bf16: the bf16 products' row).
std::unique_ptr<OpCase> make_matmul_forward(const OpShape& s, Memory& m, bool bias, Dtype dtype = Dtype::f32);
// dinp (N,C) =, dweight (OC,C) +=, dbias (OC) += (with `bias`).
std::unique_ptr<OpCase> make_matmul_backward(const OpShape& s, Memory& m, bool bias, Dtype dtype = Dtype::f32);

}  // namespace gpt2::ops
