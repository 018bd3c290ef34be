// kernel_bench: Google Benchmark microbenchmarks of every kernel of the
// contract (core/backend.h) on every variant (bench_setup.cpp) at the shapes
// asked for. Each benchmark first runs its kernel once on random inputs and
// compares the result with the naive reference (kernel_cases.h); a mismatch
// is reported through SkipWithError with the worst element, never as a time.
// The check is done once per (kernel, shape, variant) and is not timed.
//
// Benchmark names: KERNEL[.LAYER]/SHAPE/BACKEND/tTHREADS, e.g.
// matmul_forward.fc/original/cpu/t2 (Google Benchmark appends /real_time).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "bench_setup.h"
#include "kernel_cases.h"

namespace gpt2::bench {
namespace {

const char* kHelp = R"(kernel_bench: microbenchmarks of every GPT-2 kernel, per backend, variant and shape.

usage: kernel_bench [our flags] [Google Benchmark flags]
  --shapes=LIST   comma-separated shapes: tiny, original, larger (default original,larger)
                    tiny      B 2, V 37 T 16 NH 2 C 32 (smoke tests only)
                    original  B 16, V 172 T 256 NH 6 C 384 (the reproduced project)
                    larger    B 8, V 8192 T 512 NH 12 C 768 (L 12 for the optimizer's buffer)
  --quick         the tiny shape and quick, meaningless ceilings: for tests
  --corrupt=NAME  perturb kernel NAME's result (e.g. gelu_forward) before its
                  reference check, to see the check fail
  --help          this text and Google Benchmark's flags

Each benchmark is checked against the naive reference before it is timed; a
mismatch is an error ("error_occurred" in the JSON), not a time. The naive
reference's matrix products and attention are not timed at the larger shape
(minutes per call); at the original shape they are timed once (1 iteration,
1 repetition). Counters: flop_rate, byte_rate (per second, from
bench/kernels/kernel_costs.h), roofline (fraction of the roofline ceiling),
flop and bytes per call, kernel_threads. The ceilings (SGEMM GFLOP/s and memory
GB/s at 1 and 2 threads), the BLAS kernel and the OPENBLAS_* environment are
measured at start-up and written to the JSON's context.
For the machine's full speed unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE.
Example:
  kernel_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
               --benchmark_out=kernels.json --benchmark_out_format=json
)";

struct Context {
  Ceilings ceilings;
  BenchOptions options;
  std::map<std::string, std::string> verdicts;  // benchmark name -> "" or the check's error
};

void run_case(benchmark::State& st, Context& ctx, const KernelSpec& spec, const BenchShape& shape,
              const Variant& variant, const std::string& name) {
  auto be = variant.make(variant.threads);
  if (!variant.is_reference()) {
    auto it = ctx.verdicts.find(name);
    if (it == ctx.verdicts.end()) {
      it = ctx.verdicts.emplace(name, check_against_reference(spec, shape, *be, ctx.options.corrupt == spec.kernel)).first;
    }
    if (!it->second.empty()) {
      st.SkipWithError(it->second.c_str());
      return;
    }
  }
  // The timed case is kept between calls for all variants of one kernel and
  // shape (Google Benchmark calls this once per repetition and while it sizes
  // the iteration count); reset() gives every call the same starting state.
  static std::string cached_key;
  static std::unique_ptr<KernelCase> cached;
  const std::string key = spec.name() + "/" + shape.name;
  if (cached_key != key) {
    cached.reset();
    cached = spec.make(shape, false);
    cached_key = key;
  }
  cached->reset();
  for (auto _ : st) cached->run(*be);
  set_counters(st, cached->cost(), ctx.ceilings, variant.threads);
}

void register_all(Context& ctx) {
  for (const KernelSpec& spec : kernel_specs()) {
    for (const std::string& shape_name : ctx.options.shapes) {
      const BenchShape& shape = bench_shape(shape_name);
      const bool slow_reference = spec.heavy && shape.name != "tiny";
      for (const Variant& v : bench_variants()) {
        if (v.is_reference() && slow_reference && shape.name == "larger") continue;
        const std::string name = fmt::format("{}/{}/{}", spec.name(), shape.name, v.label());
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [&ctx, &spec, &shape, &v, name](benchmark::State& st) {
          run_case(st, ctx, spec, shape, v, name);
        });
        b->UseRealTime()->Unit(benchmark::kMillisecond);
        if (v.is_reference() && slow_reference) b->Iterations(1)->Repetitions(1);
      }
    }
  }
}

int run(int argc, char** argv) {
  static Context ctx;
  ctx.options = init_benchmarks(&argc, argv, kHelp);
  const std::string& corrupt = ctx.options.corrupt;
  if (!corrupt.empty() && std::none_of(kernel_specs().begin(), kernel_specs().end(),
                                       [&](const KernelSpec& k) { return k.kernel == corrupt; })) {
    throw std::invalid_argument(fmt::format("--corrupt: no kernel '{}' (e.g. gelu_forward)", corrupt));
  }
  ctx.ceilings = measure_ceilings(ctx.options.quick);
  add_context(ctx.ceilings, ctx.options);
  register_all(ctx);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace gpt2::bench

int main(int argc, char** argv) { return gpt2::bench::bench_main("kernel_bench", gpt2::bench::run, argc, argv); }
