// The op table's shapes and the one definition of what each op costs: the
// floating-point operations its arithmetic needs and the minimum bytes it
// must move, per call, at a given shape. The kernel benchmarks' FLOP/s,
// bytes/s and roofline counters, the cost table (bench/kernels/cost_table)
// and docs/kernels.md all come from here. Not here: the cases that run an op
// (op_table.h) and their tolerances (tolerances.h).
//
// FLOPs. Matrix products count 2 per multiply-add, as model/flops.h does for
// the training step (causal attention: Q K^T and P V over the T(T+1)/2 visible
// (query, key) pairs; its backward is twice its forward, the recomputation of
// the probabilities not counted). Element-wise kernels, which flops.h leaves
// out of the step's total, count the operations of their formula (exp, tanh,
// sqrt and a division counted as one each); the counts are written next to
// each formula in op_costs.cpp.
//
// Bytes. Every input read once and every output written once (float32, 4
// bytes; token ids 4 bytes); an accumulated (+=) output is read and written.
// The embedding reads each distinct row of wte once: min(V, N) rows. Caches
// and write-allocate traffic are not counted: this is the floor of what any
// implementation moves between memory and the core, so bytes/s and the
// roofline fraction are lower bounds of the traffic a kernel really causes.
//
// Sizes: B batch rows, T sequence, C channels, NH heads, KVH key/value heads
// (NH unless set), HS = C/NH, V vocab, N = B*T rows, OC output channels of a
// matmul, P elements of a flat buffer.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/tensor.h"

namespace gpt2::ops {

// The sizes of one case of the op table; an op reads the fields it needs:
//   encoder      B, T, C, V          layernorm, rmsnorm, residual   N = B*T, C
//   matmul       N, C -> OC          attention, rope       B, T, C, NH, KVH
//   attention_decode  one query against T keys (B unused), C, NH, KVH
//   gelu, relu, silu  N x 4C         swiglu                N x 8C -> N x 4C
//   crossentropy N x V               adam_update, sum_squares, sum   P
// KVH last, so that the aggregate {B, T, C, NH, V, OC, P} of a multi-head
// shape stays valid.
struct OpShape {
  int64_t B = 0, T = 0, C = 0, NH = 0, V = 0;
  int64_t OC = 0;   // matmul: output channels (input channels are C)
  int64_t P = 0;    // adam_update, sum_squares, sum, allreduce: elements of the flat buffer
  int64_t KVH = 0;  // attention, rope: key/value heads; 0: NH (multi-head)
  int64_t N() const { return B * T; }
  int64_t HS() const { return NH > 0 ? C / NH : 0; }
  int64_t kv_heads() const { return KVH > 0 ? KVH : NH; }
  // qkv's row width, (NH + 2 KVH) HS: 3C for multi-head.
  int64_t qkv_width() const { return NH > 0 ? C * (NH + 2 * kv_heads()) / NH : 0; }
  std::string str() const;  // "B 2 T 7 C 48 NH 3 V 37 OC 149 P 1779", then " KVH 1" where set
};

struct OpCost {
  double flop = 0;
  double bytes = 0;
  double intensity() const { return bytes > 0 ? flop / bytes : 0; }  // FLOP per byte
};

// Throws std::invalid_argument for an op name it does not know.
OpCost op_cost(const std::string& op, const OpShape& s);
// The cost of op's bf16 row (op_table(Dtype::bf16)) with Dtype::bf16: the
// same FLOP, and 2 bytes instead of 4 for each element of the stored
// operand (the output of a norm, an activation or the attention forward;
// the input the matrix products take); the attention backward's bf16 form
// does not read its `out` at all (0 bytes); the ring's blocks keep every
// operand f32 (their products' bf16 copies are the implementation's); f32: op_cost. The bf16 copies a
// product makes of its other operands are the implementation's, not counted.
OpCost op_cost(const std::string& op, const OpShape& s, Dtype dtype);

// The sum-allreduce of a flat buffer of s.P floats over `ranks` ranks, per
// rank (bench/kernels/allreduce_bench): a collective, not a Backend op, costed
// beside them so that its counters mean the same.
OpCost allreduce_cost(const OpShape& s, int ranks);

}  // namespace gpt2::ops
