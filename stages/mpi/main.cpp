// Stage 1: MPI data parallelism on the CPU. Launched as `mpiexec -n R mpi
// train ...`: every rank runs the CPU backend on its B/R rows of each global
// batch and the gradients are summed by one allreduce (MPICH) per step.
// Everything else is the core's.
#include "app/cli.h"
#include "parallel/mpi/mpi_comm.h"
#include "kernels/cpu/omp_wait.h"

int main(int argc, char** argv) {
  gpt2::cpu::set_omp_wait_policy(argv);  // before MPI_Init
  auto comm = gpt2::make_mpi_communicator(&argc, &argv);
  const int status = gpt2::stage_main(argc, argv, {"mpi", gpt2::cpu_backend_kind(), comm.get(), {}});
  gpt2::set_exit_status_if_finalize_hangs(status);
  return status;
}
