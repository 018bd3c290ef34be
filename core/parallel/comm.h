// Communicator: a group of ranks and the verbs they use to talk, chosen once
// at start-up: `local` (one process; every verb is the identity), `mpi`
// (parallel/mpi, MPICH) or the MPI+CUDA one (parallel/nccl: NCCL or host-staged MPI
// on device memory). split() makes the sub-groups of a parallel layout (TP,
// PP, DP groups) as Communicators of their own, with the same verbs.
//
// The verbs (Megatron-LM's collectives, as NCCL and MPI define them):
//   collective   broadcast, allreduce_sum, reduce_scatter_sum, all_gather,
//                all_equal, barrier, split: every rank of the communicator
//                calls them, in the same order, with the same counts;
//   point to     send, recv, send_recv: between two ranks of the
//   point        communicator; messages between two ranks arrive in the
//                order they were sent (there are no tags).
// Counts are in elements (floats) unless named bytes; `chunk` is the count
// per rank. Buffers are the caller's: nothing is allocated for the result.
//
// Memory: broadcast and the scalar verbs take host memory. The float verbs
// take the memory of the rank's backend (parallel/nccl/cuda_comm.h): device
// memory for the MPI+CUDA communicator (which also accepts host memory and
// sends it through MPI), host memory for local and mpi. On device memory a
// verb is ordered on the backend's stream like a kernel: later kernels see its
// result, the host sees it after Backend::synchronize() or a download.
//
// Arguments are checked here, at the front door, and a bad one throws
// std::invalid_argument naming the verb and the values; the implementations
// (the protected do_ functions) assume valid arguments. What one rank cannot
// see (ranks passing different counts, a send without its recv) is not
// checked: like in MPI it is undefined, and may hang.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpt2 {

// A host value the typed verbs move as its bytes: doubles, 64-bit counters,
// std::byte; floats take the float verbs (device memory included).
template <typename T>
concept HostValue = std::is_trivially_copyable_v<T> && !std::same_as<T, float>;

// What a communicator's verbs moved: calls of the data verbs (broadcast,
// the allreduces, reduce_scatter_sum, all_gather, send, recv, send_recv) and
// the bytes of their buffers (an allreduce of n floats: 4n; send_recv: both
// directions), counted only when the communicator has more than one rank.
// The metrics stream's per-group communication comes from here.
struct CommStats {
  uint64_t calls = 0, bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;  // 0 .. size()-1, in this communicator
  virtual int size() const = 0;
  // This rank's index among the ranks of this communicator on its machine,
  // and their number (how the CUDA stages pick a GPU).
  virtual int local_rank() const { return 0; }
  virtual int local_size() const { return 1; }
  // The communication libraries under it and their versions, for provenance:
  // {"mpi", "MPICH 4.0.2"}, {"nccl", "2.21.5"}; none for the local one.
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }

  // ---- Collectives ----

  // Copies `bytes` of host memory from `root` to every rank.
  void broadcast(void* data, size_t bytes, int root);
  // In place: data[0, count) = sum over ranks of data[0, count) (the gradient
  // buffer of data parallelism; Megatron's reduce_from_tensor_model_parallel).
  void allreduce_sum(float* data, size_t count);
  double allreduce_sum(double x) {
    count_call(sizeof x);
    return do_allreduce_sum(x);
  }
  // recv[0, chunk) = sum over ranks r of r's send[rank() * chunk, (rank()+1) * chunk):
  // send holds size() chunks of `chunk` floats, one per rank in rank order, and
  // each rank receives the sum of its own chunk (ZeRO's gradient shards). The
  // count is per rank, so there is no remainder: a buffer whose length is not
  // a multiple of size() is padded by the caller.
  // Out of place: recv[0, chunk) does not overlap send[0, size() * chunk).
  // In place: recv == send + rank() * chunk; the other chunks of send are
  // left unspecified. Any other overlap is an error.
  void reduce_scatter_sum(const float* send, float* recv, size_t chunk);
  // recv[r * chunk, (r+1) * chunk) = rank r's send[0, chunk), for every rank r
  // (ZeRO's parameter shards, Megatron's gather_from_...).
  // Out of place: send[0, chunk) does not overlap recv[0, size() * chunk).
  // In place: send == recv + rank() * chunk. Any other overlap is an error.
  void all_gather(const float* send, float* recv, size_t chunk);
  // True on every rank iff every rank passed the same value.
  virtual bool all_equal(uint64_t x) = 0;
  // Waits for every rank without spinning a core (sleeps between polls).
  virtual void barrier() = 0;
  // A new communicator over the ranks that passed the same `color` (>= 0),
  // ranked by `key` (ties by rank here): MPI_Comm_split. Every rank of this
  // communicator calls it. The sub-group has every verb; it may outlive
  // this communicator, and freeing it frees only the sub-group.
  std::unique_ptr<Communicator> split(int color, int key);

  // ---- Point to point (pipeline stages) ----

  // Sends data[0, count) to rank `peer`, which must recv exactly `count`
  // floats. Returns when `data` may be reused (on device memory: when the send
  // is ordered on the stream). Waiting sleeps between polls: it does not spin.
  // A rank may not send to itself (that blocking send could never complete):
  // use send_recv.
  void send(const float* data, size_t count, int peer);
  // Receives exactly `count` floats from rank `peer` into data[0, count); a
  // message of another length is an error. Waits without spinning.
  void recv(float* data, size_t count, int peer);
  // Sends send_data[0, send_count) to `dest` and receives recv_data[0,
  // recv_count) from `source` at once, so a ring of ranks each sending to the
  // next and receiving from the previous cannot deadlock (Megatron's
  // send_forward_recv_backward and friends). The buffers must not overlap.
  // dest == source == rank() is a copy.
  void send_recv(const float* send_data, size_t send_count, int dest, float* recv_data, size_t recv_count,
                 int source);
  // Non-blocking send of data[0, count) to `peer`, which receives it with
  // recv as usual: returns at once with a ticket, and `data` must stay as it
  // is until wait_send(ticket) returns. Pipeline stages send this way, so
  // that only receives wait (a schedule whose receives can all be met then
  // cannot deadlock, whatever the order of the two directions). Tickets may
  // be completed in any order; waiting sleeps between polls. Communicators
  // without it (the MPI+CUDA one) throw std::logic_error. `stream` (0 ..
  // kMaxStream; 0 is send's and recv's): messages between two ranks arrive
  // in order within a stream, and a receive takes only its own stream's, so
  // a pipeline with several chunks a rank keeps one stream per chunk and
  // direction (train/schedule/pipeline.h).
  static constexpr int kMaxStream = 32767;  // MPI's least tag upper bound
  uint64_t start_send(const float* data, size_t count, int peer, int stream = 0);
  void wait_send(uint64_t ticket);
  // Non-blocking receive of exactly `count` floats from `peer` into
  // data[0, count), posted now (so that the message can arrive while this
  // rank computes: context parallelism's ring); `data` is the message's
  // once wait_recv(ticket) returns, which checks its length as recv does.
  // The sender may use send or start_send. Communicators without it throw
  // std::logic_error, as for start_send.
  uint64_t start_recv(float* data, size_t count, int peer, int stream = 0);
  void wait_recv(uint64_t ticket);

  // ---- Host values of other types ----

  // all_gather and send_recv on host memory of another type than float (a
  // double, 64-bit counters: NCCL and MPI verbs take a datatype), with the
  // float verbs' rules: counts in elements of T, in place or disjoint for
  // all_gather, no overlap for send_recv. The values travel as their bytes
  // (at most 2^31 - 1 bytes a call: small values, not tensors).
  template <HostValue T>
  void all_gather(const T* send, T* recv, size_t chunk) {
    all_gather_bytes(send, recv, host_bytes("all_gather", chunk, sizeof(T)));
  }
  template <HostValue T>
  void send_recv(const T* send_data, size_t send_count, int dest, T* recv_data, size_t recv_count, int source) {
    send_recv_bytes(send_data, host_bytes("send_recv", send_count, sizeof(T)), dest, recv_data,
                    host_bytes("send_recv", recv_count, sizeof(T)), source);
  }

  // ---- Overlap and faults ----

  // Non-blocking sum-allreduce of a range; completed by wait_all().
  void start_allreduce_sum(float* data, size_t count);
  // Non-blocking reduce_scatter_sum and all_gather (out of place only; the
  // buffers stay untouched until wait_all() returns): ZeRO-2/3's gradient
  // pieces and prefetched weights (parallel/zero.h). A communicator without a
  // non-blocking form completes them at once.
  void start_reduce_scatter_sum(const float* send, float* recv, size_t chunk);
  void start_all_gather(const float* send, float* recv, size_t chunk);
  // Lets started operations advance (MPICH progresses only inside MPI calls).
  virtual void progress() = 0;
  virtual void wait_all() = 0;
  // Ends every rank of the job (not only of this communicator) with `code`;
  // does not return.
  [[noreturn]] virtual void abort(int code) = 0;

  // ---- Accounting ----
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  // The verbs above after their arguments were checked.
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_allreduce_sum(float* data, size_t count) = 0;
  virtual double do_allreduce_sum(double x) = 0;
  virtual void do_reduce_scatter_sum(const float* send, float* recv, size_t chunk) = 0;
  virtual void do_all_gather(const float* send, float* recv, size_t chunk) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;
  // send, recv and send_recv (named by `verb`, for messages): send is
  // recv_count == 0, recv is send_count == 0.
  virtual void do_send_recv(const char* verb, const float* send_data, size_t send_count, int dest, float* recv_data,
                            size_t recv_count, int source) = 0;
  virtual void do_start_allreduce_sum(float* data, size_t count) = 0;
  virtual void do_start_reduce_scatter_sum(const float* send, float* recv, size_t chunk) {
    do_reduce_scatter_sum(send, recv, chunk);
  }
  virtual void do_start_all_gather(const float* send, float* recv, size_t chunk) { do_all_gather(send, recv, chunk); }
  virtual uint64_t do_start_send(const float* data, size_t count, int peer, int stream);
  virtual void do_wait_send(uint64_t ticket);
  virtual uint64_t do_start_recv(float* data, size_t count, int peer, int stream);
  virtual void do_wait_recv(uint64_t ticket);
  // The typed host verbs, in bytes (checked: host memory, sizes, overlaps).
  virtual void do_all_gather_bytes(const void* send, void* recv, size_t bytes) = 0;
  virtual void do_send_recv_bytes(const void* send_data, size_t send_bytes, int dest, void* recv_data,
                                  size_t recv_bytes, int source) = 0;

 private:
  // count x size, refused (std::invalid_argument naming the verb) when it would wrap.
  static size_t host_bytes(const char* verb, size_t count, size_t size);
  void all_gather_bytes(const void* send, void* recv, size_t bytes);
  void send_recv_bytes(const void* send_data, size_t send_bytes, int dest, void* recv_data, size_t recv_bytes,
                       int source);
  void count_call(size_t bytes) {
    if (size() > 1) {
      ++stats_.calls;
      stats_.bytes += bytes;
    }
  }
  CommStats stats_;
};

// One process: the collectives are identities (out-of-place ones copy),
// split gives another one-rank communicator, send and recv have no peer
// (rank 0 is this rank: an error), send_recv with itself copies. Host memory
// only, but the in-place verbs touch no memory at all.
std::unique_ptr<Communicator> make_local_communicator();

// Collective: when some rank's `text` differs from rank 0's (compared by
// hash first: one small collective when every rank agrees), rank 0's text on
// every rank; none when all agree. What the ranks' agreement checks share
// (the command line, the configuration).
std::optional<std::string> root_text_if_ranks_differ(Communicator& comm, const std::string& text);

// Broadcast helpers for variable-size data (sizes first).
void broadcast_strings(Communicator& comm, std::vector<std::string>& v, int root);
void broadcast_ints(Communicator& comm, std::vector<int32_t>& v, int root);
// Every rank's `text`, in rank order, on every rank (small texts: records of a few KiB).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text);

}  // namespace gpt2
