// A machine as the step-time model sees it (docs/prediction.md): what one
// call of each kernel took at a shape, per thread count, and what a message
// between ranks costs, each figure with where it came from. Read from a
// machine file (machines/*.yaml, core/app/machine_file.h) at the edge;
// `harness calibrate` measures this machine's.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops/op_costs.h"

namespace gpt2 {

// One kernel measured: the op (a Backend method, "matmul_forward"), the op
// table's shape it ran at, its threads, and its seconds a call (a median).
struct KernelTiming {
  std::string op;
  ops::OpShape shape;
  int threads = 1;
  double seconds = 0;
};

// Messages between the ranks of one node: an alpha-beta model of a
// collective over n ranks, `latency_s` per call and the buffer's bytes times
// the algorithm's factor (a ring allreduce 2 (n - 1) / n, a reduce-scatter or
// an all-gather (n - 1) / n, a send 1) over `bytes_per_s`.
struct LinkRates {
  double latency_s = 0;
  double bytes_per_s = 0;
  std::string source;
};

struct MachineModel {
  std::string name;
  std::string source;  // how the file was made: command, date, commit
  std::string cpu, blas;
  int cores = 0;
  double peak_flops = 0;  // per rank, FP32 (MFU's denominator); 0: none
  std::vector<KernelTiming> kernels;
  LinkRates node;  // between ranks on one node

  // The measured kernels of `op` at `threads`, nearest thread count first if none match.
  std::vector<const KernelTiming*> timings(const std::string& op, int threads) const;
};

}  // namespace gpt2
