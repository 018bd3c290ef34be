#include "dist/comm.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace gpt2 {

namespace {
class LocalCommunicator final : public Communicator {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void broadcast(void*, size_t, int) override {}
  void allreduce_sum(float*, size_t) override {}
  double allreduce_sum(double x) override { return x; }
  bool all_equal(uint64_t) override { return true; }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  void start_allreduce_sum(float*, size_t) override {}
  void progress() override {}
  void wait_all() override {}
};
}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

void broadcast_strings(Communicator& comm, std::vector<std::string>& v, int root) {
  uint64_t n = v.size();
  comm.broadcast(&n, sizeof n, root);
  v.resize(n);
  for (std::string& s : v) {
    uint64_t len = s.size();
    comm.broadcast(&len, sizeof len, root);
    s.resize(len);
    if (len) comm.broadcast(s.data(), len, root);
  }
}

void broadcast_ints(Communicator& comm, std::vector<int32_t>& v, int root) {
  uint64_t n = v.size();
  comm.broadcast(&n, sizeof n, root);
  v.resize(n);
  if (n) comm.broadcast(v.data(), n * sizeof(int32_t), root);
}

}  // namespace gpt2
