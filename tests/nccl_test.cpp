// The MPI+CUDA communicator's verbs on device memory, called directly (the
// trainer skips them on one rank), under mpiexec:
//   mpiexec -n R nccl_test nccl|host|host-memory
// First the gradient allreduce: every rank fills a device buffer with
// rank-dependent values whose sums are exact in float; after the allreduce
// each element must equal the exact sum; a host array goes through plain
// MPI, and the communicator names the path it took. Then every verb of
// tests/comm_checks.h (allreduce, reduce_scatter and all_gather in and out of
// place, broadcast, send and recv pairwise and in a ring, send_recv) on
// device memory and on host memory, on the world and on its sub-groups
// (pairs, parities in reversed order, nested splits: each chooses its path
// when split), and the errors particular to device memory. With "nccl" on
// one rank this runs NCCL's whole path (unique id over MPI, communicator,
// every verb) on a single GPU. Exits 77 (skipped) without a CUDA device, or
// for "nccl" with fewer GPUs than ranks.
// "host-memory" needs no GPU (suite mpi): every verb on host memory through
// an unbound MPI+CUDA communicator and its sub-groups (each owning its MPI
// sub-communicator), which must behave as the MPI communicator does.
#include <fmt/format.h>

#include <cstdio>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm_checks.h"
#include "kernels/cuda/cuda_backend.h"
#include "dist/nccl/cuda_comm.h"
#include "dist/mpi/mpi_comm.h"

namespace {

// Arrays in a backend's device memory.
class DeviceArrays final : public gpt2::testing::Arrays {
 public:
  explicit DeviceArrays(gpt2::Backend& be) : be_(be) {}
  std::string name() const override { return be_.memory().name(); }
  float* make(const std::vector<float>& values) override {
    gpt2::Buffer& b = buffers_.emplace_back(values.size(), be_.memory());
    b.upload(values);
    return b.data();
  }
  // The download is ordered after the verbs on the backend's stream.
  std::vector<float> read(const float* p, size_t n) override {
    std::vector<float> v(n);
    be_.memory().download(v.data(), p, n * sizeof(float));
    return v;
  }

 private:
  gpt2::Backend& be_;
  std::deque<gpt2::Buffer> buffers_;
};

// Misuse particular to device memory, refused before any rank communicates.
void check_device_errors(gpt2::testing::Checks& c, gpt2::Communicator& mpi, gpt2::Backend& be,
                         gpt2::DeviceAllreduce mode) {
  DeviceArrays device(be);
  std::vector<float> host(8, 1.0f);
  float* d = device.make(std::vector<float>(8, 1.0f));
  auto comm = gpt2::make_cuda_mpi_communicator(mpi, mode);
  const int R = comm->size(), next = (comm->rank() + 1) % R, prev = (comm->rank() + R - 1) % R;
  auto unbound = comm->split(0, 0);  // split before bind(): a sub-group without a backend
  c.rejects<std::logic_error>("a sub-group split before bind(), on device memory",
                              [&] { unbound->allreduce_sum(d, 8); }, "allreduce_sum of device memory before bind()");
  comm->bind(be);
  // The path is chosen at the first collective; point to point cannot choose it.
  c.rejects<std::logic_error>("send_recv of device memory before any collective",
                              [&] { comm->send_recv(d, 4, next, d + 4, 4, prev); },
                              "send_recv of device memory before the ranks chose NCCL or host staging");
  c.rejects("all_gather from host into device memory", [&] { comm->all_gather(host.data(), d, 8 / R); },
            "all_gather: buffers in device and in host memory at once");
  c.rejects("broadcast of device memory", [&] { comm->broadcast(d, 8, 0); },
            "broadcast: data is device memory (broadcast takes host memory)");
}

// Every rank agrees on the count of failures; exit status 0 iff none.
int finish(gpt2::testing::Checks& c, gpt2::Communicator& mpi) {
  const double failed = mpi.allreduce_sum(static_cast<double>(c.failures()));
  if (mpi.rank() == 0) {
    std::printf("%s\n", failed == 0 ? "all passed" : fmt::format("{:.0f} failed over {} rank(s)", failed,
                                                                    mpi.size()).c_str());
  }
  return failed == 0 ? 0 : 1;
}

int check_host_memory(gpt2::Communicator& mpi) {
  gpt2::testing::Checks c(mpi.rank());
  auto comm = gpt2::make_cuda_mpi_communicator(mpi, gpt2::DeviceAllreduce::kAuto);
  gpt2::testing::HostArrays host;
  gpt2::testing::Groups groups(*comm, mpi.rank());
  for (const gpt2::testing::Group& g : groups.list) {
    c.check(g.comm->name() == "mpi", fmt::format("{}: unbound, names MPI: '{}'", g.label, g.comm->name()));
    gpt2::testing::check_verbs(c, g, host, 11, 5);
    gpt2::testing::check_argument_errors(c, g);
  }
  return finish(c, mpi);
}

// The device part: skipped (77) without a GPU, or for "nccl" without a GPU
// per rank.
int check_device(gpt2::Communicator& mpi, const std::string& mode) {
  const int rank = mpi.rank(), R = mpi.size();
  std::string why;
  const int gpus = gpt2::cuda_device_count(&why);
  if (gpus == 0 || (mode == "nccl" && mpi.local_size() > gpus)) {
    if (rank == 0) {
      std::printf("SKIP: %s\n", gpus == 0 ? fmt::format("no CUDA device ({})", why).c_str()
                                          : fmt::format("NCCL needs a GPU per rank: {} ranks, {} GPU(s)",
                                                        mpi.local_size(), gpus).c_str());
    }
    return 77;
  }
  gpt2::testing::Checks c(rank);
  const gpt2::DeviceAllreduce device_mode = gpt2::parse_device_allreduce(mode, "argument");
  auto comm = gpt2::make_cuda_mpi_communicator(mpi, device_mode);
  auto be = gpt2::make_cuda_backend({.device_hint = mpi.local_rank()});
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
  c.check(bad == 0, fmt::format("{} ranks, {}: device allreduce of {} floats exact ({} wrong)", R, mode, n, bad));
  const std::string path_name = mode == "nccl" ? "mpi+nccl" : "mpi (host-staged)";
  const std::string name = comm->name();
  c.check(name == path_name || (R == 1 && mode == "host"), fmt::format("the communicator names its path: '{}'", name));

  std::vector<float> host_values(5, static_cast<float>(rank + 1));
  comm->allreduce_sum(host_values.data(), host_values.size());
  c.check(host_values[4] == ranks_sum, fmt::format("a host array goes through MPI: {} (expected {})", host_values[4],
                                                   ranks_sum));

  DeviceArrays device(*be);
  gpt2::testing::HostArrays host;
  gpt2::testing::Groups groups(*comm, rank);
  for (const gpt2::testing::Group& g : groups.list) {
    c.check(g.comm->name() == path_name || g.comm == comm.get(),
            fmt::format("{}: split from a bound communicator, names its path: '{}'", g.label, g.comm->name()));
    gpt2::testing::check_verbs(c, g, device, 4099, 1025);
    gpt2::testing::check_verbs(c, g, host, 11, 5);
    gpt2::testing::check_argument_errors(c, g);
  }
  check_device_errors(c, mpi, *be, device_mode);
  return finish(c, mpi);
}

}  // namespace

int main(int argc, char** argv) {
  auto mpi = gpt2::make_mpi_communicator(&argc, &argv);
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "nccl" && mode != "host" && mode != "host-memory") {
    if (mpi->rank() == 0) std::printf("usage: mpiexec -n R nccl_test nccl|host|host-memory\n");
    return 2;
  }
  try {
    return mode == "host-memory" ? check_host_memory(*mpi) : check_device(*mpi, mode);
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", mpi->rank(), e.what());
    std::fflush(stdout);
    mpi->abort(1);
  }
}
