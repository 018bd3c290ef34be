// The verbs of parallel/comm.h over MPICH, on host memory. Counts beyond an int
// go in pieces of at most chunk_ elements. Collectives on floats use MPI's
// blocking calls (the ranks reach them together, in the step's hot path);
// broadcast, barrier and point to point wait without spinning (idle_wait), as
// a pipeline stage may wait long for its neighbour.
#include "parallel/mpi/mpi_comm.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/console.h"

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

// Polls requests[0, n) until all are done, sleeping between polls: waiting
// ranks leave the cores to the ranks that still compute (MPICH's blocking
// calls busy-poll). Any poll advances every request (MPICH has one progress
// engine), so polling them in order is enough. The sleep doubles from 20 us
// to at most 200 us: a wait ends at most 200 us late (pipeline stages wait
// on each other many times a step), at no more than 5,000 polls a second.
void idle_wait(MPI_Request* requests, int n = 1, MPI_Status* statuses = nullptr) {
  auto sleep = std::chrono::microseconds(20);
  for (int i = 0; i < n;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&requests[i], &done, statuses ? &statuses[i] : MPI_STATUS_IGNORE));
    if (done) {
      ++i;
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(200));
  }
}

// A received piece, at `off` of a message of `count` floats, must have the
// length its recv asked for (a longer one already failed as truncated). The
// sender cut its message the same way, so a short piece ends it: off + got
// is the sender's count.
void check_received(const MPI_Status& status, int expected, size_t off, size_t count, int peer, const char* verb) {
  int got = 0;
  MPI_CHECK(MPI_Get_count(&status, MPI_FLOAT, &got));
  if (got != expected) {
    throw std::runtime_error(fmt::format("{}: expected {} floats from rank {}, got {} (the sender's count differs)",
                                         verb, count, peer, off + static_cast<size_t>(got)));
  }
}

// Floats [off, off + n) of every rank's block of `stride` floats, as `count`
// elements of `type`: the block of rank r starts r * stride floats further.
// One piece covering whole blocks is plain floats; a part of each block is one
// element of a derived type (n floats, stretched to the extent of a block).
// How all_gather moves blocks longer than an int count.
class BlockPiece {
 public:
  BlockPiece(size_t n, size_t stride) {
    if (n == stride) {
      count = static_cast<int>(n);
      return;
    }
    MPI_Datatype floats;
    MPI_CHECK(MPI_Type_contiguous(static_cast<int>(n), MPI_FLOAT, &floats));
    MPI_CHECK(MPI_Type_create_resized(floats, 0, static_cast<MPI_Aint>(stride * sizeof(float)), &type));
    MPI_Type_free(&floats);
    MPI_CHECK(MPI_Type_commit(&type));
  }
  ~BlockPiece() {
    if (type != MPI_FLOAT) MPI_Type_free(&type);
  }
  BlockPiece(const BlockPiece&) = delete;
  BlockPiece& operator=(const BlockPiece&) = delete;

  MPI_Datatype type = MPI_FLOAT;
  int count = 1;
};

// MPI stays initialised while any communicator uses it: sub-groups may
// outlive the world communicator.
// The status a process ends with when MPI_Finalize does not return (below).
std::atomic<int> g_status_if_finalize_hangs{0};
constexpr auto kFinalizeGrace = std::chrono::seconds(3);

struct MpiSession {
  MpiSession(int* argc, char*** argv) { MPI_CHECK(MPI_Init(argc, argv)); }
  ~MpiSession() {
    // MPICH 4.0.2 (Debian 12, ch4:ucx) with UCX over TCP can leave a rank
    // waiting forever in MPI_Finalize for an acknowledgement from a peer that
    // has already gone on to the final PMI barrier (docs/mpi_stage.md: seen
    // across hosts and on one host with UCX_TLS=tcp), and a launcher that
    // stops answering (Hydra's proxy stopped or wedged) leaves it in the
    // barrier's read on the PMI socket (mpi_test checks this). Everything the
    // job had to do is done by then, so a watchdog ends this process with the
    // status it was going to return instead of letting the job hang.
    std::thread([] {
      std::this_thread::sleep_for(kFinalizeGrace);
      // Through the console: a stalled launcher's full pipe must not keep it from ending the process.
      console::err(fmt::format("note: MPI_Finalize did not return within {} s (a peer or the launcher did not "
                               "answer; MPICH/UCX over TCP is known to); ending the process, its work complete\n",
                               kFinalizeGrace.count()));
      std::_Exit(g_status_if_finalize_hangs.load());
    }).detach();
    MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

class MpiCommunicator final : public Communicator {
 public:
  static constexpr size_t kChunk = size_t{1} << 30;  // elements per MPI call: counts are int

  // The world (MPI_COMM_WORLD), or a sub-group that owns `comm`.
  MpiCommunicator(std::shared_ptr<MpiSession> session, MPI_Comm comm, size_t chunk)
      : session_(std::move(session)), comm_(comm), chunk_(chunk) {
    // Errors come back as return codes (checked above), not as aborts.
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    MPI_CHECK(MPI_Comm_size(node, &local_size_));
    MPI_CHECK(MPI_Comm_free(&node));
    requests_.reserve(256);  // buckets in flight: no allocation inside a step
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);  // before session_ may finalise
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  void set_chunk(size_t elements) { chunk_ = elements; }

  std::string name() const override { return "mpi"; }
  // MPI_Get_library_version's first line, "MPICH Version:\t4.0.2" as "MPICH 4.0.2".
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(text, &len);
    std::string v(text, static_cast<size_t>(std::max(len, 0)));
    v = v.substr(0, v.find('\n'));
    if (const size_t at = v.find(" Version:"); at != std::string::npos) v.erase(at, std::strlen(" Version:"));
    std::replace(v.begin(), v.end(), '\t', ' ');
    v.erase(std::unique(v.begin(), v.end(), [](char x, char y) { return x == ' ' && y == ' '; }), v.end());
    return {{"mpi", v}};
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  bool all_equal(uint64_t x) override {
    unsigned long long v[2] = {x, ~x};  // max of x and max of ~x (= ~min of x)
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm_));
    return v[0] == x && ~v[1] == x;
  }
  void barrier() override {
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(comm_, &req));
    idle_wait(&req);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  void progress() override {
    int flag = 0;
    if (!requests_.empty()) {
      MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE));
    } else if (in_flight(sends_) || in_flight(recvs_)) {  // a probe runs MPICH's progress engine for them
      MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE));
    }
  }
  void wait_all() override {
    MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
  }

 protected:
  void do_broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += chunk_) {
      MPI_Request req;
      MPI_CHECK(MPI_Ibcast(p + off, piece(bytes, off), MPI_BYTE, root, comm_, &req));
      idle_wait(&req);
    }
  }
  void do_allreduce_sum(float* data, size_t count) override {
    for (size_t off = 0; off < count; off += chunk_) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, piece(count, off), MPI_FLOAT, MPI_SUM, comm_));
    }
  }
  double do_allreduce_sum(double x) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm_));
    return x;
  }
  void do_start_allreduce_sum(float* data, size_t count) override {
    for (size_t off = 0; off < count; off += chunk_) {
      requests_.emplace_back();
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, piece(count, off), MPI_FLOAT, MPI_SUM, comm_,
                               &requests_.back()));
    }
  }

  // One non-blocking call when the count fits an int; else the blocking form.
  void do_start_reduce_scatter_sum(const float* send, float* recv, size_t chunk) override {
    if (chunk > chunk_) return do_reduce_scatter_sum(send, recv, chunk);
    requests_.emplace_back();
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(chunk), MPI_FLOAT, MPI_SUM, comm_,
                                        &requests_.back()));
  }
  void do_start_all_gather(const float* send, float* recv, size_t chunk) override {
    if (chunk > chunk_) return do_all_gather(send, recv, chunk);
    requests_.emplace_back();
    MPI_CHECK(MPI_Iallgather(send, static_cast<int>(chunk), MPI_FLOAT, recv, static_cast<int>(chunk), MPI_FLOAT,
                             comm_, &requests_.back()));
  }

  void do_reduce_scatter_sum(const float* send, float* recv, size_t chunk) override {
    const size_t mine = static_cast<size_t>(rank_) * chunk;
    const bool in_place = recv == send + mine;
    if (chunk <= chunk_) {
      if (!in_place) {
        MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(chunk), MPI_FLOAT, MPI_SUM, comm_));
        return;
      }
      // MPI's in-place form leaves the sum at the start of the buffer (in
      // rank 0's chunk); it belongs in this rank's.
      float* whole = recv - mine;
      MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, static_cast<int>(chunk), MPI_FLOAT, MPI_SUM, comm_));
      if (mine > 0) std::memcpy(recv, whole, chunk * sizeof(float));
      return;
    }
    // Longer than an int count: piece by piece, each rank's block summed onto
    // that rank by MPI_Reduce. (MPI defines MPI_SUM on plain floats only, not
    // on a BlockPiece, which would do all the blocks in one call.)
    for (size_t off = 0; off < chunk; off += chunk_) {
      for (int r = 0; r < size_; ++r) {
        const float* block = send + static_cast<size_t>(r) * chunk + off;
        const void* in = r == rank_ && in_place ? MPI_IN_PLACE : block;
        MPI_CHECK(MPI_Reduce(in, r == rank_ ? recv + off : nullptr, piece(chunk, off), MPI_FLOAT, MPI_SUM, r, comm_));
      }
    }
  }
  void do_all_gather(const float* send, float* recv, size_t chunk) override {
    const bool in_place = send == recv + static_cast<size_t>(rank_) * chunk;
    for (size_t off = 0; off < chunk; off += chunk_) {
      const int n = piece(chunk, off);
      const BlockPiece p(static_cast<size_t>(n), chunk);
      if (in_place) {
        MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv + off, p.count, p.type, comm_));
      } else {
        MPI_CHECK(MPI_Allgather(send + off, n, MPI_FLOAT, recv + off, p.count, p.type, comm_));
      }
    }
  }

  std::unique_ptr<Communicator> do_split(int color, int key) override {
    MPI_Comm sub;
    MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(session_, sub, chunk_);
  }

  // Point to point (send: recv_count 0; recv: send_count 0). One message per
  // piece, both sides cutting the same count the same way (the receiver
  // checks each piece's length). Piece i of the send and piece i of the
  // receive are in flight together; every rank's i-th pieces match other
  // ranks' i-th pieces, so the pieces cannot deadlock whatever the two counts.
  void do_send_recv(const char* verb, const float* send_data, size_t send_count, int dest, float* recv_data,
                    size_t recv_count, int source) override {
    for (size_t off = 0; off < std::max(send_count, recv_count); off += chunk_) {
      MPI_Request req[2];
      MPI_Status status[2];
      int n = 0;
      if (off < recv_count) {
        MPI_CHECK(MPI_Irecv(recv_data + off, piece(recv_count, off), MPI_FLOAT, source, 0, comm_, &req[n++]));
      }
      if (off < send_count) {
        MPI_CHECK(MPI_Isend(send_data + off, piece(send_count, off), MPI_FLOAT, dest, 0, comm_, &req[n++]));
      }
      idle_wait(req, n, status);
      if (off < recv_count) check_received(status[0], piece(recv_count, off), off, recv_count, source, verb);
    }
  }

  // The typed host verbs as MPI_BYTE (their sizes fit an int: checked).
  void do_all_gather_bytes(const void* send, void* recv, size_t bytes) override {
    const int n = static_cast<int>(bytes);
    if (send == static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes) {
      MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_BYTE, comm_));
    } else {
      MPI_CHECK(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_));
    }
  }
  void do_send_recv_bytes(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes,
                          int source) override {
    MPI_Request req[2];
    MPI_Status status[2];
    int n = 0;
    if (recv_bytes > 0) {
      MPI_CHECK(MPI_Irecv(recv_data, static_cast<int>(recv_bytes), MPI_BYTE, source, 0, comm_, &req[n++]));
    }
    if (send_bytes > 0) {
      MPI_CHECK(MPI_Isend(send_data, static_cast<int>(send_bytes), MPI_BYTE, dest, 0, comm_, &req[n++]));
    }
    idle_wait(req, n, status);
    if (recv_bytes > 0) {
      int got = 0;
      MPI_CHECK(MPI_Get_count(&status[0], MPI_BYTE, &got));
      if (static_cast<size_t>(got) != recv_bytes) {
        throw std::runtime_error(fmt::format("send_recv: expected {} bytes from rank {}, got {} (the sender's count "
                                             "differs)", recv_bytes, source, got));
      }
    }
  }

  // One Isend per piece, as do_send_recv cuts them (the receiver's recv
  // checks each piece), kept under the ticket until wait_send.
  // The stream is the message's tag.
  uint64_t do_start_send(const float* data, size_t count, int peer, int stream) override {
    return post(sends_, count, peer, [&](size_t off, MPI_Request* r) {
      MPI_CHECK(MPI_Isend(data + off, piece(count, off), MPI_FLOAT, peer, stream, comm_, r));
    });
  }
  void do_wait_send(uint64_t ticket) override {
    Slot& slot = slot_of(sends_, ticket, "wait_send: no send");
    idle_wait(slot.requests.data(), static_cast<int>(slot.requests.size()));
    slot.ticket = 0;
  }
  // One Irecv per piece, as do_send_recv cuts them; wait_recv checks each piece's length.
  uint64_t do_start_recv(float* data, size_t count, int peer, int stream) override {
    return post(recvs_, count, peer, [&](size_t off, MPI_Request* r) {
      MPI_CHECK(MPI_Irecv(data + off, piece(count, off), MPI_FLOAT, peer, stream, comm_, r));
    });
  }
  void do_wait_recv(uint64_t ticket) override {
    Slot& slot = slot_of(recvs_, ticket, "wait_recv: no receive");
    slot.statuses.resize(slot.requests.size());
    idle_wait(slot.requests.data(), static_cast<int>(slot.requests.size()), slot.statuses.data());
    slot.ticket = 0;
    for (size_t i = 0, off = 0; i < slot.statuses.size(); ++i, off += chunk_) {
      check_received(slot.statuses[i], piece(slot.count, off), off, slot.count, slot.peer, "recv");
    }
  }

 private:
  // Elements in the piece of `count` starting at `off`.
  int piece(size_t count, size_t off) const { return static_cast<int>(std::min(chunk_, count - off)); }

  std::shared_ptr<MpiSession> session_;
  MPI_Comm comm_;
  size_t chunk_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<MPI_Request> requests_;
  // A non-blocking send's or receive's requests (one a piece) under its ticket.
  struct Slot {
    uint64_t ticket = 0;  // 0: free
    size_t count = 0;
    int peer = 0;
    std::vector<MPI_Request> requests;
    std::vector<MPI_Status> statuses;
  };
  // A message of `count` floats to or from `peer` started piece by piece
  // (start(off, request) for each piece's offset) in a free slot, whose lists
  // keep their capacity (after the first steps a send or receive allocates
  // nothing); returns its new ticket.
  template <typename Start>
  uint64_t post(std::vector<Slot>& slots, size_t count, int peer, Start&& start) {
    auto slot = std::find_if(slots.begin(), slots.end(), [](const Slot& s) { return s.ticket == 0; });
    if (slot == slots.end()) slot = slots.emplace(slots.end());
    slot->ticket = ++last_ticket_;
    slot->count = count;
    slot->peer = peer;
    slot->requests.assign((count + chunk_ - 1) / chunk_, MPI_REQUEST_NULL);
    for (size_t i = 0; i < slot->requests.size(); ++i) start(i * chunk_, &slot->requests[i]);
    return slot->ticket;
  }
  static Slot& slot_of(std::vector<Slot>& slots, uint64_t ticket, const char* missing) {
    auto it = std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return s.ticket == ticket; });
    if (ticket == 0 || it == slots.end()) throw std::logic_error(fmt::format("{} {} in flight", missing, ticket));
    return *it;
  }
  static bool in_flight(const std::vector<Slot>& slots) {
    return std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.ticket != 0; });
  }
  std::vector<Slot> sends_;  // start_send's in flight, by ticket
  std::vector<Slot> recvs_;  // start_recv's in flight, by ticket
  uint64_t last_ticket_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(std::make_shared<MpiSession>(argc, argv), MPI_COMM_WORLD,
                                           MpiCommunicator::kChunk);
}

void set_exit_status_if_finalize_hangs(int status) { g_status_if_finalize_hangs.store(status); }

void set_mpi_chunk_for_testing(Communicator& comm, size_t elements) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&comm);
  if (mpi == nullptr || elements == 0) {
    throw std::invalid_argument(fmt::format("set_mpi_chunk_for_testing: needs an MPI communicator ('{}' given) and "
                                            "a positive chunk ({} given)", comm.name(), elements));
  }
  mpi->set_chunk(elements);
}

}  // namespace gpt2
