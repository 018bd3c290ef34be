// kernel_bench's variants: the naive reference and the CPU backend at 1 and 2
// threads, with the host's ceilings (see kernel_program.h).
#include "kernel_program.h"

namespace gpt2::bench {

namespace {

const char* kDetails = R"(Each benchmark is checked against the naive reference before it is timed; a
mismatch is an error ("error_occurred" in the JSON), not a time. The naive
reference's matrix products and attention are not timed at the larger shape
(minutes per call); at the original shape they are timed once (1 iteration,
1 repetition). Counters: flop_rate, byte_rate (per second, from
core/kernels/ops/op_costs.h), roofline (fraction of the roofline ceiling),
flop and bytes per call, kernel_threads. The ceilings (SGEMM GFLOP/s and memory
GB/s at 1 and 2 threads), the BLAS kernel and the OPENBLAS_* environment are
measured at start-up and written to the JSON's context.
For the machine's full speed unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE.
Example:
  kernel_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
               --benchmark_out=kernels.json --benchmark_out_format=json
)";

std::vector<Variant> setup(const BenchOptions& options) {
  const Ceilings ceilings = measure_ceilings(options.quick);
  add_context(ceilings, options);
  std::vector<Variant> variants = bench_variants();
  for (Variant& v : variants) v.roof = v.bf16 ? ceilings.roof_bf16(v.threads) : ceilings.roof(v.threads);
  return variants;
}

}  // namespace

const KernelProgram& kernel_program() {
  static const KernelProgram program{
      "kernel_bench", "kernel_bench: microbenchmarks of every GPT-2 kernel, per backend, variant and shape.", kDetails,
      setup};
  return program;
}

}  // namespace gpt2::bench
