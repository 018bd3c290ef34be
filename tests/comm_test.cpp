// The Communicator's verbs on host memory, a GoogleTest program under
// mpiexec (suite mpi; tests/mpi_test_main.h: every rank runs every test,
// rank 0 prints, any rank's failure fails the job):
//   mpiexec -n R comm_test          (meson runs R = 1, 2 and 4)
// On the local communicator, and on the MPI world and its sub-groups
// (tests/comm_checks.h: pairs, parities in reversed order, nested splits):
// every verb with exact values, then again with MPI's per-call chunk shrunk
// to 3 elements (set_mpi_chunk_for_testing), so counts of several chunks,
// and chunks of reduce_scatter and all_gather cut across ranks' blocks, run
// the paths that counts beyond an int take; bad arguments refused at the
// front door; a recv whose sender's count differs; the started send and
// receive of context parallelism's ring. Prints the number of
// checks made on rank 0 (416, 430, 444 at R = 1, 2, 4).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm_checks.h"
#include "parallel/mpi/mpi_comm.h"
#include "mpi_test_main.h"

namespace gpt2 {
namespace {

using testing::expect_rejects;
using testing::Group;

// MPI's per-call chunk by default (mpi_comm.h: 2^30 elements); a test that
// shrinks a communicator's chunk puts it back.
constexpr size_t kDefaultChunk = size_t{1} << 30;

// What every test shares, built on every rank before the tests (the splits
// are collective) and freed after them, before MPI is finalised.
struct Context {
  Communicator& world;
  std::unique_ptr<Communicator> local = make_local_communicator();
  testing::Groups groups{world, world.rank()};
};
Context* g_context = nullptr;

class ContextEnvironment : public ::testing::Environment {
 public:
  explicit ContextEnvironment(Communicator& world) : world_(world) {}
  void SetUp() override { g_context = new Context{world_}; }
  void TearDown() override {
    delete g_context;
    g_context = nullptr;
  }

 private:
  Communicator& world_;
};

Communicator& world() { return g_context->world; }

// ---- The local communicator (one process, no MPI) ----

class Local : public testing::MpiTest {};

Group local_group() {
  const int w = world().rank();
  return {g_context->local.get(), {w}, w, "local"};
}

TEST_F(Local, EveryVerb) {
  testing::HostArrays arrays;
  testing::check_verbs(local_group(), arrays, 7, 3);
}

TEST_F(Local, ArgumentErrors) { testing::check_argument_errors(local_group()); }

TEST_F(Local, EveryVerbOfASplit) {
  const int w = world().rank();
  auto sub = g_context->local->split(5, -1);
  testing::HostArrays arrays;
  testing::check_verbs({sub.get(), {w}, w, "local, split"}, arrays, 7, 3);
}

TEST_F(Local, RefusesAChunk) {
  expect_rejects("set_mpi_chunk_for_testing on the local communicator",
                 [&] { set_mpi_chunk_for_testing(*g_context->local, 3); }, "needs an MPI communicator ('local' given)");
}

// ---- The MPI world and its sub-groups ----

class MpiGroup : public testing::MpiTest, public ::testing::WithParamInterface<size_t> {
 protected:
  static Group group(size_t i) { return g_context->groups.list.at(i); }
};

TEST_P(MpiGroup, EveryVerb) {
  testing::HostArrays arrays;
  testing::check_verbs(group(GetParam()), arrays, 11, 5);
}

TEST_P(MpiGroup, ArgumentErrors) { testing::check_argument_errors(group(GetParam())); }

// Chunks of 3 elements: 11 floats in 4 messages, chunks of 5 per rank in 2
// pieces of each rank's block; broadcast in pieces of 3 bytes.
TEST_P(MpiGroup, EveryVerbInMpiCallsOf3Elements) {
  Group g = group(GetParam());
  set_mpi_chunk_for_testing(*g.comm, 3);
  g.label += ", MPI calls of 3 elements";
  testing::HostArrays arrays;
  testing::check_verbs(g, arrays, 11, 5);
  testing::check_verbs(g, arrays, 6, 3);  // whole pieces only
  set_mpi_chunk_for_testing(*g.comm, kDefaultChunk);
}

INSTANTIATE_TEST_SUITE_P(Groups, MpiGroup, ::testing::Range(size_t{0}, testing::Groups::names().size()),
                         [](const auto& info) { return testing::Groups::names().at(info.param); });

class World : public testing::MpiTest {};

// A group split after the chunk was shrunk inherits it.
TEST_F(World, SplitAfterTheChunkShrankInheritsIt) {
  Communicator& w = world();
  const int r = w.rank(), R = w.size();
  set_mpi_chunk_for_testing(w, 3);
  auto halves = w.split(r < R / 2 ? 0 : 1, r);
  set_mpi_chunk_for_testing(w, kDefaultChunk);
  std::vector<int> members;
  for (int m = 0; m < R; ++m) {
    if ((m < R / 2) == (r < R / 2)) members.push_back(m);
  }
  testing::HostArrays arrays;
  testing::check_verbs({halves.get(), members, r, "halves, split after the chunk shrank"}, arrays, 11, 5);
}

TEST_F(World, RefusesAChunkOf0) {
  expect_rejects("set_mpi_chunk_for_testing to 0", [&] { set_mpi_chunk_for_testing(world(), 0); },
                 "a positive chunk (0 given)");
}

// Rank 0 sends 5 floats where rank 1 expects 6, then 6 where it expects 5:
// a short message is our error, a long one MPI's (truncated); neither hangs.
// Every rank meets at the barrier.
void check_count_mismatch(Communicator& w) {
  std::vector<float> buf(6, 1.0f);
  if (w.rank() == 0) {
    w.send(buf.data(), 5, 1);
    w.send(buf.data(), 6, 1);
  } else if (w.rank() == 1) {
    expect_rejects<std::runtime_error>("recv of 6 floats from a send of 5", [&] { w.recv(buf.data(), 6, 0); },
                                       "recv: expected 6 floats from rank 0, got 5");
    expect_rejects<std::runtime_error>("recv of 5 floats from a send of 6", [&] { w.recv(buf.data(), 5, 0); },
                                       "truncated");
  }
  w.barrier();
}

TEST_F(World, RecvOfAnotherCountIsAnError) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";  // the same on every rank
  check_count_mismatch(world());
}

TEST_F(World, RecvOfAnotherCountIsAnErrorInMpiCallsOf3Elements) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  set_mpi_chunk_for_testing(world(), 3);
  check_count_mismatch(world());
  set_mpi_chunk_for_testing(world(), kDefaultChunk);
}

// Context parallelism's shift (parallel/process_grid.h CommRing): each rank
// posts its receive from the previous rank and starts its send to the next,
// then waits for both; the message is the sender's, counted once each way.
// A posted receive of another count than the sender's is an error at its
// wait, as recv's is.
void check_started_ring(Communicator& w, size_t n) {
  const int R = w.size(), me = w.rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  std::vector<float> out(n), in(n, -1.0f), want(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(me * 1000 + static_cast<int>(i));
    want[i] = static_cast<float>(prev * 1000 + static_cast<int>(i));
  }
  w.reset_stats();
  const uint64_t r = w.start_recv(in.data(), n, prev), s = w.start_send(out.data(), n, next);
  w.progress();
  w.wait_recv(r);
  w.wait_send(s);
  EXPECT_EQ(in, want) << "a started ring of " << n << " floats";
  EXPECT_EQ(w.stats().calls, 2u);
  EXPECT_EQ(w.stats().bytes, 2 * n * sizeof(float));
  std::vector<float> six(6, 1.0f);
  if (me == 0) {
    w.send(six.data(), 5, 1);
  } else if (me == 1) {
    const uint64_t t = w.start_recv(six.data(), 6, 0);
    expect_rejects<std::runtime_error>("a started recv of 6 floats from a send of 5", [&] { w.wait_recv(t); },
                                       "recv: expected 6 floats from rank 0, got 5");
  }
  expect_rejects<std::logic_error>("wait_recv of no receive", [&] { w.wait_recv(12345); },
                                   "wait_recv: no receive 12345 in flight");
  w.barrier();
}

TEST_F(World, StartedSendAndReceiveMakeARing) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  check_started_ring(world(), 1000);
  set_mpi_chunk_for_testing(world(), 3);  // several pieces a message
  check_started_ring(world(), 10);
  set_mpi_chunk_for_testing(world(), kDefaultChunk);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  auto world = gpt2::make_mpi_communicator(&argc, &argv);
  try {
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new gpt2::ContextEnvironment(*world));
    const int status = gpt2::testing::run_mpi_tests(*world);
    if (world->rank() == 0) std::printf("comm_test: %d checks on rank 0\n", gpt2::testing::comm_checks());
    return status;
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", world->rank(), e.what());
    std::fflush(stdout);
    world->abort(1);
  }
}
