// What the kernel benchmark programs share: the shapes, the variants (one
// entry per backend and thread count), the machine's ceilings measured at
// start-up, the counters every benchmark sets, and the programs' own flags.
//
// Counters, the same set on every benchmark of a binary (Google Benchmark
// 1.7.1's CSV reporter needs that):
//   flop_rate    FLOP/s  = op_cost().flop  per call / seconds per call
//   byte_rate    bytes/s = op_cost().bytes per call / seconds per call
//   roofline     the fraction of the roofline ceiling reached: the time the
//                call would take at the machine's ceiling, max(flop / SGEMM
//                peak, bytes / memory bandwidth) at the variant's thread count
//                (a GPU variant: the GPU's SGEMM and device copy ceilings),
//                over the time it took
//   flop, bytes  per call (not rates), so reports can place the kernel on a
//                roofline; kernel_threads: the variant's threads
// Rates divide by wall-clock time (every benchmark uses UseRealTime() or
// manual time): with OpenMP the main thread's CPU time is not the kernel's time.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops/op_costs.h"
#include "model/config.h"
#include "util/fields.h"

namespace gpt2::bench {

// A benchmark shape: the model configuration and the batch.
struct BenchShape {
  std::string name;
  Gpt2Config cfg;
  int B = 0;
  int N() const { return B * cfg.T; }
};

// tiny (smoke tests; figures meaningless), original (the reproduced project's
// configuration at batch 16), larger (GPT-2-small widths at T 512, batch 8);
// small (experiments/parallelism.yaml's L4 C128 model at T 64, batch 16)
// for harness calibrate's second point.
const std::vector<BenchShape>& bench_shapes();
const BenchShape& bench_shape(const std::string& name);  // throws naming the known ones
// The op table's sizes of a benchmark shape: B, T, C, NH, V, and P, the
// flat parameter buffer of the shape's model (what the optimizer and the
// gradient norm run over once per step).
ops::OpShape op_shape(const BenchShape& s);

// A roofline's two ceilings: matrix products (FP32, or bf16 for a bf16
// variant) and memory bandwidth.
struct Roof {
  double gflops = 0, gbs = 0;
};

// One backend at one thread count. Adding a CPU backend is one entry in
// bench_variants() (bench_setup.cpp); the CUDA variant is added by
// kernel_bench_cuda only (bench/kernels/cuda_program.cpp).
struct Variant {
  std::string backend;  // "naive" (the reference backend), "cpu", "cuda"
  int threads = 1;
  std::function<std::unique_ptr<Backend>(int threads)> make;
  Roof roof;  // the ceilings its roofline counter uses, set once measured
  // Why the backend cannot run `kernel` at `shape` (its front door would
  // throw), or ""; such benchmarks are not registered and the JSON's context
  // says why. Unset: every kernel at every shape.
  std::function<std::string(const std::string& kernel, const BenchShape& shape)> unsupported;
  // Runs the op table's bf16 rows only (its backend stores activations in
  // bf16: accepts_bf16), with the bf16 products' ceiling as its roof; the
  // reference runs both tables, every other variant the f32 rows.
  bool bf16 = false;
  bool is_reference() const { return backend == "naive"; }
  // Whether this variant runs a row of element type `dtype` (as above).
  bool runs(Dtype dtype) const { return is_reference() || (dtype == Dtype::bf16) == bf16; }
  std::string label() const;  // "naive/t1", "cpu/t2", "cpu-bf16/t1", "cuda/t1"
};
// The host's variants: the naive reference, the CPU backend at 1 and 2
// threads, and the CPU backend with bf16 products (train.precision bf16) at 1
// and 2 threads (their roofs unset).
const std::vector<Variant>& bench_variants();

// The machine's ceilings at 1 and 2 threads: the median GFLOP/s of a large
// SGEMM with OpenBLAS's own threads (kernels/cpu/blas.h), and the memory
// bandwidth: the better of the median GB/s of a large memcpy and of a STREAM
// triad (bytes read + bytes written, over buffers far beyond the caches;
// memcpy alone understates what kernels with several streams reach here).
struct Ceilings {
  double sgemm_gflops[2] = {0, 0};
  double bf16_gflops[2] = {0, 0};  // oneDNN's bf16 product (kernels/cpu/blas.h), the bf16 variants' roof
  double bandwidth_gbs[2] = {0, 0};  // the bandwidth ceiling: max(memcpy, triad)
  double memcpy_gbs[2] = {0, 0}, triad_gbs[2] = {0, 0};
  double gflops(int threads) const { return sgemm_gflops[threads >= 2 ? 1 : 0]; }
  double gbs(int threads) const { return bandwidth_gbs[threads >= 2 ? 1 : 0]; }
  Roof roof(int threads) const { return {gflops(threads), gbs(threads)}; }
  Roof roof_bf16(int threads) const { return {bf16_gflops[threads >= 2 ? 1 : 0], gbs(threads)}; }
};
// quick: small sizes (for the smoke test; the figures are then meaningless).
Ceilings measure_ceilings(bool quick);

// The flags of our programs, beside Google Benchmark's own: one field list
// (util/fields.h) drives their parsing and --help.
struct BenchOptions {
  std::string shape_list = "original,larger";
  bool quick = false;   // the tiny shape (unless --shapes is given) and quick ceilings, for tests
  std::string corrupt;  // perturb that kernel's result before its check (tests the check)
  std::vector<std::string> shapes;  // shape_list, split and validated

  Fields fields();
};

// Calls benchmark::Initialize (its --help prints `head`, our flags, the
// shapes, `tail` and Google Benchmark's flags), then parses our flags from
// what is left; throws std::invalid_argument for an unknown flag, a bad
// value or a positional argument.
BenchOptions init_benchmarks(int* argc, char** argv, const char* head, const char* tail);

// Records the ceilings, the BLAS kernel and the environment that steers it,
// the CPU, the build and the shapes in the JSON's "context".
void add_context(const Ceilings& c, const BenchOptions& o);

// Sets the counters above on `st` for one call costing `cost` on `threads`
// under the ceilings `roof`.
void set_counters(benchmark::State& st, const ops::OpCost& cost, const Roof& roof, int threads);

// A benchmark program's main() is gpt2::tool_main (core/app/cli.h): an exception
// becomes "<program>: error: ..." and status 2, BackendUnavailable
// "<program>: no CUDA device (...)" and status 3 (kExitUnavailable, which the
// harness records as skipped).

}  // namespace gpt2::bench
