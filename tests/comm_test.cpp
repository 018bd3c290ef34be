// The Communicator's verbs on host memory, under mpiexec (suite mpi):
//   mpiexec -n R comm_test          (meson runs R = 1, 2 and 4)
// On the MPI world and its sub-groups (tests/comm_checks.h: pairs, parities
// in reversed order, nested splits) and on the local communicator: every
// verb with exact values, then again with MPI's per-call chunk shrunk to 3
// elements (set_mpi_chunk_for_testing), so counts of several chunks, and
// chunks of reduce_scatter and all_gather cut across ranks' blocks, run the
// paths that counts beyond an int take; bad arguments refused at the front
// door; a recv whose sender's count differs. Exit 0 only if every check on
// every rank passed.
#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "comm_checks.h"
#include "dist/mpi/mpi_comm.h"

namespace {

using gpt2::testing::Checks;
using gpt2::testing::Group;

// Rank 0 sends 5 floats where rank 1 expects 6, then 6 where it expects 5:
// a short message is our error, a long one MPI's (truncated); neither hangs.
void check_count_mismatch(Checks& c, gpt2::Communicator& world) {
  std::vector<float> buf(6, 1.0f);
  if (world.rank() == 0) {
    world.send(buf.data(), 5, 1);
    world.send(buf.data(), 6, 1);
  } else if (world.rank() == 1) {
    c.rejects<std::runtime_error>("recv of 6 floats from a send of 5", [&] { world.recv(buf.data(), 6, 0); },
                                  "recv: expected 6 floats from rank 0, got 5");
    c.rejects<std::runtime_error>("recv of 5 floats from a send of 6", [&] { world.recv(buf.data(), 5, 0); },
                                  "truncated");
  }
  world.barrier();
}

int run(gpt2::Communicator& world) {
  const int w = world.rank();
  Checks c(w);
  gpt2::testing::HostArrays arrays;

  auto local = gpt2::make_local_communicator();
  const Group local_group{local.get(), {w}, w, "local"};
  gpt2::testing::check_verbs(c, local_group, arrays, 7, 3);
  gpt2::testing::check_argument_errors(c, local_group);
  auto local_sub = local->split(5, -1);
  gpt2::testing::check_verbs(c, {local_sub.get(), {w}, w, "local, split"}, arrays, 7, 3);

  if (world.size() >= 2) check_count_mismatch(c, world);
  gpt2::testing::Groups groups(world, w);
  for (const Group& g : groups.list) {
    gpt2::testing::check_verbs(c, g, arrays, 11, 5);
    gpt2::testing::check_argument_errors(c, g);
  }
  // Chunks of 3 elements: 11 floats in 4 messages, chunks of 5 per rank in 2
  // pieces of each rank's block; broadcast in pieces of 3 bytes.
  for (Group g : groups.list) {
    gpt2::set_mpi_chunk_for_testing(*g.comm, 3);
    g.label += ", MPI calls of 3 elements";
    gpt2::testing::check_verbs(c, g, arrays, 11, 5);
    gpt2::testing::check_verbs(c, g, arrays, 6, 3);  // whole pieces only
  }
  // A group split after the chunk was shrunk inherits it.
  auto halves = world.split(w < world.size() / 2 ? 0 : 1, w);
  std::vector<int> members;
  for (int r = 0; r < world.size(); ++r) {
    if ((r < world.size() / 2) == (w < world.size() / 2)) members.push_back(r);
  }
  gpt2::testing::check_verbs(c, {halves.get(), members, w, "halves, split after the chunk shrank"}, arrays, 11, 5);

  c.rejects("set_mpi_chunk_for_testing on the local communicator",
            [&] { gpt2::set_mpi_chunk_for_testing(*local, 3); }, "needs an MPI communicator ('local' given)");
  c.rejects("set_mpi_chunk_for_testing to 0", [&] { gpt2::set_mpi_chunk_for_testing(world, 0); },
            "a positive chunk (0 given)");
  if (world.size() >= 2) check_count_mismatch(c, world);  // in pieces of 3

  const double failed = world.allreduce_sum(static_cast<double>(c.failures()));
  if (w == 0) std::printf("%d checks on rank 0, %.0f failed over %d rank(s)\n", c.count(), failed, world.size());
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = gpt2::make_mpi_communicator(&argc, &argv);
  try {
    return run(*world);
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", world->rank(), e.what());
    std::fflush(stdout);
    world->abort(1);
  }
}
