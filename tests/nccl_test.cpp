// The MPI+CUDA communicator's verbs, called directly (the trainer skips them
// on one rank), a GoogleTest program under mpiexec (tests/mpi_test_main.h:
// every rank runs every test, rank 0 prints, any rank's failure fails the
// job):
//   mpiexec -n R nccl_test nccl|host|host-memory [gtest flags]
// "nccl" and "host" (suite cuda), on device memory: first the gradient
// allreduce: every rank fills a device buffer with rank-dependent values
// whose sums are exact in float; after the allreduce each element must equal
// the exact sum; a host array goes through plain MPI, and the communicator
// names the path it took. Then every verb of tests/comm_checks.h (allreduce,
// reduce_scatter and all_gather in and out of place, broadcast, send and recv
// pairwise and in a ring, send_recv) on device memory and on host memory, on
// the world and on its sub-groups (pairs, parities in reversed order, nested
// splits: each chooses its path when split), and the errors particular to
// device memory. With "nccl" on one rank this runs NCCL's whole path (unique
// id over MPI, communicator, every verb) on a single GPU. Exits 77 (skipped)
// without a CUDA device, or for "nccl" with fewer GPUs than ranks, before
// any test runs.
// "host-memory" needs no GPU (suite mpi): every verb on host memory through
// an unbound MPI+CUDA communicator and its sub-groups (each owning its MPI
// sub-communicator), which must behave as the MPI communicator does.
// Only the tests of the mode's suite run (HostMemory* or DeviceMemory*).
// Prints the number of checks made on rank 0.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm_checks.h"
#include "parallel/mpi/mpi_comm.h"
#include "parallel/nccl/cuda_comm.h"
#include "kernels/cuda/cuda_backend.h"
#include "mpi_test_main.h"

namespace gpt2 {
namespace {

using testing::expect;
using testing::expect_rejects;
using testing::Group;

// Arrays in a backend's device memory.
class DeviceArrays final : public testing::Arrays {
 public:
  explicit DeviceArrays(Backend& be) : be_(be) {}
  std::string name() const override { return be_.memory().name(); }
  float* make(const std::vector<float>& values) override {
    Buffer& b = buffers_.emplace_back(values.size(), be_.memory());
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
  Backend& be_;
  std::deque<Buffer> buffers_;
};

// What the tests share, built on every rank before them (the splits are
// collective) and freed after them, before MPI is finalised. Host-memory
// mode: an unbound communicator (no backend). Device modes: a CUDA backend
// on this rank's GPU and a communicator bound to it.
struct Context {
  Communicator& mpi;
  std::string mode;
  std::unique_ptr<Backend> be;
  std::unique_ptr<CudaMpiCommunicator> comm;
  std::unique_ptr<testing::Groups> groups;
};
Context* g_context = nullptr;

class ContextEnvironment : public ::testing::Environment {
 public:
  ContextEnvironment(Communicator& mpi, std::string mode) : mpi_(mpi), mode_(std::move(mode)) {}
  void SetUp() override {
    g_context = new Context{mpi_, mode_, nullptr, nullptr, nullptr};
    if (mode_ == "host-memory") {
      g_context->comm = make_cuda_mpi_communicator(mpi_, DeviceAllreduce::kAuto);
    } else {
      g_context->comm = make_cuda_mpi_communicator(mpi_, parse_device_allreduce(mode_, "argument"));
      g_context->be = make_cuda_backend({.device_hint = mpi_.local_rank()});
      g_context->comm->bind(*g_context->be);
    }
    g_context->groups = std::make_unique<testing::Groups>(*g_context->comm, mpi_.rank());
  }
  void TearDown() override {
    delete g_context;
    g_context = nullptr;
  }

 private:
  Communicator& mpi_;
  std::string mode_;
};

const Group& group(size_t i) { return g_context->groups->list.at(i); }

std::string group_name(const ::testing::TestParamInfo<size_t>& info) { return testing::Groups::names().at(info.param); }

// ---- host-memory: the unbound communicator, as the MPI one ----

class HostMemory : public testing::MpiTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(HostMemory, UnboundNamesMpi) {
  const Group& g = group(GetParam());
  expect(g.comm->name() == "mpi", fmt::format("{}: unbound, names MPI: '{}'", g.label, g.comm->name()));
}

TEST_P(HostMemory, EveryVerb) {
  testing::HostArrays host;
  testing::check_verbs(group(GetParam()), host, 11, 5);
}

TEST_P(HostMemory, ArgumentErrors) { testing::check_argument_errors(group(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Groups, HostMemory, ::testing::Range(size_t{0}, testing::Groups::names().size()), group_name);

// ---- nccl and host: device memory ----

// The path the mode names, as the communicator reports it once chosen.
std::string path_name() { return g_context->mode == "nccl" ? "mpi+nccl" : "mpi (host-staged)"; }

class DeviceMemory : public testing::MpiTest {};

TEST_F(DeviceMemory, GradientAllreduceIsExactAndNamesItsPath) {
  Context& ctx = *g_context;
  const int rank = ctx.mpi.rank(), R = ctx.mpi.size();
  const size_t n = (size_t{1} << 20) + 3;  // not a multiple of anything convenient
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 1000)) * 0.5f;
  Buffer d(n, ctx.be->memory());
  d.upload(h);
  ctx.comm->allreduce_sum(d.data(), n);
  ctx.be->synchronize();
  const std::vector<float> got = d.download();
  size_t bad = 0;
  const float ranks_sum = static_cast<float>(R * (R + 1) / 2);
  for (size_t i = 0; i < n; ++i) bad += got[i] != ranks_sum * static_cast<float>(i % 1000) * 0.5f;
  expect(bad == 0, fmt::format("{} ranks, {}: device allreduce of {} floats exact ({} wrong)", R, ctx.mode, n, bad));
  const std::string name = ctx.comm->name();
  expect(name == path_name() || (R == 1 && ctx.mode == "host"),
         fmt::format("the communicator names its path: '{}'", name));

  std::vector<float> host_values(5, static_cast<float>(rank + 1));
  ctx.comm->allreduce_sum(host_values.data(), host_values.size());
  expect(host_values[4] == ranks_sum,
         fmt::format("a host array goes through MPI: {} (expected {})", host_values[4], ranks_sum));
}

class DeviceMemoryGroup : public testing::MpiTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(DeviceMemoryGroup, NamesItsPath) {
  const Group& g = group(GetParam());
  expect(g.comm->name() == path_name() || g.comm == g_context->comm.get(),
         fmt::format("{}: split from a bound communicator, names its path: '{}'", g.label, g.comm->name()));
}

TEST_P(DeviceMemoryGroup, EveryVerbOnDeviceMemory) {
  DeviceArrays device(*g_context->be);
  testing::check_verbs(group(GetParam()), device, 4099, 1025);
}

TEST_P(DeviceMemoryGroup, EveryVerbOnHostMemory) {
  testing::HostArrays host;
  testing::check_verbs(group(GetParam()), host, 11, 5);
}

TEST_P(DeviceMemoryGroup, ArgumentErrors) { testing::check_argument_errors(group(GetParam())); }

INSTANTIATE_TEST_SUITE_P(Groups, DeviceMemoryGroup, ::testing::Range(size_t{0}, testing::Groups::names().size()),
                         group_name);

// Misuse particular to device memory, refused before any rank communicates.
TEST_F(DeviceMemory, MisuseIsRefused) {
  Context& ctx = *g_context;
  DeviceArrays device(*ctx.be);
  std::vector<float> host(8, 1.0f);
  float* d = device.make(std::vector<float>(8, 1.0f));
  auto comm = make_cuda_mpi_communicator(ctx.mpi, parse_device_allreduce(ctx.mode, "argument"));
  const int R = comm->size(), next = (comm->rank() + 1) % R, prev = (comm->rank() + R - 1) % R;
  auto unbound = comm->split(0, 0);  // split before bind(): a sub-group without a backend
  expect_rejects<std::logic_error>("a sub-group split before bind(), on device memory",
                                   [&] { unbound->allreduce_sum(d, 8); },
                                   "allreduce_sum of device memory before bind()");
  comm->bind(*ctx.be);
  // The path is chosen at the first collective; point to point cannot choose it.
  expect_rejects<std::logic_error>("send_recv of device memory before any collective",
                                   [&] { comm->send_recv(d, 4, next, d + 4, 4, prev); },
                                   "send_recv of device memory before the ranks chose NCCL or host staging");
  expect_rejects("all_gather from host into device memory", [&] { comm->all_gather(host.data(), d, 8 / R); },
                 "all_gather: buffers in device and in host memory at once");
  expect_rejects("broadcast of device memory", [&] { comm->broadcast(d, 8, 0); },
                 "broadcast: data is device memory (broadcast takes host memory)");
}

// Why the device modes cannot run here, or "": no CUDA device, or for "nccl"
// fewer GPUs than ranks on this machine.
std::string device_missing(Communicator& mpi, const std::string& mode) {
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (gpus == 0) return fmt::format("no CUDA device ({})", why);
  if (mode == "nccl" && mpi.local_size() > gpus) {
    return fmt::format("NCCL needs a GPU per rank: {} ranks, {} GPU(s)", mpi.local_size(), gpus);
  }
  return "";
}

// Runs the suites of `mode` only: the user's --gtest_filter (if any) with
// the other mode's suites excluded.
void keep_mode_suites(const std::string& mode) {
  const std::string other = mode == "host-memory" ? "*DeviceMemory*" : "*HostMemory*";
  std::string filter = GTEST_FLAG_GET(filter);
  filter += (filter.find('-') == std::string::npos ? "-" : ":") + other;
  GTEST_FLAG_SET(filter, filter);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  auto mpi = gpt2::make_mpi_communicator(&argc, &argv);
  try {
    ::testing::InitGoogleTest(&argc, argv);
    const std::string mode = argc == 2 ? argv[1] : "";
    if (mode != "nccl" && mode != "host" && mode != "host-memory") {
      if (mpi->rank() == 0) std::printf("usage: mpiexec -n R nccl_test nccl|host|host-memory [gtest flags]\n");
      return 2;
    }
    if (mode != "host-memory") {
      const std::string why = gpt2::device_missing(*mpi, mode);
      if (!why.empty()) {
        if (mpi->rank() == 0) std::printf("SKIP: %s\n", why.c_str());
        return 77;  // meson test: skipped
      }
    }
    gpt2::keep_mode_suites(mode);
    ::testing::AddGlobalTestEnvironment(new gpt2::ContextEnvironment(*mpi, mode));
    const int status = gpt2::testing::run_mpi_tests(*mpi);
    if (mpi->rank() == 0)
      std::printf("nccl_test %s: %d checks on rank 0\n", mode.c_str(), gpt2::testing::comm_checks());
    return status;
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", mpi->rank(), e.what());
    std::fflush(stdout);
    mpi->abort(1);
  }
}
