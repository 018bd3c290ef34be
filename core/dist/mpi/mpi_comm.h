// The MPI communicator (MPICH). Built only when Meson finds MPI; the mpi and
// mpi_cuda stages link it. Construction initialises MPI, destruction
// finalises it. Every MPI call is checked: a failure throws naming the call,
// the file and the line.
#pragma once

#include <memory>

#include "dist/comm.h"

namespace gpt2 {

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);

}  // namespace gpt2
