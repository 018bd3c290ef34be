#include "dist/mpi/mpi_comm.h"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#define MPI_CHECK(call)                                                                         \
  do {                                                                                          \
    int mpi_rc_ = (call);                                                                       \
    if (mpi_rc_ != MPI_SUCCESS) {                                                               \
      char msg_[MPI_MAX_ERROR_STRING];                                                          \
      int len_ = 0;                                                                             \
      MPI_Error_string(mpi_rc_, msg_, &len_);                                                   \
      throw std::runtime_error(fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, #call,   \
                                           std::string(msg_, static_cast<size_t>(len_))));      \
    }                                                                                           \
  } while (0)

namespace gpt2 {

namespace {

// Polls `req` until done, sleeping between polls: waiting ranks leave the
// cores to the ranks that still compute (MPICH's blocking calls busy-poll).
void idle_wait(MPI_Request* req) {
  int done = 0;
  auto sleep = std::chrono::microseconds(50);
  for (;;) {
    MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int* argc, char*** argv) {
    MPI_CHECK(MPI_Init(argc, argv));
    // Errors come back as return codes (checked above), not as aborts.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    MPI_CHECK(MPI_Comm_size(node, &local_size_));
    MPI_CHECK(MPI_Comm_free(&node));
    requests_.reserve(256);  // buckets in flight: no allocation inside a step
  }
  ~MpiCommunicator() override { MPI_Finalize(); }

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, bytes - off));
      MPI_Request req;
      MPI_CHECK(MPI_Ibcast(p + off, n, MPI_BYTE, root, MPI_COMM_WORLD, &req));
      idle_wait(&req);
    }
  }
  void allreduce_sum(float* data, size_t count) override {
    for (size_t off = 0; off < count; off += kChunk) {  // MPI counts are int
      const int n = static_cast<int>(std::min(kChunk, count - off));
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
  }
  double allreduce_sum(double x) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return x;
  }
  bool all_equal(uint64_t x) override {
    unsigned long long v[2] = {x, ~x};  // max of x and max of ~x (= ~min of x)
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    return v[0] == x && ~v[1] == x;
  }
  void barrier() override {
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    idle_wait(&req);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  void start_allreduce_sum(float* data, size_t count) override {
    for (size_t off = 0; off < count; off += kChunk) {
      requests_.emplace_back();
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kChunk, count - off)), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD, &requests_.back()));
    }
  }
  void progress() override {
    if (requests_.empty()) return;
    int flag = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE));
  }
  void wait_all() override {
    MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 30;  // elements per MPI call: counts are int
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<MPI_Request> requests_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

}  // namespace gpt2
