// The driver of the kernel benchmark programs (kernel_bench, and
// kernel_bench_cuda where CUDA is built): Google Benchmark microbenchmarks of
// every op of the op table (core/kernels/ops/op_table.h, as bench_ops.h
// lists them) on every variant of the program (kernel_program.h) at the
// shapes asked for. Each benchmark first runs its kernel once on random
// inputs and compares the result with the naive reference, with the op
// table's tolerances (bench_ops.h); a mismatch is reported through
// SkipWithError with the worst element, never as a time. The check is done
// once per (kernel, shape, variant) and is not timed.
//
// Timing. A host variant's loop is the kernel call alone. A device variant
// queues its calls back to back and synchronises once, after the last
// iteration, inside the timed region: the time per call is the kernel's
// throughput, with one launch-and-synchronise round trip (a few
// microseconds) spread over all the iterations.
//
// Benchmark names: KERNEL[.LAYER or .VARIANT]/SHAPE/BACKEND/tTHREADS, e.g.
// matmul_forward.fc/original/cpu/t2 (Google Benchmark appends /real_time).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "app/cli.h"
#include "bench_ops.h"
#include "bench_setup.h"
#include "kernel_program.h"

namespace gpt2::bench {
namespace {

const char* kUsage = R"(
usage: {0} [our flags] [Google Benchmark flags]
)";

struct Context {
  BenchOptions options;
  std::vector<Variant> variants;
  std::map<std::string, std::string> verdicts;             // benchmark name -> "" or the check's error
  std::map<std::string, std::unique_ptr<Backend>> backends;  // variant label -> its backend, made once
  // The timed case, kept between calls for all variants of one kernel, shape
  // and memory (Google Benchmark calls a benchmark once per repetition and
  // while it sizes the iteration count).
  std::string case_key;
  std::unique_ptr<ops::OpCase> timed_case;
};

Backend& backend_of(Context& ctx, const Variant& v) {
  std::unique_ptr<Backend>& be = ctx.backends[v.label()];
  if (!be) be = v.make(v.threads);
  return *be;
}

void run_case(benchmark::State& st, Context& ctx, const BenchOp& op, const BenchShape& shape,
              const Variant& variant, const std::string& name) {
  Backend& be = backend_of(ctx, variant);
  if (!variant.is_reference()) {
    auto it = ctx.verdicts.find(name);
    if (it == ctx.verdicts.end()) {
      it = ctx.verdicts.emplace(name, check_against_reference(op, shape, be, ctx.options.corrupt == op.kernel())).first;
    }
    if (!it->second.empty()) {
      st.SkipWithError(it->second.c_str());
      return;
    }
  }
  Memory& memory = be.memory();
  const std::string key = op.name() + "/" + shape.name + "/" + memory.name();
  if (ctx.case_key != key) {
    ctx.timed_case.reset();
    ctx.timed_case = op.spec->make(op.shape(shape), memory);
    ctx.case_key = key;
  }
  ops::OpCase& kc = *ctx.timed_case;
  kc.reset();  // every call starts from the same state
  if (memory.is_host()) {
    for (auto _ : st) kc.run(be);
  } else {
    be.synchronize();
    benchmark::IterationCount i = 0;
    for (auto _ : st) {
      kc.run(be);
      if (++i == st.max_iterations) be.synchronize();  // the queued calls, inside the timed region
    }
  }
  set_counters(st, ops::op_cost(op.kernel(), op.shape(shape), op.spec->dtype), variant.roof, variant.threads);
  st.SetLabel(op.shape(shape).str());  // the op table's shape of the call (harness calibrate reads it)
}

void register_all(Context& ctx) {
  for (const BenchOp& op : bench_ops()) {
    for (const std::string& shape_name : ctx.options.shapes) {
      const BenchShape& shape = bench_shape(shape_name);
      const bool slow_reference = op.heavy && shape.name != "tiny";
      for (const Variant& v : ctx.variants) {
        if (v.is_reference() && slow_reference && shape.name == "larger") continue;
        if (!v.runs(op.spec->dtype)) continue;
        const std::string name = fmt::format("{}/{}/{}", op.name(), shape.name, v.label());
        const std::string why_not = v.unsupported ? v.unsupported(op.kernel(), shape) : "";
        if (!why_not.empty()) {
          benchmark::AddCustomContext("not_benchmarked " + name, why_not);
          continue;
        }
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [&ctx, &op, &shape, &v, name](benchmark::State& st) {
          run_case(st, ctx, op, shape, v, name);
        });
        b->UseRealTime()->Unit(benchmark::kMillisecond);
        if (v.is_reference() && slow_reference) b->Iterations(1)->Repetitions(1);
      }
    }
  }
}

int run(int argc, char** argv) {
  static Context ctx;
  const KernelProgram& program = kernel_program();
  static const std::string head = std::string(program.summary) + "\n" + fmt::format(fmt::runtime(kUsage), program.name);
  static const std::string tail = std::string("\n") + program.details;
  ctx.options = init_benchmarks(&argc, argv, head.c_str(), tail.c_str());
  const std::string& corrupt = ctx.options.corrupt;
  if (!corrupt.empty() && std::none_of(bench_ops().begin(), bench_ops().end(),
                                       [&](const BenchOp& k) { return k.kernel() == corrupt; })) {
    throw std::invalid_argument(fmt::format("--corrupt: no kernel '{}' (e.g. gelu_forward)", corrupt));
  }
  ctx.variants = program.setup(ctx.options);
  register_all(ctx);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // A device's buffers go before its backend, and both before the runtime's
  // own teardown at exit.
  ctx.timed_case.reset();
  ctx.backends.clear();
  return 0;
}

}  // namespace
}  // namespace gpt2::bench

int main(int argc, char** argv) {
  return gpt2::tool_main(gpt2::bench::kernel_program().name, gpt2::bench::run, argc, argv);
}
