// Communicator: the collectives data parallelism needs, chosen once at
// start-up: `local` (one process; every collective is the identity) or
// `mpi` (core/comm/mpi, MPICH). Data parallelism is one sum-allreduce of the
// flat gradient buffer per step, optionally in buckets started while the
// backward pass is still running (GradientSync below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpt2 {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's index among the ranks of its machine, and their number
  // (how the CUDA stages pick a GPU).
  virtual int local_rank() const { return 0; }
  virtual int local_size() const { return 1; }
  // Copies `bytes` from `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // In place: data = sum over ranks of data. `data` is in the memory of the
  // rank's backend (the gradient buffer): device memory in the MPI+CUDA stage.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual double allreduce_sum(double x) = 0;
  // True on every rank iff every rank passed the same value.
  virtual bool all_equal(uint64_t x) = 0;
  // Waits for every rank without spinning a core (sleeps between polls).
  virtual void barrier() = 0;
  // Ends every rank of the job with `code`; does not return.
  [[noreturn]] virtual void abort(int code) = 0;
  // Non-blocking sum-allreduce of a range; completed by wait_all().
  virtual void start_allreduce_sum(float* data, size_t count) = 0;
  // Lets started operations advance (MPICH progresses only inside MPI calls).
  virtual void progress() = 0;
  virtual void wait_all() = 0;
};

std::unique_ptr<Communicator> make_local_communicator();

// Broadcast helpers for variable-size data (sizes first).
void broadcast_strings(Communicator& comm, std::vector<std::string>& v, int root);
void broadcast_ints(Communicator& comm, std::vector<int32_t>& v, int root);

}  // namespace gpt2
