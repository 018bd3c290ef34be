// The MPI+CUDA stage's communicator. MPI carries everything small (the corpus,
// checkpoints' state, the loss, checks); the gradient allreduce works on
// device memory, through one of:
//   * NCCL, on the backend's stream (the unique id is broadcast over MPI);
//     the default where every rank of a machine has a GPU of its own;
//   * host-staged MPI: download, MPI allreduce, upload; the fallback where
//     ranks share a GPU (NCCL refuses two ranks on one device) or on request.
// Built only with both MPI and CUDA.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "dist/comm.h"

namespace gpt2 {

enum class DeviceAllreduce { kAuto, kNccl, kHostStaged };

// "auto" | "nccl" | "host"; throws std::invalid_argument naming `what`.
DeviceAllreduce parse_device_allreduce(const std::string& name, const std::string& what);

class CudaMpiCommunicator : public Communicator {
 public:
  // Binds the gradient allreduce to the CUDA backend `be` (its stream and
  // device memory), before the first allreduce of device memory. Local: NCCL
  // is set up (collectively) at the first gradient allreduce.
  virtual void bind(Backend& be) = 0;
};

std::unique_ptr<CudaMpiCommunicator> make_cuda_mpi_communicator(Communicator& mpi, DeviceAllreduce mode);

}  // namespace gpt2
