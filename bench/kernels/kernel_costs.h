// The one definition of what each benchmarked kernel costs: the floating-point
// operations its arithmetic needs and the minimum bytes it must move, per
// call, at a given shape. The benchmarks' FLOP/s, bytes/s and roofline
// counters and docs/kernels.md all come from here.
//
// FLOPs. Matrix products count 2 per multiply-add, as core/flops.h does for
// the training step (causal attention: Q K^T and P V over the T(T+1)/2 visible
// (query, key) pairs; its backward is twice its forward, the recomputation of
// the probabilities not counted). Element-wise kernels, which flops.h leaves
// out of the step's total, count the operations of their formula (exp, tanh,
// sqrt and a division counted as one each); the counts are written next to
// each formula in kernel_costs.cpp.
//
// Bytes. Every input read once and every output written once (float32, 4
// bytes; token ids 4 bytes); an accumulated (+=) output is read and written.
// The embedding reads each distinct row of wte once: min(V, N) rows. Caches
// and write-allocate traffic are not counted: this is the floor of what any
// implementation moves between memory and the core, so bytes/s and the
// roofline fraction are lower bounds of the traffic a kernel really causes.
//
// Sizes: B batch rows, T sequence, C channels, NH heads, HS = C/NH, V vocab,
// N = B*T rows, OC output channels of a matmul, P parameters.
#pragma once

#include <cstdint>
#include <string>

namespace gpt2::bench {

struct KernelCost {
  double flop = 0;
  double bytes = 0;
  double intensity() const { return bytes > 0 ? flop / bytes : 0; }  // FLOP per byte
};

// The sizes one benchmark case needs; unused fields are 0.
struct CostShape {
  int64_t B = 0, T = 0, C = 0, NH = 0, V = 0;
  int64_t OC = 0;  // matmul: output channels (input channels are C)
  int64_t P = 0;   // adam_update, sum_squares, allreduce: elements of the flat buffer
  int ranks = 1;   // allreduce
};

// Throws std::invalid_argument for a kernel name it does not know.
KernelCost kernel_cost(const std::string& kernel, const CostShape& s);

}  // namespace gpt2::bench
