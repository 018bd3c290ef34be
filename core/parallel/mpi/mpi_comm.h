// The MPI communicator (MPICH). Built only when Meson finds MPI; the mpi and
// mpi_cuda stages link it. make_mpi_communicator initialises MPI and returns
// the world; split() gives sub-groups, each owning its MPI_Comm. MPI is
// finalised when the last of them is destroyed. Every MPI call is checked: a
// failure throws naming the call, the file and the line.
#pragma once

#include <cstddef>
#include <memory>

#include "parallel/comm.h"

namespace gpt2 {

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);

// MPI_Finalize (when the last communicator goes) is watched: if it has not
// returned within 3 s, the process ends with `status` (default 0). A program
// sets the status it is about to return, so that an MPI library that hangs in
// finalize (MPICH 4.0.2 with UCX over TCP does) cannot hang a finished job.
void set_exit_status_if_finalize_hangs(int status);

// Test-only: the most elements (bytes for broadcast) one MPI call of `comm`
// moves, 2^30 by default since MPI counts are int; larger counts go in
// several calls. Tests shrink it to run those paths without gigabytes.
// Sub-groups split from `comm` afterwards inherit it. Throws
// std::invalid_argument if `comm` is not an MPI communicator or elements is 0.
void set_mpi_chunk_for_testing(Communicator& comm, size_t elements);

}  // namespace gpt2
