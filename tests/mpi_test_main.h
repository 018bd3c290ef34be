// Running a GoogleTest program on every rank of an MPI job (comm_test,
// nccl_test), as `mpiexec -n R program [gtest flags]`:
//   * every rank runs every test, in the same order, so the collectives of a
//     test body meet their partners on the other ranks; a test body uses
//     EXPECT_*, never ASSERT_* (returning early would skip collectives and
//     leave the other ranks waiting);
//   * gtest does not catch exceptions here: a rank that throws ends the job
//     from main() (Communicator::abort) instead of going on to the next test
//     alone; --gtest_shuffle is turned off (each rank would draw its own order);
//   * only rank 0 prints gtest's output; every other rank prints just its
//     failures, each line starting "[ rank r ]";
//   * every test derives from MpiTest: after each test the ranks agree
//     whether it failed anywhere (a sum over the world), and rank 0 fails a
//     test that failed only on other ranks, naming them, so that its output
//     and summary are the job's verdict;
//   * the exit status is 1 on every rank if any test failed on any rank.
// Not here: the checks themselves (comm_checks.h) or what each program sets
// up (its main()).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "parallel/comm.h"

namespace gpt2::testing {

// On a rank other than 0, in place of gtest's printer: each failure with its
// rank, file and line.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[ rank %d ] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                r.message());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (!t.result()->Failed()) return;
    std::printf("[ rank %d ] FAILED %s.%s\n", rank_, t.test_suite_name(), t.name());
    std::fflush(stdout);
  }

 private:
  int rank_;
};

// The world of the job, for MpiTest (set by run_mpi_tests).
inline Communicator*& mpi_test_world() {
  static Communicator* world = nullptr;
  return world;
}

// The base of every test of these programs: after the body (passed, failed
// or skipped), the ranks sum whether it failed on each (every rank runs the
// same tests in the same order, so the sums pair up), and on rank 0 a test
// that failed only elsewhere fails too, naming those ranks: rank 0's
// verdicts, and its summary, are the job's.
class MpiTest : public ::testing::Test {
 protected:
  void TearDown() override {
    Communicator& world = *mpi_test_world();
    const bool here = HasFailure();
    const int R = world.size();
    const double ranks = world.allreduce_sum(here ? 1.0 : 0.0);
    // Which: a sum of 2^rank over the ranks that failed, exact up to 53 ranks.
    const double mask = R <= 53 ? world.allreduce_sum(here ? std::ldexp(1.0, world.rank()) : 0.0) : 0.0;
    if (world.rank() != 0 || here || ranks == 0) return;
    std::string which;
    for (int r = 0; r < R && R <= 53; ++r) {
      if ((static_cast<uint64_t>(mask) >> r) & 1) which += (which.empty() ? "" : ", ") + std::to_string(r);
    }
    ADD_FAILURE() << "failed on " << ranks << " other rank(s)" << (which.empty() ? "" : " (" + which + ")")
                  << ": their failures are printed there, each line starting \"[ rank r ]\"";
  }
};

// RUN_ALL_TESTS on every rank of `world`, after InitGoogleTest: returns 0 on
// every rank if every test passed on every rank, else 1.
inline int run_mpi_tests(Communicator& world) {
  GTEST_FLAG_SET(catch_exceptions, false);
  GTEST_FLAG_SET(shuffle, false);
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  mpi_test_world() = &world;
  const int here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Failures outside a test (an environment's SetUp) count too.
  const double ranks = world.allreduce_sum(static_cast<double>(here));
  if (world.rank() == 0) {
    if (ranks == 0) {
      std::printf("every test passed on all %d rank(s)\n", world.size());
    } else {
      // Rank 0 failed every test that failed elsewhere (MpiTest), so its count is the job's.
      std::printf("FAILED: %d test(s) failed on some of the %d rank(s)%s\n",
                  ::testing::UnitTest::GetInstance()->failed_test_count(), world.size(),
                  here ? "" : " (outside the tests, on another rank)");
    }
    std::fflush(stdout);
  }
  return ranks == 0 ? 0 : 1;
}

}  // namespace gpt2::testing
