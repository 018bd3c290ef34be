// The Communicator's front door (argument checks, then the implementation's
// do_ function), the local communicator and the broadcast helpers.
#include "parallel/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "util/hash.h"

namespace gpt2 {

namespace {

void require_data(const char* verb, const char* what, const void* p, size_t count) {
  if (p == nullptr && count > 0) {
    throw std::invalid_argument(fmt::format("{}: {} is null with a count of {}", verb, what, count));
  }
}

void require_rank(const char* verb, const char* what, int r, int size) {
  if (r < 0 || r >= size) {
    throw std::invalid_argument(
        fmt::format("{}: {} {} is out of range for a communicator of {} rank(s) (expected 0 .. {})", verb, what, r,
                    size, size - 1));
  }
}

// Point to point's peer: another rank of the communicator.
void require_peer(const char* verb, int peer, int rank, int size) {
  require_rank(verb, "peer", peer, size);
  if (peer == rank) {
    throw std::invalid_argument(fmt::format("{}: peer {} is this rank (a blocking {} with oneself never completes: "
                                            "use send_recv)", verb, peer, verb));
  }
}

// Whether bytes [a, a + a_bytes) and [b, b + b_bytes) share one. As
// integers: the two may be unrelated allocations, or device addresses.
bool overlap_bytes(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// The same for [a, a + a_count) and [b, b + b_count) floats.
bool overlap(const float* a, size_t a_count, const float* b, size_t b_count) {
  return overlap_bytes(a, a_count * sizeof(float), b, b_count * sizeof(float));
}

// send_recv's checks, for counts in elements of `unit` named `unit_name`
// ("floats" for the float verb, "bytes" for the host values').
void require_send_recv(const void* send_data, size_t send_count, int dest, const void* recv_data, size_t recv_count,
                       int source, int rank, int size, size_t unit, const char* unit_name) {
  require_data("send_recv", "send_data", send_data, send_count);
  require_data("send_recv", "recv_data", recv_data, recv_count);
  require_rank("send_recv", "dest", dest, size);
  require_rank("send_recv", "source", source, size);
  if (overlap_bytes(send_data, send_count * unit, recv_data, recv_count * unit)) {
    throw std::invalid_argument(fmt::format("send_recv: send_data ({} {}) and recv_data ({} {}) overlap", send_count,
                                            unit_name, recv_count, unit_name));
  }
  if (dest == rank && source == rank && send_count != recv_count) {
    throw std::invalid_argument(fmt::format("send_recv: with itself, sends {} {} but receives {}", send_count,
                                            unit_name, recv_count));
  }
}

// The shape check of reduce_scatter_sum and all_gather: `part` (chunk floats)
// is either the rank's own chunk of `whole` (size * chunk floats), or
// disjoint from it.
void require_part_of(const char* verb, const char* part_name, const float* part, const char* whole_name,
                     const float* whole, size_t chunk, int rank, int size) {
  require_data(verb, part_name, part, chunk);
  require_data(verb, whole_name, whole, chunk * static_cast<size_t>(size));
  if (part == whole + static_cast<size_t>(rank) * chunk) return;  // in place
  if (overlap(part, chunk, whole, chunk * static_cast<size_t>(size))) {
    throw std::invalid_argument(fmt::format(
        "{}: {} overlaps {} but is not this rank's chunk (in place means {} == {} + rank * chunk = {} + {} * {})",
        verb, part_name, whole_name, part_name, whole_name, whole_name, rank, chunk));
  }
}

}  // namespace

void Communicator::broadcast(void* data, size_t bytes, int root) {
  require_data("broadcast", "data", data, bytes);
  require_rank("broadcast", "root", root, size());
  count_call(bytes);
  do_broadcast(data, bytes, root);
}

void Communicator::allreduce_sum(float* data, size_t count) {
  require_data("allreduce_sum", "data", data, count);
  count_call(count * sizeof(float));
  do_allreduce_sum(data, count);
}

void Communicator::start_allreduce_sum(float* data, size_t count) {
  require_data("start_allreduce_sum", "data", data, count);
  count_call(count * sizeof(float));
  do_start_allreduce_sum(data, count);
}

void Communicator::reduce_scatter_sum(const float* send, float* recv, size_t chunk) {
  require_part_of("reduce_scatter_sum", "recv", recv, "send", send, chunk, rank(), size());
  count_call(chunk * static_cast<size_t>(size()) * sizeof(float));
  do_reduce_scatter_sum(send, recv, chunk);
}

void Communicator::all_gather(const float* send, float* recv, size_t chunk) {
  require_part_of("all_gather", "send", send, "recv", recv, chunk, rank(), size());
  count_call(chunk * static_cast<size_t>(size()) * sizeof(float));
  do_all_gather(send, recv, chunk);
}

namespace {
void require_out_of_place(const char* verb, const float* part, const float* whole, size_t chunk, int size) {
  if (chunk > 0 && overlap(part, chunk, whole, chunk * static_cast<size_t>(size))) {
    throw std::invalid_argument(fmt::format("{}: the buffers overlap (the non-blocking form is out of place only)",
                                            verb));
  }
}
}  // namespace

void Communicator::start_reduce_scatter_sum(const float* send, float* recv, size_t chunk) {
  require_part_of("start_reduce_scatter_sum", "recv", recv, "send", send, chunk, rank(), size());
  require_out_of_place("start_reduce_scatter_sum", recv, send, chunk, size());
  count_call(chunk * static_cast<size_t>(size()) * sizeof(float));
  do_start_reduce_scatter_sum(send, recv, chunk);
}

void Communicator::start_all_gather(const float* send, float* recv, size_t chunk) {
  require_part_of("start_all_gather", "send", send, "recv", recv, chunk, rank(), size());
  require_out_of_place("start_all_gather", send, recv, chunk, size());
  count_call(chunk * static_cast<size_t>(size()) * sizeof(float));
  do_start_all_gather(send, recv, chunk);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  if (color < 0) {
    throw std::invalid_argument(fmt::format("split: color {} is negative (every rank joins a group: color >= 0)",
                                            color));
  }
  return do_split(color, key);
}

void Communicator::send(const float* data, size_t count, int peer) {
  require_data("send", "data", data, count);
  require_peer("send", peer, rank(), size());
  count_call(count * sizeof(float));
  do_send_recv("send", data, count, peer, nullptr, 0, peer);
}

void Communicator::recv(float* data, size_t count, int peer) {
  require_data("recv", "data", data, count);
  require_peer("recv", peer, rank(), size());
  count_call(count * sizeof(float));
  do_send_recv("recv", nullptr, 0, peer, data, count, peer);
}

void Communicator::send_recv(const float* send_data, size_t send_count, int dest, float* recv_data,
                             size_t recv_count, int source) {
  require_send_recv(send_data, send_count, dest, recv_data, recv_count, source, rank(), size(), sizeof(float),
                    "floats");
  count_call((send_count + recv_count) * sizeof(float));
  do_send_recv("send_recv", send_data, send_count, dest, recv_data, recv_count, source);
}

namespace {
void require_small(const char* verb, size_t bytes) {
  if (bytes > static_cast<size_t>(INT_MAX)) {
    throw std::invalid_argument(fmt::format("{}: {} bytes of host values in one call (at most {})", verb, bytes,
                                            INT_MAX));
  }
}
}  // namespace

size_t Communicator::host_bytes(const char* verb, size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) {
    throw std::invalid_argument(fmt::format("{}: {} values of {} bytes overflow a size", verb, count, size));
  }
  return count * size;
}

void Communicator::all_gather_bytes(const void* send, void* recv, size_t bytes) {
  const size_t whole = bytes * static_cast<size_t>(size());
  require_data("all_gather", "send", send, bytes);
  require_data("all_gather", "recv", recv, whole);
  require_small("all_gather", whole);
  const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(rank()) * bytes;
  if (!in_place && overlap_bytes(send, bytes, recv, whole)) {
    throw std::invalid_argument("all_gather: send overlaps recv but is not this rank's chunk (in place means "
                                "send == recv + rank * chunk)");
  }
  count_call(whole);
  do_all_gather_bytes(send, recv, bytes);
}

void Communicator::send_recv_bytes(const void* send_data, size_t send_bytes, int dest, void* recv_data,
                                   size_t recv_bytes, int source) {
  require_send_recv(send_data, send_bytes, dest, recv_data, recv_bytes, source, rank(), size(), 1, "bytes");
  require_small("send_recv", std::max(send_bytes, recv_bytes));
  count_call(send_bytes + recv_bytes);
  do_send_recv_bytes(send_data, send_bytes, dest, recv_data, recv_bytes, source);
}

namespace {
void require_stream(const char* verb, int stream) {
  if (stream < 0 || stream > Communicator::kMaxStream) {
    throw std::invalid_argument(fmt::format("{}: stream {} is outside [0, {}]", verb, stream, Communicator::kMaxStream));
  }
}
}  // namespace

uint64_t Communicator::start_send(const float* data, size_t count, int peer, int stream) {
  require_data("start_send", "data", data, count);
  require_peer("start_send", peer, rank(), size());
  require_stream("start_send", stream);
  count_call(count * sizeof(float));
  return do_start_send(data, count, peer, stream);
}

void Communicator::wait_send(uint64_t ticket) { do_wait_send(ticket); }

uint64_t Communicator::do_start_send(const float*, size_t, int, int) {
  throw std::logic_error(fmt::format("start_send: the {} communicator has no non-blocking send (pipeline stages "
                                     "run on the mpi stage)", name()));
}

void Communicator::do_wait_send(uint64_t ticket) {
  throw std::logic_error(fmt::format("wait_send: no send {} on the {} communicator", ticket, name()));
}

uint64_t Communicator::start_recv(float* data, size_t count, int peer, int stream) {
  require_data("start_recv", "data", data, count);
  require_peer("start_recv", peer, rank(), size());
  require_stream("start_recv", stream);
  count_call(count * sizeof(float));
  return do_start_recv(data, count, peer, stream);
}

void Communicator::wait_recv(uint64_t ticket) { do_wait_recv(ticket); }

uint64_t Communicator::do_start_recv(float*, size_t, int, int) {
  throw std::logic_error(fmt::format("start_recv: the {} communicator has no non-blocking receive (context "
                                     "parallelism runs on the mpi stage)", name()));
}

void Communicator::do_wait_recv(uint64_t ticket) {
  throw std::logic_error(fmt::format("wait_recv: no receive {} on the {} communicator", ticket, name()));
}

namespace {

// One process. The checks above let no send or recv through (their only
// possible peer is this rank): send_recv can only be a copy to itself.
class LocalCommunicator final : public Communicator {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool all_equal(uint64_t) override { return true; }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  void progress() override {}
  void wait_all() override {}

 protected:
  void do_broadcast(void*, size_t, int) override {}
  void do_allreduce_sum(float*, size_t) override {}
  double do_allreduce_sum(double x) override { return x; }
  void do_reduce_scatter_sum(const float* send, float* recv, size_t chunk) override { copy(recv, send, chunk); }
  void do_all_gather(const float* send, float* recv, size_t chunk) override { copy(recv, send, chunk); }
  std::unique_ptr<Communicator> do_split(int, int) override { return std::make_unique<LocalCommunicator>(); }
  void do_send_recv(const char*, const float* send_data, size_t send_count, int, float* recv_data, size_t recv_count,
                    int) override {
    if (send_count > 0 && recv_count > 0) copy(recv_data, send_data, send_count);  // equal (checked above)
  }
  void do_start_allreduce_sum(float*, size_t) override {}
  void do_all_gather_bytes(const void* send, void* recv, size_t bytes) override {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
  }
  void do_send_recv_bytes(const void* send_data, size_t send_bytes, int, void* recv_data, size_t recv_bytes,
                          int) override {
    if (send_bytes > 0 && recv_bytes > 0) std::memcpy(recv_data, send_data, send_bytes);  // equal (checked above)
  }

 private:
  static void copy(float* dst, const float* src, size_t count) {
    if (dst != src) std::copy_n(src, count, dst);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

std::optional<std::string> root_text_if_ranks_differ(Communicator& comm, const std::string& text) {
  if (comm.size() == 1 || comm.all_equal(fnv1a64(text.data(), text.size()))) return std::nullopt;
  std::vector<std::string> root = {text};
  broadcast_strings(comm, root, 0);
  return root[0];
}

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

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text) {
  const size_t ranks = static_cast<size_t>(comm.size());
  const uint64_t mine = text.size();
  std::vector<uint64_t> sizes(ranks);
  comm.all_gather(&mine, sizes.data(), 1);
  const size_t width = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<std::string> out(ranks);
  if (width == 0) return out;
  std::string padded = text;
  padded.resize(width, '\0');
  std::string all(width * ranks, '\0');
  comm.all_gather(padded.data(), all.data(), width);
  for (size_t r = 0; r < ranks; ++r) out[r] = all.substr(r * width, static_cast<size_t>(sizes[r]));
  return out;
}

}  // namespace gpt2
