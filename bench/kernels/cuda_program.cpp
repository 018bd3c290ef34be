// kernel_bench_cuda's variants: the naive reference on the host (for the
// speed-up column; at the shapes where it is affordable) and the CUDA backend
// on the first GPU, with the GPU's own ceilings (see kernel_program.h).
// Built only where Meson finds CUDA; without a device, setup() throws
// BackendUnavailable and the program exits with status 3.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/buffer.h"
#include "util/stats.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernel_program.h"

namespace gpt2::bench {

namespace {

const char* kDetails = R"help(Each CUDA benchmark is checked against the naive reference (on the host)
before it is timed; a mismatch is an error ("error_occurred" in the JSON), not
a time. The CUDA variant queues its calls back to back and synchronises once,
after the last iteration, inside the timed region: a time is the kernel's
throughput per call plus one launch-and-synchronise round trip (microseconds)
spread over the iterations. Counters as kernel_bench's; the CUDA rows'
roofline uses the GPU's ceilings: a 4096^3 cuBLAS SGEMM (FP32, best of 5)
and a device copy (bytes read + written), both in the JSON's context with the
GPU's name.
Without a CUDA device it prints "no CUDA device (...)" and exits with status 3.
See docs/kernels_cuda.md. Example:
  kernel_bench_cuda --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
                    --benchmark_out=kernels_cuda.json --benchmark_out_format=json
)help";

// GB/s of Backend::copy between two buffers of `bytes` in the backend's
// memory, bytes read + written (STREAM's convention): the median of `reps`
// timed copies after one warm-up, each between two synchronisations.
double device_copy_gbs(Backend& be, size_t bytes, int reps) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  Buffer src(static_cast<size_t>(n), be.memory()), dst(static_cast<size_t>(n), be.memory());
  const Tensor s(src.data(), {n}), d(dst.data(), {n});
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    be.copy(d, s);
    be.synchronize();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / secs / 1e9);
  }
  return median(rates);
}

std::vector<Variant> setup(const BenchOptions& options) {
  // First, so that a machine without a GPU is told at once.
  const std::unique_ptr<Backend> gpu = make_cuda_backend();
  const size_t copy_mib = options.quick ? 64 : 1024;
  const int reps = options.quick ? 1 : 5;
  const Roof gpu_roof{cuda_ceiling_gflops(*gpu, 1, 1), device_copy_gbs(*gpu, copy_mib << 20, reps)};
  const Ceilings host = measure_ceilings(options.quick);
  add_context(host, options);
  benchmark::AddCustomContext("gpu", gpu->name());
  benchmark::AddCustomContext("ceiling_gpu_sgemm_gflops", fmt::format("{:.2f}", gpu_roof.gflops));
  benchmark::AddCustomContext("ceiling_gpu_copy_gbs", fmt::format("{:.2f}", gpu_roof.gbs));
  benchmark::AddCustomContext(
      "ceiling_gpu_method",
      fmt::format("compute: cuda_ceiling_gflops (the best of 5 runs of a 4096^3 cuBLAS SGEMM, FP32); bandwidth: the median "
                  "of {} device copies of {} MiB (Backend::copy), bytes read + written{}",
                  reps, copy_mib, options.quick ? " (--quick: not meaningful)" : ""));
  Variant naive = bench_variants().front();  // the reference, single-threaded
  naive.roof = host.roof(naive.threads);
  // The CUDA attention kernels take head sizes that are multiples of 32, at
  // most 128: the tiny shape's HS 16 is not (cuda_unsupported).
  Variant cuda{"cuda", 1, [](int) { return make_cuda_backend(); }, gpu_roof,
               [](const std::string& kernel, const BenchShape& shape) {
                 return cuda_unsupported(kernel, shape.cfg.C, shape.cfg.NH);
               }};
  return {naive, cuda};
}

}  // namespace

const KernelProgram& kernel_program() {
  static const KernelProgram program{
      "kernel_bench_cuda",
      "kernel_bench_cuda: microbenchmarks of every GPT-2 kernel on the CUDA backend, against the naive reference.",
      kDetails, setup};
  return program;
}

}  // namespace gpt2::bench
