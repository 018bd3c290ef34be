// Stage 3: MPI+CUDA data parallelism. Launched as `mpiexec -n R mpi_cuda
// train ...`: rank r binds GPU (local rank % GPUs on its machine), computes
// its B/R rows of each global batch, and the gradients are summed on the GPUs
// by NCCL (unique id broadcast over MPI), or staged through the host and MPI
// where ranks share a GPU. GPT2_CUDA_ALLREDUCE=auto|nccl|host overrides the
// choice. Everything else is the core's; without a CUDA device every rank
// exits with status 3 (skipped).
#include <cstdlib>

#include "app/cli.h"
#include "parallel/mpi/mpi_comm.h"
#include "parallel/nccl/cuda_comm.h"
#include "kernels/cpu/omp_wait.h"
#include "kernels/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  gpt2::cpu::set_omp_wait_policy(argv);  // before MPI_Init
  auto mpi = gpt2::make_mpi_communicator(&argc, &argv);
  const char* env = std::getenv("GPT2_CUDA_ALLREDUCE");
  gpt2::DeviceAllreduce mode = gpt2::DeviceAllreduce::kAuto;
  try {
    mode = gpt2::parse_device_allreduce(env ? env : "", "GPT2_CUDA_ALLREDUCE");
  } catch (const std::invalid_argument& e) {
    return gpt2::stage_main_error({"mpi_cuda", {}, mpi.get(), {}}, e.what(), gpt2::kExitUsage);
  }
  auto comm = gpt2::make_cuda_mpi_communicator(*mpi, mode);
  gpt2::BackendKind kind = gpt2::cuda_backend_kind();
  kind.make = [&comm, make = kind.make](const gpt2::BackendOptions& o) {
    gpt2::BackendOptions bound = o;
    bound.device_hint = comm->local_rank();
    auto be = make(bound);
    comm->bind(*be);
    return be;
  };
  const int status = gpt2::stage_main(argc, argv, {"mpi_cuda", kind, comm.get(), {}},
                          "Rank r uses GPU (local rank % GPUs). Gradients are summed by NCCL where each rank of a\n"
                          "machine has its own GPU, else staged through host memory and MPI; the environment\n"
                          "variable GPT2_CUDA_ALLREDUCE=auto|nccl|host overrides the choice. Without a CUDA\n"
                          "device every rank exits with status 3.\n");
  gpt2::set_exit_status_if_finalize_hangs(status);
  return status;
}
