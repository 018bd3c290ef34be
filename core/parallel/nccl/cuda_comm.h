// The MPI+CUDA stage's communicator. MPI carries everything small (the corpus,
// checkpoints' state, the loss, checks) and every verb on host memory; the
// float verbs on device memory (allreduce_sum, reduce_scatter_sum,
// all_gather, send, recv, send_recv) go through one of:
//   * NCCL, on the backend's stream (the unique id is broadcast over MPI);
//     the default where every rank of a machine has a GPU of its own;
//   * host-staged MPI: download, the MPI verb, upload; the fallback where
//     ranks share a GPU (NCCL refuses two ranks on one device) or on request.
// The ranks of a communicator agree on one path (mixing NCCL and MPI would
// hang), collectively: at the first collective verb on device memory, or in
// split() for a sub-group. Point to point on device memory before that is an
// error. broadcast takes host memory only. Built only with both MPI and CUDA.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "parallel/comm.h"

namespace gpt2 {

enum class DeviceAllreduce { kAuto, kNccl, kHostStaged };

// "auto" | "nccl" | "host"; throws std::invalid_argument naming `what`.
DeviceAllreduce parse_device_allreduce(const std::string& name, const std::string& what);

class CudaMpiCommunicator : public Communicator {
 public:
  // Binds the device verbs to the CUDA backend `be` (its stream and device
  // memory), before the first verb on device memory. Local: the path is
  // chosen (collectively) at the first collective verb on device memory.
  // split() of a bound communicator gives a bound sub-group, whose path is
  // chosen there; bind on every rank before splitting, or on none.
  virtual void bind(Backend& be) = 0;
};

std::unique_ptr<CudaMpiCommunicator> make_cuda_mpi_communicator(Communicator& mpi, DeviceAllreduce mode);

}  // namespace gpt2
