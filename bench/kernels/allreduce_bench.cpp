// allreduce_bench: the data-parallel gradient sum, GradientSync (core/parallel/gradient_sync.h)
// over the MPI communicator, on a buffer the size of a shape's flat gradient
// buffer. Run under mpiexec with 2 or more ranks; only rank 0 reports.
//
// Every rank runs the same benchmarks with the same iteration counts: each
// iteration is timed by hand (barrier, then the allreduce) and reported as
// the slowest rank's time, agreed through an allreduce of the ranks' times,
// so the iteration counts Google Benchmark derives from it are the same on
// every rank. Before timing, a sum of rank-dependent integers (exact in
// float) is checked on every element; a mismatch on any rank is an error on all.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_setup.h"
#include "kernels/buffer.h"
#include "app/cli.h"
#include "parallel/comm.h"
#include "parallel/gradient_sync.h"
#include "parallel/mpi/mpi_comm.h"

namespace gpt2::bench {
namespace {

const char* kHelpHead = R"(allreduce_bench: the gradient allreduce (GradientSync over MPI) on the flat gradient buffer.

usage: mpiexec -n 2 allreduce_bench [our flags] [Google Benchmark flags]
)";

const char* kHelpTail = R"(
--shapes chooses whose flat gradient buffer is summed (original, larger: 10.9 M
and 98.0 M floats); --corrupt takes only 'allreduce'.

Two variants: one blocking allreduce of the whole buffer (train.grad_bucket_mb
0) and 4 MiB buckets started as suffixes of the buffer become ready (the
overlapped schedule, here with nothing to overlap). Time per iteration is the
slowest rank's. Counters as kernel_bench's: bytes are the 2 (R-1)/R of the
buffer a ring allreduce sends (and receives) per rank, flop the (R-1)/R of it
each rank adds; kernel_threads is the number of ranks, whose memory-bandwidth
ceiling the roofline uses. Only rank 0 prints and writes --benchmark_out.
)";

struct Schedule {
  std::string name;       // "" or ".bucket4mb"
  size_t bucket_floats;   // GradientSync's bucket size; 0 = one allreduce
};

const std::vector<Schedule> kSchedules = {{"", 0}, {".bucket4mb", (size_t{4} << 20) / sizeof(float)}};

// Discards everything: ranks other than 0 run the benchmarks silently.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// One allreduce as the trainer does it, with GradReadyHook calls from the
// end of the buffer to its start (the order backward finishes gradients).
void sync_once(GradientSync& gs, size_t count, size_t bucket) {
  gs.start_grad_sync();
  if (bucket > 0) {
    for (size_t off = count; off > bucket / 2; off -= bucket / 2) gs.ready(off - bucket / 2);
    gs.ready(0);
  }
  gs.finish_grad_sync();
}

// Fills rank-dependent small integers, sums, checks; "" if every element is right.
std::string check_sum(Communicator& comm, Buffer& g, const Schedule& sch, bool corrupt) {
  const size_t n = g.size();
  const int R = comm.size(), r = comm.rank();
  for (size_t i = 0; i < n; ++i) g.data()[i] = static_cast<float>((r + 1) * static_cast<int>(i % 97));
  GradientSync gs(comm, g.data(), n, sch.bucket_floats);
  sync_once(gs, n, sch.bucket_floats);
  if (corrupt && r == 0) g.data()[n / 2] += 1.0f;
  const float scale = static_cast<float>(R * (R + 1) / 2);  // sum over ranks of (rank + 1)
  std::string err;
  for (size_t i = 0; i < n && err.empty(); ++i) {
    const float want = scale * static_cast<float>(i % 97);
    if (g.data()[i] != want) {
      err = fmt::format("allreduce{} gave a wrong sum on rank {}: index {} of {}: expected {}, actual {}", sch.name,
                        r, i, n, want, g.data()[i]);
    }
  }
  // Every rank must agree to skip, or the others would wait in the loop.
  const double bad = comm.allreduce_sum(err.empty() ? 0.0 : 1.0);
  if (bad > 0 && err.empty()) err = "allreduce: the sum was wrong on another rank (see rank 0's check)";
  std::memset(g.data(), 0, n * sizeof(float));  // timed sums of zeros: the values cannot grow
  return err;
}

void run_allreduce(benchmark::State& st, Communicator& comm, const BenchShape& shape, const Schedule& sch,
                   const Ceilings& ceil, bool corrupt) {
  const size_t n = static_cast<size_t>(op_shape(shape).P);
  Buffer g(n);
  const std::string err = check_sum(comm, g, sch, corrupt);
  if (!err.empty()) {
    st.SkipWithError(err.c_str());
    return;
  }
  GradientSync gs(comm, g.data(), n, sch.bucket_floats);
  std::vector<float> times(static_cast<size_t>(comm.size()));
  for (auto _ : st) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    sync_once(gs, n, sch.bucket_floats);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fill(times.begin(), times.end(), 0.0f);
    times[static_cast<size_t>(comm.rank())] = static_cast<float>(s);
    comm.allreduce_sum(times.data(), times.size());  // every rank's time, everywhere
    st.SetIterationTime(*std::max_element(times.begin(), times.end()));
  }
  set_counters(st, ops::allreduce_cost(op_shape(shape), comm.size()), ceil.roof(comm.size()), comm.size());
}

int run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {  // --help needs no MPI
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      init_benchmarks(&argc, argv, kHelpHead, kHelpTail);
    }
  }
  auto comm = make_mpi_communicator(&argc, &argv);
  // Only rank 0 writes the output file: the others never see --benchmark_out.
  std::vector<char*> args(argv, argv + argc);
  if (comm->rank() != 0) {
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }),
               args.end());
  }
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  const BenchOptions opt = init_benchmarks(&nargs, args.data(), kHelpHead, kHelpTail);
  if (!opt.corrupt.empty() && opt.corrupt != "allreduce") {
    throw std::invalid_argument(fmt::format("--corrupt: this program has only 'allreduce', not '{}'", opt.corrupt));
  }
  if (comm->size() < 2) {
    throw std::invalid_argument("needs 2 or more ranks: run it as mpiexec -n 2 allreduce_bench ...");
  }
  // The ceilings are measured on rank 0 while the others wait (sleeping), then shared.
  Ceilings ceil;
  if (comm->rank() == 0) ceil = measure_ceilings(opt.quick);
  comm->broadcast(&ceil, sizeof ceil, 0);
  if (comm->rank() == 0) {
    add_context(ceil, opt);
    benchmark::AddCustomContext("mpi_ranks", std::to_string(comm->size()));
  }
  for (const std::string& shape_name : opt.shapes) {
    const BenchShape& shape = bench_shape(shape_name);
    for (const Schedule& sch : kSchedules) {
      const std::string name = fmt::format("allreduce{}/{}/mpi/r{}", sch.name, shape.name, comm->size());
      benchmark::RegisterBenchmark(name.c_str(), [&comm, &shape, &sch, ceil, &opt](benchmark::State& st) {
        run_allreduce(st, *comm, shape, sch, ceil, !opt.corrupt.empty());
      })->UseManualTime()->Unit(benchmark::kMillisecond);
    }
  }
  if (comm->rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace gpt2::bench

int main(int argc, char** argv) { return gpt2::tool_main("allreduce_bench", gpt2::bench::run, argc, argv); }
