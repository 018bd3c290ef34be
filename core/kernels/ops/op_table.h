// The op table: every op of the Backend contract (kernels/backend.h) as a
// case that owns its random inputs and its outputs at one shape, in the
// memory of the backend it will run on (the host's, or a GPU's), can run the
// op on that backend, names its outputs and derives the tolerance of each
// from the tolerance table (tolerances.h). One table, read by the
// backend-ops tests (tests/backend_ops_test.cpp, tests/cuda_backend_ops_test.cpp,
// and the launcher checks of tests/cuda_kernels_test.cpp),
// the kernel benchmarks (bench/kernels) and, through op_cost, the cost table.
// What a case's inputs are, and what they check beyond the formula:
//   * '+=' outputs (parameter gradients, layernorm's dinp) start at random
//     values, so accumulation is checked; '=' outputs start at 7 everywhere,
//     so a stale value shows;
//   * the contract's aliasing (gelu_, relu_ and silu_backward's dinp on
//     dout, crossentropy_backward's dlogits on logits) has an in-place run
//     whose outputs must equal the out-of-place run's exactly; the RoPE ops
//     are in place by definition (their one output starts random);
//   * matrix products come with and without bias (".nobias");
//   * attention and RoPE come multi-head (KVH = NH) and grouped-query
//     (".gqa", KVH = gqa_kv_heads(NH)).
// Token and target arrays stay on the host (the contract's rule).
// Not here: how a result is compared (op_check.h) or what an op costs
// (op_costs.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops/op_costs.h"
#include "kernels/ops/tolerances.h"

namespace gpt2::ops {

// One output of a case, downloaded to the host: float elements, or the
// double result of a reduction (sum_squares, sum).
struct OpOutput {
  std::string name;
  std::vector<float> f32;
  std::vector<double> f64;
  size_t size() const { return f64.empty() ? f32.size() : f64.size(); }
  double at(size_t i) const { return f64.empty() ? static_cast<double>(f32[i]) : f64[i]; }
};

class OpCase {
 public:
  virtual ~OpCase() = default;
  // Puts every output (and in-place state) back to its starting value, so
  // that every backend starts from the same state. Uploads (a memcpy on the
  // host); never inside a timed loop.
  virtual void reset() = 0;
  // `be` must be a backend whose memory() is the one the case was made in.
  virtual void run(Backend& be) = 0;
  // The op with its output aliasing its input, where the contract allows it
  // (the input is first copied into the output with be.copy); false, and
  // nothing run, for an op without an in-place form.
  virtual bool run_in_place(Backend& /*be*/) { return false; }
  // Host copies of the outputs, in a fixed order.
  virtual std::vector<OpOutput> outputs() = 0;
  // The tolerance of each output (in the order of outputs()), from the
  // table; matrix products compute their per-element |A||B| from the inputs
  // here (a double GEMM: call it on one case, the reference's).
  virtual std::vector<Tolerance> tolerances() = 0;
};

// The key/value heads of the grouped-query variants: NH's largest proper
// divisor (NH/2 for even NH, 1 for a prime: groups of 2 to NH); 1 for NH = 1,
// which has no grouped form.
int64_t gqa_kv_heads(int64_t NH);

struct OpSpec {
  std::string op;       // the Backend method, e.g. "matmul_forward"
  std::string variant;  // "" or e.g. "nobias", "gqa"
  Dtype dtype = Dtype::f32;
  // Builds the case at `shape` (resized by shape() below) with its arrays in `memory`.
  std::function<std::unique_ptr<OpCase>(const OpShape& shape, Memory& memory)> make;
  bool grouped = false;  // ".gqa": KVH = gqa_kv_heads(NH), whatever the shape's
  // "matmul_forward.nobias"; a bf16 row ends in ".bf16".
  std::string name() const {
    return (variant.empty() ? op : op + "." + variant) + (dtype == Dtype::bf16 ? ".bf16" : "");
  }
  // The sizes the case runs at, given the table's shape (what op_cost needs).
  OpShape shape(const OpShape& s) const {
    OpShape r = s;
    if (grouped) r.KVH = gqa_kv_heads(s.NH);
    return r;
  }
};

// Every op of the contract (zero and copy aside, which the cases use), in
// the order of backend.h: the f32 table. With Dtype::bf16, the bf16 rows:
// every op that takes a stored activation (kernels/backend.h), with that
// operand in bf16: the norms, activations and attention forward writing
// it, the attention backward and the matrix products (bf16 products)
// reading it. A bf16 row runs on a backend whose accepts_bf16() is true.
const std::vector<OpSpec>& op_table(Dtype dtype = Dtype::f32);
// The entry named `name` ("matmul_forward.nobias", "gelu_forward.bf16"), in
// either table; throws std::invalid_argument naming the known ones.
const OpSpec& op_spec(const std::string& name);

}  // namespace gpt2::ops
