#include "dist/nccl/cuda_comm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

#define GPT2_NCCL_CHECK(call) GPT2_CHECK_CALL(call, ncclSuccess, ncclGetErrorString)

namespace gpt2 {

DeviceAllreduce parse_device_allreduce(const std::string& name, const std::string& what) {
  if (name.empty() || name == "auto") return DeviceAllreduce::kAuto;
  if (name == "nccl") return DeviceAllreduce::kNccl;
  if (name == "host") return DeviceAllreduce::kHostStaged;
  throw std::invalid_argument(fmt::format("{}: unknown gradient allreduce '{}' (expected auto, nccl or host)", what,
                                          name));
}

namespace {

class Impl final : public CudaMpiCommunicator {
 public:
  Impl(Communicator& mpi, DeviceAllreduce mode) : mpi_(mpi), mode_(mode) {}
  ~Impl() override {
    if (nccl_) ncclCommDestroy(nccl_);
  }

  std::string name() const override {
    if (!resolved_) return mpi_.name();
    return mode_ == DeviceAllreduce::kNccl ? "mpi+nccl" : "mpi (host-staged)";
  }
  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  int local_rank() const override { return mpi_.local_rank(); }
  int local_size() const override { return mpi_.local_size(); }
  void broadcast(void* data, size_t bytes, int root) override { mpi_.broadcast(data, bytes, root); }
  double allreduce_sum(double x) override { return mpi_.allreduce_sum(x); }
  bool all_equal(uint64_t x) override { return mpi_.all_equal(x); }
  void barrier() override { mpi_.barrier(); }
  [[noreturn]] void abort(int code) override {
    mpi_.abort(code);
    std::abort();  // not reached: mpi_.abort does not return
  }

  void bind(Backend& be) override {
    stream_ = static_cast<cudaStream_t>(cuda_stream_of(be));
    memory_ = &be.memory();
    bound_ = true;
  }

  void allreduce_sum(float* data, size_t count) override {
    if (count == 0) return;
    if (!on_device(data)) {  // host values (none in training today): plain MPI
      mpi_.allreduce_sum(data, count);
      return;
    }
    if (!bound_) throw std::logic_error("CudaMpiCommunicator: allreduce of device memory before bind()");
    if (!resolved_) resolve();
    if (mode_ == DeviceAllreduce::kNccl) {
      // Ordered on the backend's stream after the kernels that produced the
      // gradients and before the optimizer's: no host synchronisation.
      GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum, nccl_, stream_));
      return;
    }
    if (mpi_.size() == 1) return;
    staging_.resize(count);  // grows once, to the largest bucket
    memory_->download(staging_.data(), data, count * sizeof(float));
    mpi_.allreduce_sum(staging_.data(), count);
    memory_->upload(data, staging_.data(), count * sizeof(float));
  }
  // Buckets: NCCL queues them on the stream; the host-staged path runs each
  // at once (the download waits for the kernels that wrote it).
  void start_allreduce_sum(float* data, size_t count) override { allreduce_sum(data, count); }
  void progress() override {}
  void wait_all() override {}

 private:
  static bool on_device(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // clear it: not a pointer CUDA knows
      return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  }

  // At the first allreduce of device memory, which every rank reaches
  // together (generation, where rank 0 alone has a backend, has none): the
  // ranks agree on one path, since mixing NCCL and MPI collectives would
  // hang. NCCL needs a GPU per rank; ranks sharing GPUs stage through the
  // host. A one-rank job uses NCCL only when asked for by name (a one-rank
  // NCCL allreduce is a copy: a way to run the NCCL path on one GPU).
  void resolve() {
    const bool shared = mpi_.local_size() > cuda_device_count();
    bool host = mode_ == DeviceAllreduce::kHostStaged || (mode_ == DeviceAllreduce::kAuto && shared);
    if (mpi_.size() == 1 && mode_ != DeviceAllreduce::kNccl) host = true;
    const double votes = mpi_.allreduce_sum(host ? 1.0 : 0.0);
    if (votes > 0 && mode_ == DeviceAllreduce::kNccl) {
      throw std::invalid_argument(fmt::format(
          "GPT2_CUDA_ALLREDUCE=nccl, but {} rank(s) stage gradients through the host: every rank must use the same "
          "path", votes));
    }
    if (votes > 0 && mpi_.rank() == 0 && mpi_.size() > 1 && mode_ == DeviceAllreduce::kAuto) {
      fmt::print(stderr, "[mpi_cuda] gradients are summed through host memory and MPI: {} ranks on a machine with "
                 "{} GPU(s) share devices, and NCCL needs one per rank\n", mpi_.local_size(), cuda_device_count());
    }
    mode_ = votes > 0 ? DeviceAllreduce::kHostStaged : DeviceAllreduce::kNccl;
    if (mode_ == DeviceAllreduce::kNccl) {
      ncclUniqueId id{};
      if (mpi_.rank() == 0) GPT2_NCCL_CHECK(ncclGetUniqueId(&id));
      mpi_.broadcast(&id, sizeof id, 0);
      GPT2_NCCL_CHECK(ncclCommInitRank(&nccl_, mpi_.size(), id, mpi_.rank()));
    }
    resolved_ = true;
  }

  Communicator& mpi_;
  DeviceAllreduce mode_;
  bool bound_ = false, resolved_ = false;
  cudaStream_t stream_ = nullptr;
  Memory* memory_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  std::vector<float> staging_;
};

}  // namespace

std::unique_ptr<CudaMpiCommunicator> make_cuda_mpi_communicator(Communicator& mpi, DeviceAllreduce mode) {
  return std::make_unique<Impl>(mpi, mode);
}

}  // namespace gpt2
