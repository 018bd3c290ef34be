#include "cuda_comm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "cuda_backend.h"
#include "cuda_check.h"

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
    if (!bound_) return mpi_.name();
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
    if (mode_ == DeviceAllreduce::kAuto) {
      // NCCL needs a device per rank; ranks sharing a GPU stage through the host.
      mode_ = mpi_.local_size() <= cuda_device_count() ? DeviceAllreduce::kNccl : DeviceAllreduce::kHostStaged;
    }
    bound_ = true;
  }

  void allreduce_sum(float* data, size_t count) override {
    if (!bound_) throw std::logic_error("CudaMpiCommunicator: allreduce of device memory before bind()");
    if (count == 0) return;
    // One rank: nothing to sum, except that NCCL asked for by name still runs
    // (a one-rank NCCL allreduce is a copy): the path can be exercised on a
    // machine with a single GPU.
    if (mpi_.size() == 1 && mode_ != DeviceAllreduce::kNccl) return;
    if (mode_ == DeviceAllreduce::kNccl) {
      if (nccl_ == nullptr) {
        // Set up at the first gradient allreduce, which every rank reaches
        // together (generation, where rank 0 alone has a backend, has none).
        ncclUniqueId id{};
        if (mpi_.rank() == 0) GPT2_NCCL_CHECK(ncclGetUniqueId(&id));
        mpi_.broadcast(&id, sizeof id, 0);
        GPT2_NCCL_CHECK(ncclCommInitRank(&nccl_, mpi_.size(), id, mpi_.rank()));
      }
      // Ordered on the backend's stream after the kernels that produced the
      // gradients and before the optimizer's: no host synchronisation.
      GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum, nccl_, stream_));
      return;
    }
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
  Communicator& mpi_;
  DeviceAllreduce mode_;
  bool bound_ = false;
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
