// The verbs of parallel/comm.h on device memory, through NCCL on the backend's
// stream or staged through host memory and the MPI communicator; host memory
// goes to the MPI communicator as it is (parallel/nccl/cuda_comm.h).
#include "parallel/nccl/cuda_comm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "util/console.h"

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

bool on_device(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear it: not a pointer CUDA knows
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Whether a verb's buffers (those it touches: nonzero counts) are device
// memory. They must all be in one kind of memory.
bool on_device(const char* verb, std::initializer_list<const void*> buffers) {
  int device = 0, host = 0;
  for (const void* p : buffers) ++(on_device(p) ? device : host);
  if (device > 0 && host > 0) {
    throw std::invalid_argument(fmt::format("{}: buffers in device and in host memory at once (all must be in one)",
                                            verb));
  }
  return device > 0;
}

class Impl final : public CudaMpiCommunicator {
 public:
  // The world's, over the caller's MPI communicator.
  Impl(Communicator& mpi, DeviceAllreduce mode) : mpi_(mpi), requested_(mode), mode_(mode),
                                                  node_ranks_(mpi.local_size()) {}
  // A sub-group's: owns its MPI communicator, bound like its parent.
  Impl(std::unique_ptr<Communicator> mpi, const Impl& parent)
      : owned_(std::move(mpi)), mpi_(*owned_), requested_(parent.requested_), mode_(parent.requested_),
        node_ranks_(parent.node_ranks_), bound_(parent.bound_), stream_(parent.stream_), memory_(parent.memory_) {}
  ~Impl() override {
    if (nccl_) ncclCommDestroy(nccl_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::string name() const override {
    if (!resolved_) return mpi_.name();
    return mode_ == DeviceAllreduce::kNccl ? "mpi+nccl" : "mpi (host-staged)";
  }
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    auto v = mpi_.library_versions();
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess) {
      v.emplace_back("nccl", fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100));
    }
    return v;
  }
  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  int local_rank() const override { return mpi_.local_rank(); }
  int local_size() const override { return mpi_.local_size(); }
  bool all_equal(uint64_t x) override { return mpi_.all_equal(x); }
  void barrier() override { mpi_.barrier(); }
  [[noreturn]] void abort(int code) override {
    mpi_.abort(code);
    std::abort();  // not reached: mpi_.abort does not return
  }
  // Buckets: NCCL queues them on the stream; the host-staged path runs each
  // at once (the download waits for the kernels that wrote it).
  void progress() override {}
  void wait_all() override {}

  void bind(Backend& be) override {
    stream_ = static_cast<cudaStream_t>(cuda_stream_of(be));
    memory_ = &be.memory();
    bound_ = true;
  }

 protected:
  void do_broadcast(void* data, size_t bytes, int root) override {
    if (bytes > 0 && on_device(data)) {
      throw std::invalid_argument("broadcast: data is device memory (broadcast takes host memory)");
    }
    mpi_.broadcast(data, bytes, root);
  }
  double do_allreduce_sum(double x) override { return mpi_.allreduce_sum(x); }

  void do_allreduce_sum(float* data, size_t count) override {
    if (count == 0) return;
    switch (path("allreduce_sum", on_device(data), true)) {
      case Path::kMpi:  // host values (none in training today)
        return mpi_.allreduce_sum(data, count);
      case Path::kNccl:
        // Ordered on the backend's stream after the kernels that produced the
        // gradients and before the optimizer's: no host synchronisation.
        GPT2_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum, nccl_, stream_));
        return;
      case Path::kStaged: {
        if (mpi_.size() == 1) return;
        float* h = staging(count);
        memory_->download(h, data, count * sizeof(float));
        mpi_.allreduce_sum(h, count);
        memory_->upload(data, h, count * sizeof(float));
      }
    }
  }
  void do_start_allreduce_sum(float* data, size_t count) override { do_allreduce_sum(data, count); }

  // NCCL's in-place forms are ours (recv == send + rank * chunk, and the
  // reverse for all_gather). Staged: the whole buffer on the host, the MPI
  // verb in place there, this rank's part (or the whole) back.
  void do_reduce_scatter_sum(const float* send, float* recv, size_t chunk) override {
    if (chunk == 0) return;
    switch (path("reduce_scatter_sum", on_device("reduce_scatter_sum", {send, recv}), true)) {
      case Path::kMpi:
        return mpi_.reduce_scatter_sum(send, recv, chunk);
      case Path::kNccl:
        GPT2_NCCL_CHECK(ncclReduceScatter(send, recv, chunk, ncclFloat, ncclSum, nccl_, stream_));
        return;
      case Path::kStaged: {
        const size_t all = chunk * static_cast<size_t>(size()), mine = chunk * static_cast<size_t>(rank());
        float* h = staging(all);
        memory_->download(h, send, all * sizeof(float));
        mpi_.reduce_scatter_sum(h, h + mine, chunk);
        memory_->upload(recv, h + mine, chunk * sizeof(float));
      }
    }
  }
  void do_all_gather(const float* send, float* recv, size_t chunk) override {
    if (chunk == 0) return;
    switch (path("all_gather", on_device("all_gather", {send, recv}), true)) {
      case Path::kMpi:
        return mpi_.all_gather(send, recv, chunk);
      case Path::kNccl:
        GPT2_NCCL_CHECK(ncclAllGather(send, recv, chunk, ncclFloat, nccl_, stream_));
        return;
      case Path::kStaged: {
        const size_t all = chunk * static_cast<size_t>(size()), mine = chunk * static_cast<size_t>(rank());
        float* h = staging(all);
        memory_->download(h + mine, send, chunk * sizeof(float));
        mpi_.all_gather(h + mine, h, chunk);
        memory_->upload(recv, h, all * sizeof(float));
      }
    }
  }

  // The typed host verbs: host values, through MPI.
  void do_all_gather_bytes(const void* send, void* recv, size_t bytes) override {
    if (on_device("all_gather", {send, recv})) {
      throw std::invalid_argument("all_gather: host values (doubles, counters) on device memory");
    }
    mpi_.all_gather(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), bytes);
  }
  void do_send_recv_bytes(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes,
                          int source) override {
    if (on_device("send_recv", {send_data, recv_data})) {
      throw std::invalid_argument("send_recv: host values (doubles, counters) on device memory");
    }
    mpi_.send_recv(static_cast<const std::byte*>(send_data), send_bytes, dest, static_cast<std::byte*>(recv_data),
                   recv_bytes, source);
  }

  // The sub-group's path is chosen here, where all its ranks are.
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    auto sub = std::make_unique<Impl>(mpi_.split(color, key), *this);
    if (bound_) sub->resolve();
    return sub;
  }

  // Point to point (send: recv_count 0; recv: send_count 0). NCCL's send
  // and recv block the stream until the peer's matching call: a send and a
  // recv that must progress together (a ring) are one NCCL group.
  void do_send_recv(const char* verb, const float* send_data, size_t send_count, int dest, float* recv_data,
                    size_t recv_count, int source) override {
    if (send_count == 0 && recv_count == 0) return;
    const bool device = send_count == 0   ? on_device(recv_data)
                        : recv_count == 0 ? on_device(send_data)
                                          : on_device(verb, {send_data, recv_data});
    switch (path(verb, device, false)) {
      case Path::kMpi:
        if (send_count == 0) return mpi_.recv(recv_data, recv_count, source);
        if (recv_count == 0) return mpi_.send(send_data, send_count, dest);
        return mpi_.send_recv(send_data, send_count, dest, recv_data, recv_count, source);
      case Path::kNccl:
        GPT2_NCCL_CHECK(ncclGroupStart());
        if (send_count > 0) GPT2_NCCL_CHECK(ncclSend(send_data, send_count, ncclFloat, dest, nccl_, stream_));
        if (recv_count > 0) GPT2_NCCL_CHECK(ncclRecv(recv_data, recv_count, ncclFloat, source, nccl_, stream_));
        GPT2_NCCL_CHECK(ncclGroupEnd());
        return;
      case Path::kStaged: {
        float* h = staging(send_count + recv_count);
        if (send_count > 0) memory_->download(h, send_data, send_count * sizeof(float));
        mpi_.send_recv(h, send_count, dest, h + send_count, recv_count, source);
        if (recv_count > 0) memory_->upload(recv_data, h + send_count, recv_count * sizeof(float));
      }
    }
  }

 private:
  enum class Path { kMpi, kNccl, kStaged };

  // How a verb moves its buffers: host memory through MPI, device memory by
  // the path the ranks agreed on. Agreeing is collective: only a collective
  // verb (every rank of the group is in it) may do it.
  Path path(const char* verb, bool device, bool collective) {
    if (!device) return Path::kMpi;
    if (!bound_) throw std::logic_error(fmt::format("CudaMpiCommunicator: {} of device memory before bind()", verb));
    if (!resolved_) {
      if (!collective) {
        throw std::logic_error(fmt::format(
            "CudaMpiCommunicator: {} of device memory before the ranks chose NCCL or host staging; they choose "
            "together, so a collective verb on device memory (or split()) comes first", verb));
      }
      resolve();
    }
    return mode_ == DeviceAllreduce::kNccl ? Path::kNccl : Path::kStaged;
  }

  // Every rank of the group calls it together (generation, where rank 0
  // alone has a backend, calls no verb on device memory): the ranks agree on
  // one path, since mixing NCCL and MPI would hang. NCCL needs a GPU per
  // rank; where a machine has more ranks (of the whole job: node_ranks_)
  // than GPUs they share GPUs and stage through the host. A one-rank group
  // uses NCCL only when asked for by name (a one-rank NCCL collective is a
  // copy: a way to run the NCCL path on one GPU).
  void resolve() {
    const bool shared = node_ranks_ > cuda_device_count();
    bool host = requested_ == DeviceAllreduce::kHostStaged || (requested_ == DeviceAllreduce::kAuto && shared);
    if (mpi_.size() == 1 && requested_ != DeviceAllreduce::kNccl) host = true;
    const double votes = mpi_.allreduce_sum(host ? 1.0 : 0.0);
    if (votes > 0 && requested_ == DeviceAllreduce::kNccl) {
      throw std::invalid_argument(fmt::format(
          "GPT2_CUDA_ALLREDUCE=nccl, but {} rank(s) stage gradients through the host: every rank must use the same "
          "path", votes));
    }
    const bool world = owned_ == nullptr;
    if (world && votes > 0 && mpi_.rank() == 0 && mpi_.size() > 1 && requested_ == DeviceAllreduce::kAuto) {
      console::err(fmt::format("[mpi_cuda] gradients are summed through host memory and MPI: {} ranks on a machine "
                               "with {} GPU(s) share devices, and NCCL needs one per rank\n", node_ranks_,
                               cuda_device_count()));
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

  // Host memory for staged verbs; grows to the largest, then never allocates.
  float* staging(size_t count) {
    if (staging_.size() < count) staging_.resize(count);
    return staging_.data();
  }

  std::unique_ptr<Communicator> owned_;  // a sub-group's MPI communicator; null for the world's
  Communicator& mpi_;
  DeviceAllreduce requested_, mode_;
  int node_ranks_;  // the job's ranks on this machine (they share its GPUs)
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
