// The MPI+CUDA communicator's gradient allreduce on device memory, called
// directly (the trainer skips it on one rank), under mpiexec:
//   mpiexec -n R nccl_test nccl|host
// Every rank fills a device buffer with rank-dependent values whose sums are
// exact in float; after the allreduce each element must equal the exact sum.
// Also: a host array goes through plain MPI, and the communicator names the
// path it took. With "nccl" on one rank this runs NCCL's whole path (unique
// id over MPI, communicator, allreduce) on a single GPU. Exits 77 (skipped)
// without a CUDA device, or for "nccl" with fewer GPUs than ranks.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "dist/nccl/cuda_comm.h"
#include "dist/mpi/mpi_comm.h"

int main(int argc, char** argv) {
  auto mpi = gpt2::make_mpi_communicator(&argc, &argv);
  const int rank = mpi->rank(), R = mpi->size();
  auto say = [&](const std::string& s) {
    if (rank == 0) std::printf("%s\n", s.c_str());
  };
  if (argc != 2 || (std::string(argv[1]) != "nccl" && std::string(argv[1]) != "host")) {
    say("usage: mpiexec -n R nccl_test nccl|host");
    return 2;
  }
  const std::string mode = argv[1];
  std::string why;
  const int gpus = gpt2::cuda_device_count(&why);
  if (gpus == 0) {
    say(fmt::format("SKIP: no CUDA device ({})", why));
    return 77;
  }
  if (mode == "nccl" && mpi->local_size() > gpus) {
    say(fmt::format("SKIP: NCCL needs a GPU per rank: {} ranks, {} GPU(s)", mpi->local_size(), gpus));
    return 77;
  }
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    failures += ok ? 0 : 1;
    say(fmt::format("{} {}", ok ? "ok  " : "FAIL", what));
  };
  try {
    auto comm = gpt2::make_cuda_mpi_communicator(*mpi, gpt2::parse_device_allreduce(mode, "argument"));
    auto be = gpt2::make_cuda_backend({.device_hint = mpi->local_rank()});
    comm->bind(*be);

    const size_t n = (size_t{1} << 20) + 3;  // not a multiple of anything convenient
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1000)) * 0.5f;
    gpt2::Buffer d(n, be->memory());
    d.upload(h);
    comm->allreduce_sum(d.data(), n);
    be->synchronize();
    const std::vector<float> got = d.download();
    size_t bad = 0;
    const float ranks_sum = static_cast<float>(R * (R + 1) / 2);
    for (size_t i = 0; i < n; ++i) bad += got[i] != ranks_sum * static_cast<float>(i % 1000) * 0.5f;
    check(bad == 0, fmt::format("{} ranks, {}: device allreduce of {} floats exact ({} wrong)", R, mode, n, bad));
    const std::string name = comm->name();
    check(name == (mode == "nccl" ? "mpi+nccl" : "mpi (host-staged)") || (R == 1 && mode == "host"),
          fmt::format("the communicator names its path: '{}'", name));

    std::vector<float> host_values(5, static_cast<float>(rank + 1));
    comm->allreduce_sum(host_values.data(), host_values.size());
    check(host_values[4] == ranks_sum, fmt::format("a host array goes through MPI: {} (expected {})", host_values[4],
                                                   ranks_sum));
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", rank, e.what());
    mpi->abort(1);
  }
  say(failures == 0 ? "all passed" : fmt::format("{} failed", failures));
  return failures == 0 ? 0 : 1;
}
